"""Random calibrations and accountings across the documented ranges, checked against exact
references where they exist.

Draws ``--n`` settings (epsilon 10^U(-4, 4); delta 10^U(-12, -1) or, one in three, 10^U(-300,
-12); T 10^U(0, 8); sample rate 1 (one in four) or 10^U(-8, 0); both neighbour relations;
accountants best, pld and rdp) and for each calls ``privzv.noise_multiplier`` and
``privzv.epsilon`` at the answer. Prints one JSON object: how many answered, were refused as
unreachable (a PrivzvError naming why) or raised anything else (a crash: listed with its
input), where ``privzv.epsilon`` at the answer differs from the calibration's epsilon (listed),
the CPU seconds (largest, median and 99th percentile, and how many took over 2 s, listed), and the one-sided checks:

- sample rate 1: k Gaussian releases are exactly sqrt(k)/z-GDP (Dong, Roth & Su 2022,
  Cor. 3.3), so epsilon(z) must be at least the exact value, and for ``best`` within 0.1%;
- T = 1 with sampling, add-remove: the exact hockey-stick divergence of the pair (50-digit
  closed form, :func:`exact_sampled_delta`) at the answer must be at most delta.

    python benchmarks/fuzz_accounting.py [--n 300] [--seed 0] [--rows 30,65,148]

``--rows``: only those draws (0-based; the others are drawn and skipped, so a row is the same
setting as in the full run), each row's CPU seconds listed (``cpu_by_row``).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

import privzv
from privzv import gdp
from privzv.errors import PrivzvError

# privzv's API is imported lazily (about 0.35 s of CPU): resolved here, so that the first row's
# CPU seconds count its calibration, not the imports (modules loaded on first use, e.g. the FFT's,
# still count in the first row that uses them)
noise_multiplier, epsilon = privzv.noise_multiplier, privzv.epsilon


def exact_sampled_delta(eps: float, q: float, z: float) -> float:
    """delta(eps) of one Poisson-sampled Gaussian release (sensitivity 1, noise z), add-remove:
    the larger of the remove and add directions' hockey-stick divergences, in closed form at
    50 digits (the loss is monotone in the output, so each is a difference of normal tails)."""
    import mpmath as mp

    with mp.workdps(50):
        e, q, a = mp.mpf(eps), mp.mpf(q), 1 / mp.mpf(z)
        # remove: P = (1-q) N(0) + q N(a) against Q = N(0); loss > eps above thr
        thr = (mp.log((mp.expm1(e) + q) / q) + a * a / 2) / a
        out = (1 - q) * mp.ncdf(-thr) + q * mp.ncdf(a - thr) - mp.exp(e) * mp.ncdf(-thr)
        c = -mp.expm1(-e)
        if q > c:  # add: P = N(0) against Q = (1-q) N(0) + q N(a); loss > eps below thr
            thr = (mp.log((q - c) / q) + a * a / 2) / a
            out = max(out, mp.ncdf(thr) - mp.exp(e) * ((1 - q) * mp.ncdf(thr) + q * mp.ncdf(thr - a)))
        return float(out)


def draw(rng: np.random.Generator) -> dict:
    tiny = rng.random() < 1 / 3
    return {
        "epsilon": float(10 ** rng.uniform(-4, 4)),
        "delta": float(10 ** (rng.uniform(-300, -12) if tiny else rng.uniform(-12, -1))),
        "steps": int(10 ** rng.uniform(0, 8)),
        "sample_rate": 1.0 if rng.random() < 0.25 else float(10 ** rng.uniform(-8, 0)),
        "neighbors": str(rng.choice(["add-remove", "replace-one"])),
        "accountant": str(rng.choice(["best", "pld", "rdp"])),
        "threat": "eavesdropper",
    }  # a sample_rate is an eavesdropper's (privzv.api)


def check(case: dict) -> dict:
    start = time.process_time()
    try:
        found = noise_multiplier(**case)
    except PrivzvError as exc:
        return {"outcome": "refused", "reason": str(exc), "cpu": time.process_time() - start}
    except Exception as exc:  # a crash: reported, not raised
        return {
            "outcome": "crash",
            "reason": f"{type(exc).__name__}: {exc}",
            "cpu": time.process_time() - start,
        }
    cpu = time.process_time() - start
    z, eps, delta, q, k = (
        found.noise_multiplier,
        case["epsilon"],
        case["delta"],
        case["sample_rate"],
        found.compositions,
    )
    out = {
        "outcome": "answered",
        "cpu": cpu,
        "z": z,
        "answered_by": found.accountant,
        "finite": math.isfinite(z) and math.isfinite(found.epsilon),
        "within_target": found.epsilon <= eps,
    }
    back = epsilon(
        noise_multiplier=z,
        delta=delta,
        sample_rate=q,
        steps=case["steps"],
        threat="eavesdropper",
        neighbors=case["neighbors"],
        accountant=case["accountant"],
    )
    out["epsilon_agrees"] = back.epsilon == found.epsilon
    out["epsilon_back"], out["epsilon_found"] = back.epsilon, found.epsilon
    out["fallback"] = found.fallback
    if q == 1.0:
        exact = gdp.epsilon_from_delta(math.sqrt(k) / z, delta)  # z: per sensitivity
        out["exact"] = exact
        out["one_sided"] = back.epsilon >= exact * (1 - 1e-12)
    elif case["steps"] == 1 and case["neighbors"] == "add-remove":
        out["exact_delta"] = exact_sampled_delta(found.epsilon, q, z)
        out["one_sided"] = out["exact_delta"] <= delta * (1 + 1e-9)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=lambda text: {int(i) for i in text.split(",")}, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    for i in range(args.n):
        case = draw(rng)
        if args.rows is None or i in args.rows:
            rows.append({"row": i, **case, **check(case)})
    answered = [r for r in rows if r["outcome"] == "answered"]
    checked = [r for r in answered if "one_sided" in r]
    print(
        json.dumps(
            {
                "n": args.n,
                "seed": args.seed,
                "answered": len(answered),
                "refused": [
                    {
                        k: r[k]
                        for k in (
                            "epsilon",
                            "delta",
                            "steps",
                            "sample_rate",
                            "neighbors",
                            "accountant",
                            "reason",
                        )
                    }
                    for r in rows
                    if r["outcome"] == "refused"
                ],
                "crashes": [r for r in rows if r["outcome"] == "crash"],
                "not_finite_or_above_target": [
                    r for r in answered if not (r["finite"] and r["within_target"])
                ],
                "epsilon_disagrees": [r for r in answered if not r["epsilon_agrees"]],
                "one_sided_checked": len(checked),
                "one_sided_failures": [r for r in checked if not r["one_sided"]],
                "max_cpu_seconds": max(r["cpu"] for r in rows),
                **({"cpu_by_row": {r["row"]: r["cpu"] for r in rows}} if args.rows else {}),
                "cpu_seconds": {
                    name: float(np.percentile([r["cpu"] for r in rows], p))
                    for name, p in (("median", 50), ("p99", 99), ("max", 100))
                },
                "over_2_cpu_seconds": sorted(
                    (
                        {
                            k: r[k]
                            for k in (
                                "row",
                                "epsilon",
                                "delta",
                                "steps",
                                "sample_rate",
                                "neighbors",
                                "accountant",
                                "answered_by",
                                "cpu",
                            )
                        }
                        for r in rows
                        if r["cpu"] > 2.0
                    ),
                    key=lambda r: -r["cpu"],
                ),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
