"""The run's plots: test accuracy vs rounds and vs bytes exchanged (PNG and SVG)."""
from __future__ import annotations

import math
from pathlib import Path


def write(out: Path, rows: list[dict], config) -> None:
    """accuracy_vs_rounds.{png,svg} and accuracy_vs_bytes.{png,svg} from the metrics rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = [100 * r["test_accuracy"] for r in rows]
    label = f"{config.method}, {config.dataset}, M={config.devices}"
    if math.isfinite(config.epsilon):
        label += f", eps={config.epsilon:g}"
    if config.freeze:
        label += f", {config.freeze} frozen"
    xs = {"rounds": ([r["round"] for r in rows], "communication rounds (count)"),
          "bytes": ([(r["bytes_up"] + r["bytes_down"]) / 1e6 for r in rows],
                    "bytes exchanged, up + down (MB, eq. 23)")}
    for name, (x, xlabel) in xs.items():
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(x, acc, marker="o", label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        for ext in ("png", "svg"):
            fig.savefig(out / f"accuracy_vs_{name}.{ext}")
        plt.close(fig)
