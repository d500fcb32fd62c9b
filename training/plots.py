"""The run's plots: test accuracy vs rounds and vs bytes exchanged (PNG and SVG).

The accuracy axis always runs from 0 to 100%, so that chance-level wobble (e.g. 7-10% on a
ten-class task) is not stretched to look like learning; ``chance`` (%), the majority class's
share, is drawn as a dashed line. A private run's title names its epsilon, delta and threat.
"""

from __future__ import annotations

import math
from pathlib import Path


def chance(labels) -> float:
    """The accuracy (%) of always guessing the most frequent label in ``labels``."""
    import numpy as np

    counts = np.bincount(np.asarray(labels).ravel())
    return 100.0 * counts.max() / counts.sum()


def write(out: Path, rows: list[dict], config, chance: float | None = None) -> None:
    """accuracy_vs_rounds.{png,svg} and accuracy_vs_bytes.{png,svg} (where bytes up are public)
    from the metrics rows.

    ``chance``: the accuracy (%) of guessing, marked on both plots when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = [100 * r["test_accuracy"] for r in rows]
    label = f"{config.method}, {config.dataset}, M={config.devices}"
    title = "no noise" if config.sigma is None else f"noise sigma {config.sigma:g} given"
    if math.isfinite(config.epsilon):
        title = f"whole-run epsilon {config.epsilon:g}, delta {config.delta:g}, threat {config.threat}"
    if config.freeze:
        label += f", {config.freeze} frozen"
    xs = {"rounds": ([r["round"] for r in rows], "communication rounds (count)")}
    if rows[0]["bytes_up"] is not None:  # None: bytes up count secret batch sizes
        xs["bytes"] = (
            [(r["bytes_up"] + r["bytes_down"]) / 1e6 for r in rows],
            "bytes exchanged, up + down (MB, eq. 23)",
        )
    for name, (x, xlabel) in xs.items():
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(x, acc, marker="o", label=label)
        if chance is not None:
            ax.axhline(chance, color="grey", linestyle="--", label=f"majority class, chance ({chance:.3g}%)")
        ax.set_ylim(0, 100)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (%, full scale)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        for ext in ("png", "svg"):
            fig.savefig(out / f"accuracy_vs_{name}.{ext}")
        plt.close(fig)
