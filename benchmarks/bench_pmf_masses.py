"""One release's connect-the-dots masses: privzv's quadrature against dp-accounting's second
differences and 40-digit mpmath integrals, on the same grid, same run.

Prints one JSON object: for the ADD side of noise ``--sigma`` (sensitivity 1), sampling rate
``--q`` and discretisation ``--step``, the number of masses above 1e-12, how many of
dp-accounting's are more than 0.1% off privzv's, the largest such relative difference, and at the
grid point dp-accounting gets worst (plus ``--checks`` random heavy ones) the three values side
by side with mpmath's exact mass. docs/accounting.md quotes its default run.

    python benchmarks/bench_pmf_masses.py [--sigma 0.5] [--q 0.01] [--step 1e-4] [--checks 3]
"""

from __future__ import annotations

import argparse
import json

import mpmath
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld

from privzv import gaussian_pmf

LOG_TRUNCATION = -50.0


def exact_mass(sd: float, q: float, kind: str, disc: float, grid_loss) -> mpmath.mpf:
    """The connect-the-dots mass at ``grid_loss``: the P-integral of its split share over the
    two buckets around it, in 40-digit arithmetic (cut points by root finding)."""
    mpmath.mp.dps = 40
    a, q, step = mpmath.mpf(1) / sd, mpmath.mpf(q), mpmath.mpf(disc)

    def mix(x):
        return mpmath.log(1 - q + q * mpmath.e**x)

    def loss(u):
        remove, add = mix(-a * u - a * a / 2), mix(a * u - a * a / 2)
        return {"remove": remove, "add": -add, "replace": remove - add}[kind]

    comps = [(1, 0)] if kind == "add" else [(1 - q, 0), (q, -a)]

    def density(u):
        return sum(w * mpmath.npdf(u, m) for w, m in comps)

    pair = gaussian_pmf._Pair(float(a), float(q), kind)
    total = mpmath.mpf(0)
    for low, high, share_up in ((grid_loss - step, grid_loss, True), (grid_loss, grid_loss + step, False)):
        cuts = []
        for target, beyond in ((high, -mpmath.inf), (low, mpmath.inf)):
            # outside L's range (near q's asymptotes) the bucket runs to infinity
            inside = (kind != "remove" or target > mpmath.log(1 - q)) and (
                kind != "add" or target < -mpmath.log(1 - q)
            )
            if not inside:
                cuts.append(beyond)
                continue
            guess = float(pair.inverse(np.array([float(target)]))[0])
            cuts.append(mpmath.findroot(lambda u: loss(u) - target, guess))

        def share(u):
            down = mpmath.expm1(high - loss(u)) / mpmath.expm1(step)
            return 1 - down if share_up else down

        total += mpmath.quad(lambda u: density(u) * share(u), cuts)
    return total


def compare(sigma: float, q: float, step: float, checks: int, seed: int = 0) -> dict:
    theirs = pld.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=step, use_connect_dots=True
    )._pmf_add
    ours = gaussian_pmf.release_pmf(
        sigma, sampling_prob=q, kind="add", discretization=step, log_truncation=LOG_TRUNCATION
    )
    offset = theirs._lower_loss - ours.lower
    n = min(len(theirs._probs), len(ours.probs) - offset)
    a, b = np.asarray(theirs._probs[:n]), ours.probs[offset : offset + n]
    heavy = np.flatnonzero(b > 1e-12)
    rel = np.abs(a[heavy] - b[heavy]) / b[heavy]
    points = [int(heavy[np.argmax(rel)])]
    points += np.random.default_rng(seed).choice(heavy, size=checks, replace=False).tolist()
    rows = []
    for i in points:
        exact = float(
            exact_mass(sigma, q, "add", step, mpmath.mpf(ours.lower + offset + i) * mpmath.mpf(step))
        )
        rows.append(
            {
                "grid_index": ours.lower + offset + i,
                "mpmath": exact,
                "privzv": float(b[i]),
                "dp_accounting": float(a[i]),
                "privzv_rel_error": abs(b[i] / exact - 1),
                "dp_accounting_rel_error": abs(a[i] / exact - 1),
            }
        )
    return {
        "setting": {"sigma": sigma, "sensitivity": 1.0, "sampling_rate": q, "step": step, "side": "add"},
        "masses_above_1e-12": int(len(heavy)),
        "dp_accounting_more_than_0.1%_off": int((rel > 1e-3).sum()),
        "dp_accounting_max_rel_difference": float(rel.max()),
        "points": rows,
        "privzv_max_rel_error_vs_mpmath": max(r["privzv_rel_error"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sigma", type=float, default=0.5)
    parser.add_argument("--q", type=float, default=0.01)
    parser.add_argument("--step", type=float, default=1e-4)
    parser.add_argument("--checks", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(compare(args.sigma, args.q, args.step, args.checks), indent=1))


if __name__ == "__main__":
    main()
