"""Calibration speed and precision: privzv against dp-accounting and opacus, in one run.

Task (issues 2 and 9): the noise multiplier for epsilon=1, delta=1e-5, Poisson q=256/60000,
T=14062, add-remove (privzv's eavesdropper threat). Prints one JSON object: fresh-process wall
and CPU seconds (``privzv calibrate`` on this setting and on the README's example,
dp-accounting's PLD calibration, the bare imports), each tool's noise multiplier and seconds
in this process (privzv with ``best``, its default, with ``pld``, and ``rdp`` beside
dp-accounting's RDP calibration), privzv's speed-up over
dp-accounting's PLD calibration, the tight reference (:func:`tight_sigma`) and privzv's epsilon
re-checked by dp-accounting's PLD at discretisation 1e-5.

``--sweep`` adds issue 9's tightness grid (``--sweep-only``: only the grid; ``--deltas``,
``--epsilons``, ``--steps`` choose it): for every delta x epsilon x T x neighbours x threat,
privzv's calibration time (CPU seconds) and its relative gap to the tight noise multiplier
(exact GDP under ``device``; an independent PLD reference under the sampled threats).
Run: ``python benchmarks/bench_calibration.py [--sweep | --sweep-only]`` (opacus is the
``bench`` extra).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import sys
import time
from importlib import metadata

import dp_accounting as dpa
import numpy as np
from dp_accounting import mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

import privzv
from privzv import accountants
from privzv.accounting import account, calibrate
from privzv.release import THREATS, Release, Schedule
from privzv.threats import Exposure

EPSILON, DELTA, BATCH, DATASET, STEPS = 1.0, 1e-5, 256, 60000, 14062
Q = BATCH / DATASET
FINE = 1e-5


def event(z: float):
    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(Q, dpa.GaussianDpEvent(z)), STEPS)


def pld_epsilon(z: float, discretization: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=discretization)
    accountant.compose(event(z))
    return accountant.get_epsilon(DELTA)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def cpu_timed(fn):
    start = time.process_time()
    value = fn()
    return value, time.process_time() - start


def _clear_caches():
    accountants.clear_caches()


# issue 9's tightness grid (--sweep-only): every delta x epsilon x T x neighbours x threat
SWEEP_DELTAS = (1e-8, 1e-10, 1e-12)
SWEEP_EPSILONS = (0.01, 0.1, 1.0, 10.0, 100.0)
SWEEP_STEPS = (1000, 10_000, 100_000)
SUPER_BATCH = 1024  # secret-subsampling: B' (keep rate B/B' = 0.25)
REFINEMENTS = (2, 4)  # reference grids: privzv's step divided by these
REFERENCE_TAIL = 1e-30


def reference_epsilon(
    z: float, steps: int, q: float, neighbors: str, delta: float, discretization: float, aim: float
) -> float:
    """An estimate of the exact epsilon, independent of privzv's composition and reading.

    The single release's pessimistic connect-the-dots PMF is privzv.gaussian_pmf's (checked
    against 40-digit integrals and against dp-accounting's builder by
    tests/privzv/test_gaussian_pmf.py). It is tilted by e^{t l} with t chosen so that the
    tilted mean of the k-fold composition is ``aim`` (the epsilon being read; any t is exact,
    t only puts the FFT's precision there), composed in ONE stage by dp-accounting's own
    ``common.self_convolve``, untilted in log space and delta(eps) = sum_{l > eps} (1 - e^{eps-l})
    p_l + p_inf solved for delta by bisection."""
    from dp_accounting.pld import common as dpa_common
    from scipy import optimize, special

    from privzv import gaussian_pmf

    kinds = ("replace",) if neighbors == "replace-one" else ("remove", "add")
    singles = [
        gaussian_pmf.release_pmf(
            2.0 * z if kind == "replace" else z,
            sampling_prob=q,
            kind=kind,
            discretization=discretization,
            log_truncation=accountants._log_truncation(delta, steps),
        )
        for kind in kinds
    ]
    eps = -math.inf
    for pmf in singles:
        probs = np.maximum(pmf.probs, 0.0)
        losses = (pmf.lower + np.arange(len(probs))) * discretization
        with np.errstate(divide="ignore"):
            log_p = np.log(probs)

        def tilted(t):
            log_w = log_p + t * losses
            top = np.max(log_w)
            w = np.exp(log_w - top)
            return w / w.sum(), top + math.log(w.sum())

        def mean_gap(t):
            w, _ = tilted(t)
            return steps * float(np.sum(w * losses)) - aim

        hi = 1.0
        while mean_gap(hi) < 0 and hi < 1e7:
            hi *= 2.0
        t = (
            0.0
            if mean_gap(0.0) >= 0
            else hi
            if mean_gap(hi) < 0
            else optimize.brentq(mean_gap, 0.0, hi, xtol=1e-6 * hi)
        )
        w, log_m = tilted(t)
        lower, out = dpa_common.self_convolve(w, steps, tail_mass_truncation=REFERENCE_TAIL)
        composed = (steps * pmf.lower + lower + np.arange(len(out))) * discretization
        with np.errstate(divide="ignore"):
            log_true = np.log(np.maximum(out, 0.0)) + steps * log_m - t * composed
        infinity = -math.expm1(steps * math.log1p(-pmf.infinity_mass))
        # entries below delta e^-80 change delta by less than 1e-20 of itself
        keep = log_true > math.log(delta) - 80.0
        composed, log_true = composed[keep], log_true[keep]

        def log_delta(e):
            above = composed > e
            terms = log_true[above] + np.log(-np.expm1(e - composed[above]))
            return float(
                np.logaddexp(special.logsumexp(terms), math.log(infinity) if infinity > 0 else -math.inf)
            )

        top = float(composed[-1])
        if log_delta(0.0) <= math.log(delta):
            eps = max(eps, 0.0)
            continue
        eps = max(
            eps, optimize.brentq(lambda e: log_delta(e) - math.log(delta), 0.0, top, xtol=1e-12, rtol=1e-10)
        )
    return eps


def exact_device_noise_multiplier(epsilon: float, delta: float, k: int) -> float:
    """Without sampling, k Gaussian releases at z are exactly sqrt(k)/z-GDP (Dong, Roth & Su
    2022, Cor. 3.3); Cor. 2.13's delta(eps; mu) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
    solved for mu in 60-digit mpmath arithmetic (independent of privzv.gdp)."""
    import mpmath

    mpmath.mp.dps = 60
    eps = mpmath.mpf(epsilon)

    def excess(log_mu):
        mu = mpmath.e**log_mu
        return mpmath.log(
            mpmath.ncdf(-eps / mu + mu / 2) - mpmath.e**eps * mpmath.ncdf(-eps / mu - mu / 2)
        ) - mpmath.log(delta)

    low, high = mpmath.mpf(-30), mpmath.mpf(10)
    for _ in range(200):  # bisection in log mu: delta increases in mu
        mid = (low + high) / 2
        low, high = (mid, high) if excess(mid) < 0 else (low, mid)
    return float(mpmath.sqrt(k) / mpmath.e**high)


def _setting(eps, delta, steps, neighbors, threat):
    release = Release(clip=1.0, batch_size=BATCH, neighbors=neighbors)
    schedule = Schedule(
        steps=steps,
        dataset_size=DATASET,
        threat=threat,
        super_batch=SUPER_BATCH if threat == "secret-subsampling" else None,
    )
    return release, schedule


def tight_sigma(ours, release, schedule, eps: float, delta: float) -> dict:
    """The reference at privzv's noise multiplier z on grids REFINEMENTS times finer than
    privzv's, extrapolated to step 0 by the k Delta^2 law of the pessimistic rounding; the tight
    noise multiplier solves reference(z') = target along the slope of log epsilon against log z,
    taken from privzv's pld at z and 0.999 z (a 1% error in the slope moves the gap by 1% of
    itself)."""
    z, k, q = ours.noise_multiplier, ours.compositions, ours.sampling_rate
    step = accountants.pld_grid_step(z, Exposure(k, q), delta, accountants.pld_discretization(eps, k, delta))
    grids = [step / m for m in REFINEMENTS]
    start = time.process_time()
    values = [reference_epsilon(z, k, q, release.neighbors, delta, d, eps) for d in grids]
    reference = values[-1]
    if len(values) == 2:
        (d1, d2), (e1, e2) = grids, values
        reference = e2 - (e1 - e2) * d2**2 / (d1**2 - d2**2)
    cpu = time.process_time() - start
    near = account(release.with_noise_multiplier(0.999 * z), schedule, delta, "pld").epsilon
    slope = (math.log(ours.epsilon) - math.log(near)) / -math.log(0.999)
    tight = z * math.exp((math.log(eps) - math.log(reference)) / slope)
    return {
        "reference": "one-stage tilted PLD (dp-accounting's self_convolve), extrapolated to step 0",
        "reference_discretizations": grids,
        "reference_epsilons_at_answer": values,
        "reference_epsilon_at_answer": reference,
        "tight_noise_multiplier": tight,
        "relative_gap_to_tight": z / tight - 1.0,
        "epsilon_over_reference": ours.epsilon / reference - 1.0,
        "reference_cpu_seconds": cpu,
    }


def sweep(deltas, epsilons, steps_list, reference=True) -> dict:
    """privzv's best calibration over the grid (CPU seconds of the calibration, caches cleared)
    and, with ``reference``, its gap to the tight noise multiplier: exact GDP under ``device``,
    the reference PLD (:func:`tight_sigma`) under ``eavesdropper`` and ``secret-subsampling``
    (the latter at the smallest T only)."""
    rows = []
    for delta, eps, steps, neighbors, threat in itertools.product(
        deltas, epsilons, steps_list, ("add-remove", "replace-one"), THREATS
    ):
        if threat == "secret-subsampling" and steps != min(steps_list):
            continue
        release, schedule = _setting(eps, delta, steps, neighbors, threat)
        _clear_caches()
        ours, cpu = cpu_timed(lambda: calibrate(eps, delta, release, schedule, "best"))
        row = {
            "threat": threat,
            "epsilon": eps,
            "delta": delta,
            "steps": steps,
            "neighbors": neighbors,
            "compositions": ours.compositions,
            "sampling_rate": ours.sampling_rate,
            "noise_multiplier": ours.noise_multiplier,
            "epsilon_reached": ours.epsilon,
            "accountant": ours.accountant,
            "fallback": ours.fallback,
            "cpu_seconds": cpu,
        }
        if reference and ours.sampling_rate is None:
            tight = exact_device_noise_multiplier(eps, delta, ours.compositions)
            row.update(
                reference="exact GDP (mpmath)",
                tight_noise_multiplier=tight,
                relative_gap_to_tight=ours.noise_multiplier / tight - 1.0,
            )
        elif reference:
            row.update(tight_sigma(ours, release, schedule, eps, delta))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    timing = {
        "rows": rows,
        "max_cpu_seconds": max(r["cpu_seconds"] for r in rows),
        "accountants": sorted({r["accountant"] for r in rows}),
    }
    if not reference:
        return timing
    gaps = [r["relative_gap_to_tight"] for r in rows]
    worst = max(rows, key=lambda r: r["relative_gap_to_tight"])
    return {
        **timing,
        "largest_gap": max(gaps),
        "smallest_gap": min(gaps),
        "largest_gap_at": {k: worst[k] for k in ("threat", "epsilon", "delta", "steps", "neighbors")},
        "smallest_epsilon_over_reference": min(
            (r["epsilon_over_reference"] for r in rows if "epsilon_over_reference" in r), default=None
        ),
        "wrong_side": [
            r for r in rows if r["relative_gap_to_tight"] < 0 or r.get("epsilon_over_reference", 0.0) < 0
        ],
    }


def small_z_task() -> dict:
    """Side by side at a small noise multiplier (issue 9: 4.6 s before): epsilon 1, delta 1e-5,
    q = 256/60000, T = 1000, replace-one; privzv best against dp-accounting's PLD calibration
    (its default discretisation 1e-4), CPU seconds of this process and wall seconds."""
    release = Release(clip=1.0, batch_size=BATCH, neighbors="replace-one")
    schedule = Schedule(steps=1000, dataset_size=DATASET, threat="eavesdropper")
    _clear_caches()
    start = time.process_time()
    ours, wall = timed(lambda: calibrate(EPSILON, DELTA, release, schedule, "best"))
    cpu = time.process_time() - start

    def replace_event(z):  # dp-accounting's replace-one pair at noise multiplier 2z (module doc)
        return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(Q, dpa.GaussianDpEvent(2 * z)), 1000)

    start = time.process_time()
    theirs, their_wall = timed(
        lambda: mechanism_calibration.calibrate_dp_mechanism(
            lambda: pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE),
            replace_event,
            EPSILON,
            DELTA,
        )
    )
    their_cpu = time.process_time() - start
    return {
        "task": {
            "epsilon": EPSILON,
            "delta": DELTA,
            "sampling_rate": Q,
            "steps": 1000,
            "neighbors": "replace-one",
        },
        "privzv": {
            "noise_multiplier": ours.noise_multiplier,
            "epsilon": ours.epsilon,
            "accountant": ours.accountant,
            "seconds": wall,
            "cpu_seconds": cpu,
        },
        "dp_accounting_pld": {"noise_multiplier": theirs, "seconds": their_wall, "cpu_seconds": their_cpu},
        "speedup_vs_dp_accounting_pld": their_wall / wall,
        "cpu_speedup_vs_dp_accounting_pld": their_cpu / cpu,
    }


# (epsilon, delta, T, neighbours) at q = 256/60000 where the composition is longest
CONVERGENCE_SETTINGS = (
    (0.01, 1e-12, 10**8, "add-remove"),
    (1.0, 1e-12, 10**8, "replace-one"),
    (100.0, 1e-8, 10**8, "add-remove"),
    (1.0, 1e-5, 10**7, "add-remove"),
)
CONVERGENCE_REFINEMENTS = (1, 2, 4, 8)


def convergence() -> list[dict]:
    """Where no independent reference fits in memory (T = 1e7, 1e8): privzv's calibration, then
    its pld epsilon at the calibrated z on its own step and on steps 2, 4 and 8 times finer
    (same two-stage composition), extrapolated to step 0 by the Delta^2 law from the two finest,
    and the relative gap of privzv's answer to that limit (epsilon, and z through the slope of
    log epsilon against log z)."""
    rows = []
    for eps, delta, steps, neighbors in CONVERGENCE_SETTINGS:
        release, schedule = _setting(eps, delta, steps, neighbors, "eavesdropper")
        _clear_caches()
        ours, cpu = cpu_timed(lambda: calibrate(eps, delta, release, schedule, "best"))
        z = ours.noise_multiplier
        step = accountants.pld_grid_step(
            z, Exposure(steps, Q), delta, accountants.pld_discretization(eps, steps, delta)
        )
        values = [
            accountants._pld_epsilon(z, steps, Q, neighbors, delta, step / m) for m in CONVERGENCE_REFINEMENTS
        ]
        (d1, d2), (e1, e2) = [step / m for m in CONVERGENCE_REFINEMENTS[-2:]], values[-2:]
        limit = e2 - (e1 - e2) * d2**2 / (d1**2 - d2**2)
        near = accountants._pld_epsilon(0.999 * z, steps, Q, neighbors, delta, step)
        slope = (math.log(values[0]) - math.log(near)) / -math.log(0.999)
        rows.append(
            {
                "epsilon": eps,
                "delta": delta,
                "steps": steps,
                "neighbors": neighbors,
                "noise_multiplier": z,
                "accountant": ours.accountant,
                "cpu_seconds": cpu,
                "steps_tried": [step / m for m in CONVERGENCE_REFINEMENTS],
                "pld_epsilons": values,
                "extrapolated_epsilon": limit,
                "epsilon_over_limit": values[0] / limit - 1.0,
                "relative_gap_to_tight": math.exp(-(math.log(values[0]) - math.log(limit)) / slope) - 1.0,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


# (GDP mu of the whole run, delta, neighbours): 1e8 unsampled releases, exactly mu-GDP
EXACT_SETTINGS = (
    (0.0013, 1e-12, "add-remove"),
    (0.14, 1e-12, "add-remove"),
    (0.14, 1e-12, "replace-one"),
    (5.0, 1e-8, "add-remove"),
    (0.2, 1e-5, "add-remove"),
)


def gaussians_vs_exact() -> list[dict]:
    """1e8 Gaussian releases without sampling (q = 1) through the whole pld pipeline (one
    release's PMF, the two-stage tilted composition, the reading), against the exact epsilon
    of sqrt(k)/z-GDP (Dong, Roth & Su 2022, Cor. 3.3 and 2.13)."""
    from privzv import gdp

    rows, k = [], 10**8
    for mu, delta, neighbors in EXACT_SETTINGS:
        z = math.sqrt(k) / mu
        exact = gdp.epsilon_from_delta(mu, delta)
        step = accountants.pld_grid_step(
            z, Exposure(k, 1.0), delta, accountants.pld_discretization(exact, k, delta)
        )
        ours, cpu = cpu_timed(lambda: accountants._pld_epsilon(z, k, 1.0, neighbors, delta, step))
        rows.append(
            {
                "mu": mu,
                "delta": delta,
                "neighbors": neighbors,
                "exact_epsilon": exact,
                "pld_epsilon": ours,
                "relative_excess": ours / exact - 1.0,
                "cpu_seconds": cpu,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(","))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also run issue 9's grid")
    parser.add_argument("--sweep-only", action="store_true", help="only the grid")
    parser.add_argument(
        "--convergence",
        action="store_true",
        help="only privzv's pld at T = 1e7 and 1e8 on finer and finer grids, "
        "and 1e8 unsampled releases against exact GDP",
    )
    parser.add_argument(
        "--timing-only",
        action="store_true",
        help="the grid's calibrations and CPU seconds, without the reference",
    )
    parser.add_argument("--deltas", type=_floats, default=SWEEP_DELTAS)
    parser.add_argument("--epsilons", type=_floats, default=SWEEP_EPSILONS)
    parser.add_argument(
        "--steps", type=lambda t: tuple(int(float(v)) for v in t.split(",")), default=SWEEP_STEPS
    )
    args = parser.parse_args()
    if args.convergence:
        print(json.dumps({"convergence": convergence(), "gaussians_vs_exact": gaussians_vs_exact()}))
        return
    release = Release(clip=1.0, batch_size=BATCH, neighbors="add-remove")
    schedule = Schedule(steps=STEPS, dataset_size=DATASET, threat="eavesdropper")
    out = {} if args.sweep_only else {"fresh_process": fresh_process()}
    calibrate(
        EPSILON, DELTA, release, Schedule(steps=10, dataset_size=DATASET, threat="eavesdropper"), "best"
    )  # imports
    if not args.sweep_only:
        out.update(compare(release, schedule))
    if args.sweep or args.sweep_only:
        out["sweep"] = sweep(args.deltas, args.epsilons, args.steps, not args.timing_only)
    out["versions"] = {
        "privzv": privzv.__version__,
        "python": platform.python_version(),
        **{name: _version(name) for name in ("dp-accounting", "opacus", "numpy", "scipy")},
    }
    print(json.dumps(out))


CLI_SETTING = [
    "--epsilon",
    "1",
    "--delta",
    "1e-5",
    "--steps",
    str(STEPS),
    "--dataset-size",
    str(DATASET),
    "--batch-size",
    str(BATCH),
    "--clip",
    "1",
    "--threat",
    "eavesdropper",
    "--neighbors",
    "add-remove",
]
README_EXAMPLE = [
    "--epsilon",
    "1",
    "--delta",
    "1e-5",
    "--steps",
    "2000",
    "--dataset-size",
    "1437",
    "--batch-size",
    "32",
    "--clip",
    "1",
    "--devices",
    "4",
]
DP_ACCOUNTING_SCRIPT = f"""
import dp_accounting as dpa
from dp_accounting import mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant
event = lambda z: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent({Q!r},
                                                                     dpa.GaussianDpEvent(z)),
                                          {STEPS})
print(mechanism_calibration.calibrate_dp_mechanism(pld_privacy_accountant.PLDAccountant, event,
                                                   {EPSILON}, {DELTA}))
"""


def _fresh(argv: list[str]) -> dict:
    """Wall and CPU seconds (user + system, of the child) of one fresh Python process."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "command": " ".join(argv[1:]),
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "output_tail": done.stdout.strip().splitlines()[-1][:120],
    }


def fresh_process() -> dict:
    """One fresh process each, imports included: ``privzv calibrate`` on the benchmark setting
    and on the README's example, dp-accounting's PLD calibration of the benchmark setting, and
    the bare imports (python alone, dp-accounting alone)."""
    py = sys.executable
    return {
        "privzv_calibrate_benchmark_setting": _fresh(
            [py, "-m", "privzv", "calibrate", *CLI_SETTING, "--json"]
        ),
        "privzv_calibrate_readme_example": _fresh(
            [py, "-m", "privzv", "calibrate", *README_EXAMPLE, "--json"]
        ),
        "dp_accounting_calibration_benchmark_setting": _fresh([py, "-c", DP_ACCOUNTING_SCRIPT]),
        "python_alone": _fresh([py, "-c", "print(0)"]),
        "import_dp_accounting": _fresh([py, "-c", "import dp_accounting; print(0)"]),
        "import_privzv_accounting": _fresh([py, "-c", "import privzv.accounting; print(0)"]),
    }


def _calibrations(release: Release, schedule: Schedule, accountant: str, reference):
    """((privzv's Result, wall s, CPU s), (dp-accounting's z, wall s, CPU s)): privzv's
    ``accountant`` and dp-accounting's ``reference`` accountant class calibrating the benchmark
    setting one after the other, privzv's caches cleared first."""
    _clear_caches()
    (ours, t_ours), cpu_ours = cpu_timed(
        lambda: timed(lambda: calibrate(EPSILON, DELTA, release, schedule, accountant))
    )
    (theirs, t_theirs), cpu_theirs = cpu_timed(
        lambda: timed(lambda: mechanism_calibration.calibrate_dp_mechanism(reference, event, EPSILON, DELTA))
    )
    return (ours, t_ours, cpu_ours), (theirs, t_theirs, cpu_theirs)


def compare(release: Release, schedule: Schedule) -> dict:
    """The benchmark setting side by side (privzv, dp-accounting, opacus, the tight reference),
    then the small-noise-multiplier task."""
    _clear_caches()
    ours_pld, t_pld = timed(lambda: calibrate(EPSILON, DELTA, release, schedule, "pld"))
    (ours, t_ours, cpu_ours), (dpacc, t_dpacc, cpu_dpacc) = _calibrations(
        release, schedule, "best", pld_privacy_accountant.PLDAccountant
    )
    out = {
        "task": {
            "epsilon": EPSILON,
            "delta": DELTA,
            "sampling_rate": Q,
            "steps": STEPS,
            "neighbors": "add-remove",
            "sampling": "poisson",
        },
        "privzv": {
            "noise_multiplier": ours.noise_multiplier,
            "epsilon": ours.epsilon,
            "accountant": ours.accountant,
            "requested": "best",
            "seconds": t_ours,
            "cpu_seconds": cpu_ours,
        },
        "privzv_pld": {
            "noise_multiplier": ours_pld.noise_multiplier,
            "epsilon": ours_pld.epsilon,
            "seconds": t_pld,
        },
        "dp_accounting_pld": {"noise_multiplier": dpacc, "seconds": t_dpacc, "cpu_seconds": cpu_dpacc},
    }
    (ours_rdp, t_rdp, cpu_rdp), (dp_rdp, t_dp_rdp, cpu_dp_rdp) = _calibrations(
        release, schedule, "rdp", rdp_privacy_accountant.RdpAccountant
    )
    out["rdp"] = {
        "privzv": {"noise_multiplier": ours_rdp.noise_multiplier, "seconds": t_rdp, "cpu_seconds": cpu_rdp},
        "dp_accounting": {"noise_multiplier": dp_rdp, "seconds": t_dp_rdp, "cpu_seconds": cpu_dp_rdp},
        "cpu_speedup": cpu_dp_rdp / cpu_rdp,
    }
    try:
        from opacus.accountants.utils import get_noise_multiplier

        for name in ("rdp", "prv"):
            z, t = timed(
                lambda: get_noise_multiplier(
                    target_epsilon=EPSILON, target_delta=DELTA, sample_rate=Q, steps=STEPS, accountant=name
                )
            )
            out[f"opacus_{name}"] = {"noise_multiplier": z, "seconds": t}
    except ImportError:
        out["opacus"] = "not installed (pip install .[bench])"
    reference = tight_sigma(ours, release, schedule, EPSILON, DELTA)
    tight = reference["tight_noise_multiplier"]
    recheck = pld_epsilon(ours.noise_multiplier, FINE)
    out["tight_reference"] = reference
    out["privzv_vs_tight_relative"] = ours.noise_multiplier / tight - 1.0
    out["privzv_epsilon_at_fine_discretization"] = recheck
    out["speedup_vs_dp_accounting_pld"] = t_dpacc / t_ours
    out["cpu_speedup_vs_dp_accounting_pld"] = cpu_dpacc / cpu_ours
    out["small_noise_multiplier"] = small = small_z_task()
    out["targets_met"] = {
        "within_0.1_percent": abs(ours.noise_multiplier / tight - 1.0) <= 1e-3,
        "epsilon_recheck_le_target": recheck <= EPSILON,
        "speedup_ge_5": t_dpacc / t_ours >= 5.0,
        "cpu_speedup_ge_5": cpu_dpacc / cpu_ours >= 5.0,
        "small_z_speedup_ge_5": small["speedup_vs_dp_accounting_pld"] >= 5.0,
    }
    return out


if __name__ == "__main__":
    main()
