"""The study's figures (PNG, SVG): attack success vs epsilon, utility vs epsilon and vs leakage."""

from __future__ import annotations

import math
from pathlib import Path

INF_AT = 40.0  # where epsilon = inf (no noise) is drawn on the log axis, labelled "inf"
FLOOR = -1.0  # success axis floor: a far worse-than-baseline outlier would hide the rest
# Axis text of each headline metric (all are unitless; 0 = the attack's baseline).
METRIC_LABEL = {
    "advantage": "advantage = accuracy - prior",
    "auc - 0.5": "AUC - 0.5",
    "r2 - baseline r2": "R\u00b2 - baseline R\u00b2",
    "mu_lb": "GDP mu lower bound",
}
# The baseline each headline metric's 0 line is (drawn and named in the legend).
BASELINE_LABEL = {
    "advantage": "0 = majority class (accuracy of the most frequent label)",
    "auc - 0.5": "0 = chance (AUC 0.5)",
    "r2 - baseline r2": "0 = the baseline regression (labels or own features only)",
    "mu_lb": "0 = nothing proven",
}


def _x(eps) -> float:
    return INF_AT if eps is None else eps


def _eps_label(eps) -> str:
    return "eps inf" if eps is None else f"eps {eps:g}"


def _spread(results: dict) -> str:
    """What the error bars are: a 95% t-interval over seeds, or none with one seed."""
    return "mean and 95% t-interval over seeds" if results["config"]["seeds"] > 1 else "one seed, no interval"


def _axis(ax, epsilons, delta: float) -> None:
    ax.set_xscale("log")
    ticks = sorted({_x(e) for e in epsilons})
    ax.set_xticks(ticks)
    ax.set_xticklabels(["inf" if t == INF_AT else f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(f"target epsilon (delta = {delta:g}; inf = no noise)")
    ax.grid(alpha=0.3)


def _legend(fig, results: dict) -> None:
    """One legend for the figure, above the panels: each method with the noise it adds."""
    handles, labels = [], []
    for ax in fig.axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    methods = results["methods"]
    fig.legend(
        handles,
        [f"{m}: {methods[m]}" if m in methods else m for m in labels],
        loc="upper center",
        ncol=min(len(labels), 3),
        fontsize=10,
        frameon=False,
    )


def _err(c: dict) -> tuple[float, float]:
    lo, hi = c["low"], c["high"]
    if lo is None or not math.isfinite(lo):
        return 0.0, 0.0
    return c["mean"] - lo, hi - c["mean"]


def _range(table: list[dict], attack: str) -> tuple[float, float]:
    """Lowest mean success of ``attack``, and an upper axis limit covering every mean."""
    means = [t["success"]["mean"] for t in table if t["attack"] == attack]
    return min(means), max(1.0, max(means)) + 0.1


def _finish_grid(fig, axes, used: int, results: dict, title: str, out: Path, name: str) -> None:
    """Blank the unused panels, add the legend and title above the panels, save, close."""
    import matplotlib.pyplot as plt

    for ax in list(axes.flat)[used:]:
        ax.axis("off")
    _legend(fig, results)
    fig.suptitle(title, y=1 - 0.3 / fig.get_figheight(), fontsize=10)
    _save(fig, out, name, 0.3 / fig.get_figheight())
    plt.close(fig)


def _save(fig, out: Path, name: str, legend_space: float) -> None:
    fig.tight_layout(rect=(0, 0, 1, 1 - legend_space))
    for ext in ("png", "svg"):
        fig.savefig(out / f"{name}.{ext}", dpi=120, bbox_inches="tight")


def write(out: Path, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    table = results["table"]
    attacks = sorted({t["attack"] for t in table})
    methods = list(results["methods"])
    epsilons = {t["epsilon"] for t in table}
    delta = results["config"]["delta"]
    c = results["config"]
    setting = f"{c['dataset']}, {c['threat']} threat, delta {delta:g}, {c['accountant']}; {c['seeds']} seeds"
    cols = 3
    rows_n = math.ceil(len(attacks) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False)
    for ax, attack in zip(axes.flat, attacks):
        for method in methods:
            pts = sorted(
                (t for t in table if t["attack"] == attack and t["method"] == method),
                key=lambda t: _x(t["epsilon"]),
            )
            if not pts:
                continue
            err = list(zip(*[_err(t["success"]) for t in pts]))
            ax.errorbar(
                [_x(t["epsilon"]) for t in pts],
                [t["success"]["mean"] for t in pts],
                yerr=err,
                marker="o",
                capsize=3,
                label=method,
            )
        metric = next(t["metric"] for t in table if t["attack"] == attack)
        ax.set_ylabel(METRIC_LABEL[metric])
        ax.axhline(0, color="grey", lw=0.8, ls="--", label=BASELINE_LABEL[metric])
        low, high = _range(table, attack)
        if low < FLOOR:
            ax.set_ylim(FLOOR, high)
            ax.set_title(f"{attack}\n(a mean of {low:.3g} is off the axis)", fontsize=9)
        else:
            ax.set_title(attack)
        _axis(ax, epsilons, delta)
    _finish_grid(
        fig,
        axes,
        len(attacks),
        results,
        f"attack success, {_spread(results)} ({setting})",
        out,
        "attack_success_vs_epsilon",
    )

    utility = {}
    for t in table:
        utility.setdefault((t["method"], t["epsilon"]), t["test_accuracy"])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method in methods:
        pts = sorted(((e, c) for (m, e), c in utility.items() if m == method), key=lambda p: _x(p[0]))
        err = list(zip(*[_err(c) for _, c in pts]))
        ax.errorbar(
            [_x(e) for e, _ in pts],
            [100 * c["mean"] for _, c in pts],
            yerr=[[100 * v for v in err[0]], [100 * v for v in err[1]]],
            marker="o",
            capsize=3,
            label=f"{method}: {results['methods'][method]}",
        )
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(f"utility, {_spread(results)} ({setting})", fontsize=9)
    _axis(ax, epsilons, delta)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    _save(fig, out, "utility_vs_epsilon", 0.0)
    plt.close(fig)

    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False)
    for ax, attack in zip(axes.flat, attacks):
        for method in methods:
            pts = [t for t in table if t["attack"] == attack and t["method"] == method]
            if pts:
                xs = [t["success"]["mean"] for t in pts]
                ys = [100 * t["test_accuracy"]["mean"] for t in pts]
                dots = ax.scatter(xs, ys, label=method)
                for t, x, y in zip(pts, xs, ys):  # name each point's epsilon
                    ax.annotate(
                        _eps_label(t["epsilon"]),
                        (x, y),
                        textcoords="offset points",
                        xytext=(3, 3),
                        fontsize=6,
                        color=dots.get_facecolor()[0],
                    )
                ax.set_xlabel(f"leakage: {METRIC_LABEL[pts[0]['metric']]}")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(-2, 102)  # the full range: no exaggerated gaps
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.set_title(attack)
        low, high = _range(table, attack)
        if low < FLOOR:
            ax.set_xlim(FLOOR, high)
        ax.grid(alpha=0.3)
    _finish_grid(
        fig,
        axes,
        len(attacks),
        results,
        f"utility vs leakage: means over seeds (no intervals), one point per epsilon, labelled ({setting})",
        out,
        "utility_vs_leakage",
    )
