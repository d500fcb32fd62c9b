"""Calibration speed and precision: privzv against dp-accounting and opacus, in one run.

Task (issue 2): the noise multiplier for epsilon=1, delta=1e-5, Poisson q=256/60000, T=14062,
add-remove (privzv's eavesdropper threat). Prints one JSON object: each tool's noise multiplier
and seconds, privzv's speed-up over dp-accounting's PLD calibration, the tight reference (PLD at
value discretisation 1e-5, which takes a while) and privzv's epsilon re-checked at that
discretisation. Run: ``python benchmarks/bench_calibration.py`` (opacus is the ``bench`` extra).
"""
from __future__ import annotations

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


def main() -> None:
    release = Release(clip=1.0, batch_size=BATCH, neighbors="add-remove")
    schedule = Schedule(steps=STEPS, dataset_size=DATASET, threat="eavesdropper")
    accountants._pld_epsilon.cache_clear()
    ours, t_ours = timed(lambda: calibrate(EPSILON, DELTA, release, schedule, "pld"))
    dpacc, t_dpacc = timed(lambda: mechanism_calibration.calibrate_dp_mechanism(
        pld_privacy_accountant.PLDAccountant, event, EPSILON, DELTA))
    out = {
        "task": {"epsilon": EPSILON, "delta": DELTA, "sampling_rate": Q, "steps": STEPS,
                 "neighbors": "add-remove", "sampling": "poisson"},
        "privzv": {"noise_multiplier": ours.noise_multiplier, "epsilon": ours.epsilon,
                   "seconds": t_ours},
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
    out["versions"] = {"privzv": privzv.__version__, "python": platform.python_version(),
                       **{name: _version(name) for name in ("dp-accounting", "opacus", "numpy")}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
