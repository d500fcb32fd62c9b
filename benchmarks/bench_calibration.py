"""Calibration speed and precision: privzv against dp-accounting and opacus, in one run.

Task (issues 2 and 9): the noise multiplier for epsilon=1, delta=1e-5, Poisson q=256/60000,
T=14062, add-remove (privzv's eavesdropper threat). Prints one JSON object: each tool's noise
multiplier and seconds (privzv with ``best``, its default, and with ``pld``), privzv's speed-up
over dp-accounting's PLD calibration, the tight reference (PLD at value discretisation 1e-5,
which takes a while) and privzv's epsilon re-checked at that discretisation.

``--sweep`` adds issue 9's grid: for settings across epsilon, delta and T, privzv's calibration
time (CPU seconds of this process) and, where the reference is affordable, its relative gap to
the tight sigma. Run: ``python benchmarks/bench_calibration.py [--sweep]`` (opacus is the
``bench`` extra).
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from importlib import metadata

import dp_accounting as dpa
from dp_accounting import mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as dpa_pld

import privzv
from privzv import accountants
from privzv.accounting import calibrate
from privzv.release import Release, Schedule

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
    accountants._pld_epsilon.cache_clear()
    accountants._rdp_epsilon.cache_clear()


# issue 9's ranges: (epsilon, delta, steps, neighbors); eavesdropper, q = 256/60000
SWEEP = [
    (1.0, 1e-5, 14062, "add-remove"),
    (1.0, 1e-5, 14062, "replace-one"),
    (0.01, 1e-5, 1000, "add-remove"),
    (0.1, 1e-5, 1000, "add-remove"),
    (1.0, 1e-5, 1000, "replace-one"),
    (8.0, 1e-5, 1000, "replace-one"),
    (8.0, 1e-12, 1000, "add-remove"),
    (1.0, 1e-12, 1_000_000, "add-remove"),
    (1.0, 1e-5, 1_000_000, "add-remove"),
    (1.0, 1e-5, 10_000_000, "add-remove"),
    (1.0, 1e-5, 100_000_000, "add-remove"),
    (1e4, 1e-5, 1000, "add-remove"),
    (1.0, 1e-300, 1000, "replace-one"),   # below delta 1e-12: outside the tightness target
]
REFERENCE_REFINEMENT = 16.0   # the reference grid: privzv's r / 16 (steps 4x to 16x finer)
REFERENCE_MAX_POINTS = 40_000_000


def reference_epsilon(z: float, steps: int, neighbors: str, delta: float,
                      discretization: float) -> float:
    """dp-accounting's pessimistic PLD (connect-the-dots, built over arrays by
    privzv.vector_pld, which tests/privzv/test_vector_pld.py checks against dp-accounting's own
    builder) composed in ONE stage by dp-accounting's FFT self-composition: no coarsening.
    Read at delta minus its FFT round-off (vector_pld.round_off_slack); ReferenceUnreliable
    where that is more than delta / 2."""
    from privzv import vector_pld

    replace_one = neighbors == "replace-one"
    single = vector_pld.gaussian_pld(2.0 * z if replace_one else z, sampling_prob=Q,
                                     replace_one=replace_one, discretization=discretization,
                                     log_mass_truncation_bound=min(-50.0, math.log(delta) - 10))
    pmfs = [single._pmf_remove] + ([] if single._symmetric else [single._pmf_add])
    composed = dpa_pld.PrivacyLossDistribution(*(
        vector_pld._self_compose(p.to_dense_pmf(), steps, 1e-18, REFERENCE_MAX_POINTS)
        for p in pmfs))
    slack = vector_pld.round_off_slack(composed)
    if slack > 0.5 * delta:
        raise ReferenceUnreliable(f"FFT round-off ~{slack:.2g} against delta {delta:g}")
    return vector_pld.epsilon_for_delta(composed, delta - slack)


class ReferenceUnreliable(Exception):
    """The reference PLD's round-off reaches delta: no reference at this setting."""


def reference_discretization(epsilon: float, steps: int, z: float) -> float:
    """privzv's discretisation rule with r / 16 (accountants.pld_discretization), at least the
    round-off floor and at most 1/20 of one release's loss span."""
    r = accountants.PLD_RELATIVE_DISCRETIZATION / REFERENCE_REFINEMENT * epsilon
    span = 2.0 * (math.sqrt(2.0 * 60.0) / z + 0.5 / (z * z))
    return max(min(r, math.sqrt(r / steps), span / 20.0), accountants.PLD_DISCRETIZATION_RANGE[0])


def extrapolated_epsilon(z: float, steps: int, neighbors: str, delta: float,
                         discretization: float) -> float:
    """For more than ONE_STAGE_STEPS releases (a one-stage grid of 1e7+ points, whose FFT power
    k amplifies round-off): privzv's pld (two-stage) at steps 2 Delta and Delta, extrapolated to
    step 0 by the k Delta^2 law of the pessimistic rounding (eps(D) ~ eps0 + c D^2). An
    estimate of the exact epsilon, not a bound."""
    from privzv.threats import Exposure

    exp = Exposure(steps, Q)
    fine, coarse = (accountants.pld_epsilon(z, exp, neighbors, delta, d)
                    for d in (discretization, 2 * discretization))
    return fine - (coarse - fine) / 3.0


ONE_STAGE_STEPS = 1_000_000


def tight_sigma(z: float, epsilon: float, delta: float, steps: int, neighbors: str) -> dict:
    """The reference noise multiplier for the target: the reference epsilon at z and 0.999 z,
    and the log-log secant through them solved for the target (the curve is smooth; a 0.1%
    step makes the interpolation error negligible)."""
    disc = reference_discretization(epsilon, steps, z)
    method = reference_epsilon
    if steps > ONE_STAGE_STEPS:
        disc, method = accountants.PLD_DISCRETIZATION_RANGE[0], extrapolated_epsilon
    start = time.process_time()
    e1 = method(z, steps, neighbors, delta, disc)
    z0 = z * 0.999
    e0 = method(z0, steps, neighbors, delta, disc)
    slope = (math.log(e1) - math.log(e0)) / (math.log(z) - math.log(z0))
    tight = math.exp(math.log(z) + (math.log(epsilon) - math.log(e1)) / slope)
    return {"tight_noise_multiplier": tight, "reference_discretization": disc,
            "reference": ("one-stage PLD" if method is reference_epsilon else
                          "two-stage PLD extrapolated to step 0"),
            "reference_epsilon_at_answer": e1, "relative_gap_to_tight": z / tight - 1.0,
            "reference_cpu_seconds": time.process_time() - start}


def sweep() -> list[dict]:
    """privzv's best calibration across issue 9's ranges: CPU seconds (caches cleared), the
    accountant that answered, and (delta >= 1e-12) the gap to the reference tight sigma."""
    rows = []
    for eps, delta, steps, neighbors in SWEEP:
        release = Release(clip=1.0, batch_size=BATCH, neighbors=neighbors)
        schedule = Schedule(steps=steps, dataset_size=DATASET, threat="eavesdropper")
        _clear_caches()
        ours, cpu = cpu_timed(lambda: calibrate(eps, delta, release, schedule, "best"))
        row = {"epsilon": eps, "delta": delta, "steps": steps, "neighbors": neighbors,
               "noise_multiplier": ours.noise_multiplier, "epsilon_reached": ours.epsilon,
               "accountant": ours.accountant, "fallback": ours.fallback, "cpu_seconds": cpu}
        if delta >= accountants.PLD_MIN_DELTA:
            try:
                row.update(tight_sigma(ours.noise_multiplier, eps, delta, steps, neighbors))
            except ReferenceUnreliable as exc:
                row["relative_gap_to_tight"] = None
                row["reference"] = f"not measured: {exc}"
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


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

    def replace_event(z):   # dp-accounting's replace-one pair at noise multiplier 2z (module doc)
        return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(Q, dpa.GaussianDpEvent(2 * z)),
                                       1000)

    start = time.process_time()
    theirs, their_wall = timed(lambda: mechanism_calibration.calibrate_dp_mechanism(
        lambda: pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE),
        replace_event, EPSILON, DELTA))
    their_cpu = time.process_time() - start
    return {"task": {"epsilon": EPSILON, "delta": DELTA, "sampling_rate": Q, "steps": 1000,
                     "neighbors": "replace-one"},
            "privzv": {"noise_multiplier": ours.noise_multiplier, "epsilon": ours.epsilon,
                       "accountant": ours.accountant, "seconds": wall, "cpu_seconds": cpu},
            "dp_accounting_pld": {"noise_multiplier": theirs, "seconds": their_wall,
                                  "cpu_seconds": their_cpu},
            "speedup_vs_dp_accounting_pld": their_wall / wall,
            "cpu_speedup_vs_dp_accounting_pld": their_cpu / cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also run issue 9's grid")
    parser.add_argument("--sweep-only", action="store_true", help="only the grid")
    args = parser.parse_args()
    release = Release(clip=1.0, batch_size=BATCH, neighbors="add-remove")
    schedule = Schedule(steps=STEPS, dataset_size=DATASET, threat="eavesdropper")
    calibrate(EPSILON, DELTA, release, Schedule(steps=10, dataset_size=DATASET,
                                                threat="eavesdropper"), "best")   # imports
    out = {} if args.sweep_only else compare(release, schedule)
    if args.sweep or args.sweep_only:
        out["sweep"] = sweep()
    out["versions"] = {"privzv": privzv.__version__, "python": platform.python_version(),
                       **{name: _version(name) for name in ("dp-accounting", "opacus", "numpy")}}
    print(json.dumps(out))


def compare(release: Release, schedule: Schedule) -> dict:
    """The benchmark setting side by side (privzv, dp-accounting, opacus, the tight reference),
    then the small-noise-multiplier task."""
    _clear_caches()
    ours_pld, t_pld = timed(lambda: calibrate(EPSILON, DELTA, release, schedule, "pld"))
    _clear_caches()
    ours, t_ours = timed(lambda: calibrate(EPSILON, DELTA, release, schedule, "best"))
    dpacc, t_dpacc = timed(lambda: mechanism_calibration.calibrate_dp_mechanism(
        pld_privacy_accountant.PLDAccountant, event, EPSILON, DELTA))
    out = {
        "task": {"epsilon": EPSILON, "delta": DELTA, "sampling_rate": Q, "steps": STEPS,
                 "neighbors": "add-remove", "sampling": "poisson"},
        "privzv": {"noise_multiplier": ours.noise_multiplier, "epsilon": ours.epsilon,
                   "accountant": ours.accountant, "requested": "best", "seconds": t_ours},
        "privzv_pld": {"noise_multiplier": ours_pld.noise_multiplier,
                       "epsilon": ours_pld.epsilon, "seconds": t_pld},
        "dp_accounting_pld": {"noise_multiplier": dpacc, "seconds": t_dpacc},
    }
    try:
        from opacus.accountants.utils import get_noise_multiplier
        for name in ("rdp", "prv"):
            z, t = timed(lambda: get_noise_multiplier(
                target_epsilon=EPSILON, target_delta=DELTA, sample_rate=Q, steps=STEPS,
                accountant=name))
            out[f"opacus_{name}"] = {"noise_multiplier": z, "seconds": t}
    except ImportError:
        out["opacus"] = "not installed (pip install .[bench])"
    tight, t_tight = timed(lambda: mechanism_calibration.calibrate_dp_mechanism(
        lambda: pld_privacy_accountant.PLDAccountant(value_discretization_interval=FINE),
        event, EPSILON, DELTA))
    recheck = pld_epsilon(ours.noise_multiplier, FINE)
    out["tight_reference"] = {"noise_multiplier": tight, "value_discretization_interval": FINE,
                              "seconds": t_tight}
    out["privzv_vs_tight_relative"] = ours.noise_multiplier / tight - 1.0
    out["privzv_epsilon_at_fine_discretization"] = recheck
    out["speedup_vs_dp_accounting_pld"] = t_dpacc / t_ours
    out["small_noise_multiplier"] = small = small_z_task()
    out["targets_met"] = {
        "within_0.1_percent": abs(ours.noise_multiplier / tight - 1.0) <= 1e-3,
        "epsilon_recheck_le_target": recheck <= EPSILON,
        "speedup_ge_5": t_dpacc / t_ours >= 5.0,
        "small_z_speedup_ge_5": small["speedup_vs_dp_accounting_pld"] >= 5.0,
    }
    return out


if __name__ == "__main__":
    main()
