"""The study's figures (PNG, SVG): attack success vs epsilon, utility vs epsilon and vs leakage."""
from __future__ import annotations

import math
from pathlib import Path

INF_AT = 40.0   # where epsilon = inf (no noise) is drawn on the log axis, labelled "inf"
FLOOR = -1.0    # success axis floor: a far worse-than-baseline outlier would hide the rest


def _x(eps) -> float:
    return INF_AT if eps is None else eps


def _axis(ax, epsilons) -> None:
    ax.set_xscale("log")
    ticks = sorted({_x(e) for e in epsilons})
    ax.set_xticks(ticks)
    ax.set_xticklabels(["inf" if t == INF_AT else f"{t:g}" for t in ticks])
    ax.set_xlabel("target epsilon (delta fixed; inf = no noise)")
    ax.grid(alpha=0.3)


def _err(c: dict) -> tuple[float, float]:
    lo, hi = c["low"], c["high"]
    if lo is None or not math.isfinite(lo):
        return 0.0, 0.0
    return c["mean"] - lo, hi - c["mean"]


def _range(table: list[dict], attack: str) -> tuple[float, float]:
    """Lowest mean success of ``attack``, and an upper axis limit covering every mean."""
    means = [t["success"]["mean"] for t in table if t["attack"] == attack]
    return min(means), max(1.0, max(means)) + 0.1


def _save(fig, out: Path, name: str) -> None:
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out / f"{name}.{ext}", dpi=120)


def write(out: Path, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = results["table"]
    attacks = sorted({t["attack"] for t in table})
    methods = list(results["methods"])
    epsilons = {t["epsilon"] for t in table}
    cols = 3
    rows_n = math.ceil(len(attacks) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False)
    for ax, attack in zip(axes.flat, attacks):
        for method in methods:
            pts = sorted((t for t in table if t["attack"] == attack and t["method"] == method),
                         key=lambda t: _x(t["epsilon"]))
            if not pts:
                continue
            err = list(zip(*[_err(t["success"]) for t in pts]))
            ax.errorbar([_x(t["epsilon"]) for t in pts], [t["success"]["mean"] for t in pts],
                        yerr=err, marker="o", capsize=3, label=method)
            ax.set_ylabel(f"{pts[0]['metric']} (vs baseline 0)")
        ax.axhline(0, color="grey", lw=0.8)
        low, high = _range(table, attack)
        if low < FLOOR:
            ax.set_ylim(FLOOR, high)
            ax.set_title(f"{attack}\n(a mean of {low:.3g} is off the axis)", fontsize=9)
        else:
            ax.set_title(attack)
        _axis(ax, epsilons)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(attacks):]:
        ax.axis("off")
    _save(fig, out, "attack_success_vs_epsilon")
    plt.close(fig)

    utility = {}
    for t in table:
        utility.setdefault((t["method"], t["epsilon"]), t["test_accuracy"])
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for method in methods:
        pts = sorted(((e, c) for (m, e), c in utility.items() if m == method),
                     key=lambda p: _x(p[0]))
        err = list(zip(*[_err(c) for _, c in pts]))
        ax.errorbar([_x(e) for e, _ in pts], [100 * c["mean"] for _, c in pts],
                    yerr=[[100 * v for v in err[0]], [100 * v for v in err[1]]],
                    marker="o", capsize=3, label=method)
    ax.set_ylabel("test accuracy (%)")
    _axis(ax, epsilons)
    ax.legend(fontsize=8)
    _save(fig, out, "utility_vs_epsilon")
    plt.close(fig)

    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False)
    for ax, attack in zip(axes.flat, attacks):
        for method in methods:
            pts = [t for t in table if t["attack"] == attack and t["method"] == method]
            if pts:
                ax.scatter([t["success"]["mean"] for t in pts],
                           [100 * t["test_accuracy"]["mean"] for t in pts], label=method)
                ax.set_xlabel(f"leakage: {pts[0]['metric']}")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(attack)
        low, high = _range(table, attack)
        if low < FLOOR:
            ax.set_xlim(FLOOR, high)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(attacks):]:
        ax.axis("off")
    _save(fig, out, "utility_vs_leakage")
    plt.close(fig)
