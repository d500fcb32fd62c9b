"""Accuracy of privzv.gdp's conversions against mpmath (60+ digits), and dp-accounting's delta
beside it, on the grids and random points of ``tests/privzv/test_gdp.py``.

Prints one JSON object with the largest relative error of each conversion (the tests assert
1e-9 for delta, 1e-10 for the inverses; this prints what is reached). docs/gdp.md quotes it.

    python benchmarks/bench_gdp_accuracy.py
"""

from __future__ import annotations

import json
import math

import mpmath as mp
import numpy as np
from dp_accounting.pld import privacy_loss_mechanism as plm

from privzv import gdp

LOG_1E_300 = math.log(1e-300)
EPS_GRID = np.concatenate([[0.0], np.logspace(-8, 4, 25)])
MU_GRID = np.logspace(-6, 3, 19)


def _dps(mu: float) -> int:
    """Digits enough for the cancellation in Phi(a) - e^eps Phi(b) (relative gap >= mu^2/eps)."""
    return 60 + int(2 * max(0.0, -math.log10(mu)))


def ref_delta(eps: float, mu: float):
    """delta(eps; mu) of Dong et al. Cor. 2.13 as an mpf, straight from the formula."""
    with mp.workdps(_dps(mu)):
        e, m = mp.mpf(eps), mp.mpf(mu)
        return +(mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2))


def ref_log_delta(eps: float, mu: float) -> float:
    with mp.workdps(_dps(mu)):
        return float(mp.log(ref_delta(eps, mu)))


def eps_rel_error(eps: float, mu: float, delta: float) -> float:
    """|eps - eps*| / eps* for the root eps* of delta(.; mu) = delta, to first order (exact up
    to O(error^2)): (delta(eps) - delta) / (d delta / d eps), d delta/d eps = -e^eps Phi(b)."""
    with mp.workdps(_dps(mu)):
        e, m = mp.mpf(eps), mp.mpf(mu)
        slope = -mp.exp(e) * mp.ncdf(-e / m - m / 2)
        return float(abs((ref_delta(eps, mu) - mp.mpf(delta)) / slope) / e)


def mu_rel_error(mu: float, eps: float, delta: float) -> float:
    """As eps_rel_error for the root in mu; d delta / d mu = phi(-eps/mu + mu/2)."""
    with mp.workdps(_dps(mu)):
        e, m = mp.mpf(eps), mp.mpf(mu)
        slope = mp.npdf(-e / m + m / 2)
        return float(abs((ref_delta(eps, mu) - mp.mpf(delta)) / slope) / m)


def grid_points() -> tuple[np.ndarray, np.ndarray]:
    """(eps, mu): EPS_GRID x MU_GRID."""
    eps, mu = (a.ravel() for a in np.meshgrid(EPS_GRID, MU_GRID))
    return eps, mu


def random_points() -> tuple[np.ndarray, np.ndarray]:
    """(eps, mu): 160 log-uniform points and 80 near the evaluation's switch regions
    (t = eps/mu - mu/2 near 0 and near 10)."""
    rng = np.random.default_rng(11)
    eps = np.concatenate([10 ** rng.uniform(-8, 4, 150), np.zeros(10)])
    mu = 10 ** rng.uniform(-6, 3, 160)
    mu2 = 10 ** rng.uniform(-6, 0.5, 80)
    t2 = np.concatenate([rng.uniform(-0.5, 0.5, 40), rng.uniform(9, 11, 40)])
    return (np.concatenate([eps, np.maximum((t2 + mu2 / 2) * mu2, 0.0)]), np.concatenate([mu, mu2]))


def inverse_points(seed: int, zeros: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, delta): 200 points, x = mu (zeros = 0) or eps (the last ``zeros`` are 0)."""
    rng = np.random.default_rng(seed)
    if zeros:
        x = np.concatenate([10 ** rng.uniform(-6, 4, 200 - zeros), np.zeros(zeros)])
    else:
        x = 10 ** rng.uniform(-6, 3, 200)
    return x, np.exp(rng.uniform(LOG_1E_300, math.log(0.9), 200))


def measure() -> dict:
    eps = np.concatenate([grid_points()[0], random_points()[0]])
    mu = np.concatenate([grid_points()[1], random_points()[1]])
    ref = np.array([float(ref_delta(e, m)) for e, m in zip(eps, mu)])
    keep = ref >= 1e-300
    ours = gdp.delta_from_epsilon(eps, mu)
    dpa = np.array(
        [plm.GaussianPrivacyLoss(1.0 / m).get_delta_for_epsilon(e) for e, m in zip(eps[keep], mu[keep])]
    )
    dpa_rel = np.abs(dpa / ref[keep] - 1)
    worst = int(np.argmax(dpa_rel))
    tiny = ~keep
    ref_log = np.array([ref_log_delta(e, m) for e, m in zip(eps[tiny], mu[tiny])])
    log_ours = gdp.log_delta_from_epsilon(eps[tiny], mu[tiny])

    mu_i, delta_i = inverse_points(5, 0)
    eps_i = gdp.epsilon_from_delta(mu_i, delta_i)
    eps_err = [eps_rel_error(e, m, d) for e, m, d in zip(eps_i, mu_i, delta_i) if e > 0]
    eps_t, delta_t = inverse_points(6, 10)
    mu_t = gdp.mu_from_epsilon(eps_t, delta_t)
    mu_err = [mu_rel_error(m, e, d) for m, e, d in zip(mu_t, eps_t, delta_t)]
    return {
        "points": {
            "grid": f"{len(EPS_GRID)} eps x {len(MU_GRID)} mu (eps 0 and 1e-8..1e4, mu 1e-6..1e3)",
            "random": len(random_points()[0]),
            "delta_at_least_1e-300": int(keep.sum()),
            "delta_below_1e-300": int(tiny.sum()),
            "inverses": 200,
        },
        "delta_from_epsilon_max_rel_error": float(np.max(np.abs(ours[keep] / ref[keep] - 1))),
        "log_delta_below_1e-300_max_rel_error": float(np.max(np.abs(log_ours - ref_log) / np.abs(ref_log))),
        "epsilon_from_delta_max_rel_error": max(eps_err),
        "mu_from_epsilon_max_rel_error": max(mu_err),
        "dp_accounting_delta_max_rel_error": float(dpa_rel[worst]),
        "dp_accounting_worst_point": {
            "epsilon": float(eps[keep][worst]),
            "mu": float(mu[keep][worst]),
            "delta": float(ref[keep][worst]),
            "privzv_rel_error": float(abs(ours[keep][worst] / ref[keep][worst] - 1)),
        },
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
