"""Throughput of privzv.gdp's mu/epsilon/delta conversions against dp-accounting, same run.

Prints one JSON object. For each direction: privzv's conversions per second on an array of
``--n`` random valid inputs (best of ``--repeat`` runs, by wall clock and by CPU time),
dp-accounting's per-element rate on the first ``--n-ref`` of them (its analytic Gaussian
mechanism, Balle & Wang 2018: the same curve as mu-GDP with mu = 1/sigma; scalar only, brentq
for the inverses), the ratio (wall clock), and the largest relative difference between the two
on that subset.

    python benchmarks/bench_conversions.py [--n 1000000] [--n-ref 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import dp_accounting
import numpy as np
import scipy
from dp_accounting.pld import privacy_loss_mechanism as plm

from privzv import __version__, gdp


def _best_rates(fn, n: int, repeat: int) -> dict:
    """Conversions per second, best of ``repeat``: by wall clock and by this process's CPU time
    (the CPU figure is the one that other jobs on a shared machine do not distort)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    return {"privzv_per_s": n / wall, "privzv_per_cpu_s": n / cpu}


def _ref_rate(fn, args) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = np.array([fn(*a) for a in args])
    return len(args) / (time.perf_counter() - start), out


def _max_rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.abs(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--n-ref", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    mu = 10.0 ** rng.uniform(-2.0, 1.5, args.n)
    epsilon = 10.0 ** rng.uniform(-2.0, 2.0, args.n)
    delta = 10.0 ** rng.uniform(-15.0, -1.0, args.n)
    k = args.n_ref
    results = {}

    ours = gdp.delta_from_epsilon(epsilon[:k], mu[:k])
    rate, ref = _ref_rate(
        lambda e, m: plm.GaussianPrivacyLoss(1.0 / m).get_delta_for_epsilon(e), list(zip(epsilon[:k], mu[:k]))
    )
    representable = ref > 1e-300  # dp-accounting's linear-space formula underflows below
    results["delta_from_epsilon"] = {
        **_best_rates(lambda: gdp.delta_from_epsilon(epsilon, mu), args.n, args.repeat),
        "reference": "dp_accounting GaussianPrivacyLoss(1/mu).get_delta_for_epsilon, per element",
        "reference_per_s": rate,
        "max_rel_diff_vs_reference": _max_rel(ours[representable], ref[representable]),
    }

    ours = gdp.epsilon_from_delta(mu[:k], delta[:k])
    rate, ref = _ref_rate(
        lambda m, d: dp_accounting.get_epsilon_gaussian(1.0 / m, d), list(zip(mu[:k], delta[:k]))
    )
    nonzero = ref > 0
    results["epsilon_from_delta"] = {
        **_best_rates(lambda: gdp.epsilon_from_delta(mu, delta), args.n, args.repeat),
        "reference": "dp_accounting.get_epsilon_gaussian(1/mu, delta), per element (brentq)",
        "reference_per_s": rate,
        "max_rel_diff_vs_reference": _max_rel(ours[nonzero], ref[nonzero]),
    }

    ours = gdp.mu_from_epsilon(epsilon[:k], delta[:k])
    rate, ref = _ref_rate(
        lambda e, d: 1.0 / dp_accounting.get_sigma_gaussian(e, d), list(zip(epsilon[:k], delta[:k]))
    )
    results["mu_from_epsilon"] = {
        **_best_rates(lambda: gdp.mu_from_epsilon(epsilon, delta), args.n, args.repeat),
        "reference": "1 / dp_accounting.get_sigma_gaussian(epsilon, delta), per element (brentq)",
        "reference_per_s": rate,
        "max_rel_diff_vs_reference": _max_rel(ours, ref),
    }

    for entry in results.values():
        entry["ratio"] = entry["privzv_per_s"] / entry["reference_per_s"]
        entry["meets_1e6_per_s_wall"] = entry["privzv_per_s"] >= 1e6
        entry["meets_1e6_per_s_cpu"] = entry["privzv_per_cpu_s"] >= 1e6
    print(
        json.dumps(
            {
                "benchmark": "gdp_conversions",
                "config": {
                    "n": args.n,
                    "n_ref": k,
                    "repeat": args.repeat,
                    "seed": args.seed,
                    "mu": "10**U(-2, 1.5)",
                    "epsilon": "10**U(-2, 2)",
                    "delta": "10**U(-15, -1)",
                    "timing": "best of repeat, wall clock and process CPU; reference: one pass",
                },
                "versions": {
                    "privzv": __version__,
                    "numpy": np.__version__,
                    "scipy": scipy.__version__,
                    "dp_accounting": getattr(dp_accounting, "__version__", "unknown"),
                    "python": platform.python_version(),
                },
                "machine": {"cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
