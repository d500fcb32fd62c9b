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
import platform
import time
from importlib import metadata

import dp_accounting as dpa
from dp_accounting import mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant

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


# (epsilon, delta, steps, neighbors, tight reference affordable)
SWEEP = [
    (1.0, 1e-5, 14062, "add-remove", True),
    (1.0, 1e-5, 14062, "replace-one", True),
    (0.01, 1e-5, 1000, "add-remove", False),
    (0.1, 1e-5, 1000, "add-remove", True),
    (8.0, 1e-12, 1000, "add-remove", True),
    (1.0, 1e-5, 10_000_000, "add-remove", False),
    (1.0, 1e-5, 100_000_000, "add-remove", False),
    (1e4, 1e-5, 1000, "add-remove", False),
    (1.0, 1e-300, 1000, "replace-one", False),
]


def sweep() -> list[dict]:
    """privzv's best calibration across issue 9's ranges: CPU seconds, the accountant that
    answered, and (where affordable) the gap to dp-accounting's PLD at discretisation 1e-5."""
    rows = []
    for eps, delta, steps, neighbors, reference in SWEEP:
        release = Release(clip=1.0, batch_size=BATCH, neighbors=neighbors)
        schedule = Schedule(steps=steps, dataset_size=DATASET, threat="eavesdropper")
        _clear_caches()
        ours, cpu = cpu_timed(lambda: calibrate(eps, delta, release, schedule, "best"))
        row = {"epsilon": eps, "delta": delta, "steps": steps, "neighbors": neighbors,
               "noise_multiplier": ours.noise_multiplier, "epsilon_reached": ours.epsilon,
               "accountant": ours.accountant, "fallback": ours.fallback, "cpu_seconds": cpu}
        if reference:
            relation = (dpa.NeighboringRelation.REPLACE_ONE if neighbors == "replace-one"
                        else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
            scale = 2.0 if neighbors == "replace-one" else 1.0

            def make_event(z, steps=steps, scale=scale):
                return dpa.SelfComposedDpEvent(
                    dpa.PoissonSampledDpEvent(Q, dpa.GaussianDpEvent(scale * z)), steps)

            tight = mechanism_calibration.calibrate_dp_mechanism(
                lambda relation=relation: pld_privacy_accountant.PLDAccountant(
                    relation, value_discretization_interval=FINE),
                make_event, eps, delta, tol=1e-6)
            row["tight_noise_multiplier"] = tight
            row["relative_gap_to_tight"] = ours.noise_multiplier / tight - 1.0
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also run issue 9's grid")
    args = parser.parse_args()
    release = Release(clip=1.0, batch_size=BATCH, neighbors="add-remove")
    schedule = Schedule(steps=STEPS, dataset_size=DATASET, threat="eavesdropper")
    calibrate(EPSILON, DELTA, release, Schedule(steps=10, dataset_size=DATASET,
                                                threat="eavesdropper"), "best")   # imports
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
    out["targets_met"] = {
        "within_0.1_percent": abs(ours.noise_multiplier / tight - 1.0) <= 1e-3,
        "epsilon_recheck_le_target": recheck <= EPSILON,
        "speedup_ge_5": t_dpacc / t_ours >= 5.0,
    }
    if args.sweep:
        out["sweep"] = sweep()
    out["versions"] = {"privzv": privzv.__version__, "python": platform.python_version(),
                       **{name: _version(name) for name in ("dp-accounting", "opacus", "numpy")}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
