"""A study's table of means as Markdown (the tables of docs/attacks.md are printed by this).

One row per epsilon; the test accuracy of each method, then, per attack, its mean success against
its baseline (``privzv.attacks.study.headline``) for each method, "-" where it did not run.

    python -m attacks.study_table docs/figures/study-digits/results.json --attacks direct-label
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT = (
    "direct-label",
    "model-completion",
    "model-completion-semi",
    "model-completion-active",
    "feature-server",
    "optimal-lr",
    "probe-saturating",
)


def markdown(results: dict, attacks=DEFAULT) -> str:
    methods = list(results["methods"])
    cells = {(t["attack"], t["method"], t["epsilon"]): t for t in results["table"]}
    epsilons = sorted(
        {t["epsilon"] for t in results["table"]}, key=lambda e: float("inf") if e is None else e
    )
    slash = " / ".join(methods)
    head = [f"test acc. (%) {slash}"] + [f"{a} {slash}" for a in attacks]
    lines = ["| epsilon | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for eps in epsilons:
        accs = []
        for m in methods:
            found = [t for (a, mm, e), t in cells.items() if mm == m and e == eps]
            accs.append(f"{100 * found[0]['test_accuracy']['mean']:.1f}" if found else "-")
        row = [" / ".join(accs)]
        for a in attacks:
            row.append(
                " / ".join(
                    f"{cells[(a, m, eps)]['success']['mean']:.3f}" if (a, m, eps) in cells else "-"
                    for m in methods
                )
            )
        lines.append(f"| {'inf' if eps is None else f'{eps:g}'} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="a study's results.json")
    p.add_argument("--attacks", nargs="+", default=list(DEFAULT))
    args = p.parse_args(argv)
    print(markdown(json.loads(args.results.read_text()), args.attacks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
