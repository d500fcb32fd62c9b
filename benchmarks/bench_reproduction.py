"""Reproduction benchmark (issues 3 and 7): test accuracy vs whole-run epsilon for DPZV and every baseline.

Grid: datasets digits and mnist-5k; methods dpzv, vafl, fo-vector, zoo-vfl, czofo under the
``device`` threat with the ``pld`` accountant at epsilon 0.5, 1, 2, 5, 10, inf (no noise); the
frozen-devices control (DPZV with ``freeze="devices"``: the server's DP head alone on frozen
random embeddings) at every epsilon; a non-private first-order reference (fo-vector at epsilon
inf with its own default learning rates, not the tuned ones); seeds 0, 1, 2. Every private run is
whole-run DP (issue 7): its epsilon covers the downlink and the DP server head in one ledger
(docs/training.md "Whole-run DP"). Private runs take C and the device rate from ``HPARAMS`` but
NOT its server rate, which was tuned for the old non-private head: the DP head keeps its default
rate min(0.1, 1/z_h); runs at epsilon inf use all of ``HPARAMS``. (The paper's ``seed``
accountant is no longer part of the grid.) Bytes (up + down, eq. (23) of arXiv:2502.20565v3) to reach a
target accuracy are read off each run's evaluations (Table I style).

Phase ``sweep`` picks C and learning rates at epsilon=1 on seed 100 (not a reported seed): stage 1
tries ``SWEEP_CLIPS`` at the methods' default learning rates; stage 2 scales both learning rates
(device and server) by ``SWEEP_LR_SCALES`` at the best C of stage 1 (ties: the smallest C); stage 3
puts the server rate back to its default at the best device rate if that differs. The winners
are written into ``privzv.training.tuned.HPARAMS`` by hand (docs/results.md reports the sweep); phase
``grid`` uses them.

Runs go through ``privzv.training.run.train`` (no subprocesses; ``--workers N`` runs N at once in worker
processes). Every finished cell is appended to ``--out`` (JSON lines: config, versions, seed,
summary, accuracy curve) and skipped when found there again, so the benchmark is resumable. The
summary (mean/std over seeds per cell, bytes to target, chosen hyperparameters) is one JSON
object on stdout; ``--plot DIR`` writes accuracy-vs-epsilon figures (PNG and SVG) per dataset.

    python benchmarks/bench_reproduction.py --phase sweep --workers 2
    python benchmarks/bench_reproduction.py --phase grid --workers 2 --plot docs/figures
    python benchmarks/bench_reproduction.py --phase report --plot docs/figures --markdown tables.md
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

from privzv.training.tuned import HPARAMS

METHODS = ("dpzv", "vafl", "fo-vector", "zoo-vfl", "czofo")
EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, math.inf)
SEEDS = (0, 1, 2)
SWEEP_SEED, SWEEP_EPSILON = 100, 1.0
SWEEP_CLIPS = (0.1, 0.3, 1.0, 3.0)
SWEEP_LR_SCALES = (0.01, 0.1, 1 / 3, 3.0)
DELTA = 1e-5

# Per dataset: devices, epochs, batch size (what was reduced and why: docs/results.md), and the
# target accuracy of the bytes-to-target table.
SETTINGS = {
    "digits": {"devices": 4, "epochs": 10.0, "batch_size": 32, "target": 0.90},
    "mnist-5k": {"devices": 7, "epochs": 2.0, "batch_size": 64, "target": 0.80},
}


def default_lr(method: str) -> tuple[float, float]:
    """The method's default (device, server) learning rates."""
    from privzv.training import methods

    cls = methods.get(method)
    return cls.LR_DEVICE, cls.LR_SERVER


@dataclasses.dataclass(frozen=True)
class Cell:
    """One training run of the benchmark; ``key`` identifies it in the results file."""

    phase: str
    dataset: str
    method: str
    accountant: str
    epsilon: float
    seed: int
    clip: float
    lr_device: float | None  # None: the method's default (vafl: HPARAMS gives no rates)
    lr_server: float | None  # None: the method's default (the DP head's min(0.1, 1/z_h) when private)
    freeze: str | None = None
    head_clip: float | None = None  # None: the config's default C_h
    head_share: float | None = None  # None: the config's default; 1: the whole budget on the head

    @property
    def variant(self) -> str:
        """The row of the tables: the method, ``dpzv (seed acct.)``, ``frozen devices`` or the
        non-private reference."""
        if self.freeze:
            return "frozen devices"
        if self.phase == "reference":
            return REFERENCE
        return self.method + (" (seed acct.)" if self.accountant == "seed" else "")

    @property
    def key(self) -> str:
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:g}"
        lr_d, lr_s = ("default" if lr is None else f"{lr:g}" for lr in (self.lr_device, self.lr_server))
        head = "".join(
            f"|{k}={v:g}" for k, v in (("Ch", self.head_clip), ("share", self.head_share)) if v is not None
        )
        return (
            f"{self.phase}|{self.dataset}|{self.method}|{self.accountant}|{eps}|{self.seed}|"
            f"C={self.clip:g}|lr={lr_d},{lr_s}|freeze={self.freeze}{head}"
        )

    def config(self):
        from privzv.training.config import TrainConfig

        s = SETTINGS[self.dataset]
        head = {
            k: v for k, v in (("head_clip", self.head_clip), ("head_share", self.head_share)) if v is not None
        }
        return TrainConfig(
            **head,
            dataset=self.dataset,
            method=self.method,
            devices=s["devices"],
            epochs=s["epochs"],
            batch_size=s["batch_size"],
            epsilon=self.epsilon,
            delta=DELTA,
            threat="device",
            accountant=self.accountant,
            clip=self.clip,
            lr_device=self.lr_device,
            lr_server=self.lr_server,
            freeze=self.freeze,
            # the grid was swept and measured without ZO device momentum (0.9
            # became the trainer's default later, issue 10)
            device_momentum=0.0,
            evals=10,
            transcripts=False,
            threads=1,
            seed=self.seed,
        )


def hparams(dataset: str, method: str) -> dict:
    if (dataset, method) not in HPARAMS:
        raise SystemExit(f"no HPARAMS for ({dataset}, {method}): run --phase sweep and fix them")
    return HPARAMS[(dataset, method)]


def grid_cells(datasets, methods, seeds=SEEDS, epsilons=EPSILONS) -> list[Cell]:
    cells = []
    for ds in datasets:
        for seed in seeds:
            for m in methods:
                cells += [_grid_cell(ds, m, e, seed) for e in epsilons]
            if "dpzv" in methods:
                cells += [_grid_cell(ds, "dpzv", e, seed, freeze="devices") for e in epsilons]
            if "fo-vector" in methods:
                lr_d, lr_s = default_lr("fo-vector")
                cells.append(
                    Cell(
                        "reference",
                        ds,
                        "fo-vector",
                        "pld",
                        math.inf,
                        seed,
                        hparams(ds, "fo-vector")["clip"],
                        lr_d,
                        lr_s,
                    )
                )
    return cells


def _grid_cell(ds: str, method: str, epsilon: float, seed: int, freeze: str | None = None) -> Cell:
    """A grid cell with ``HPARAMS``; a private one leaves the server rate to the DP head's default
    and takes its C_h from ``HPARAMS`` (the default head design, pooled windows, applies), and the
    frozen-devices control spends the whole budget on the head (head_share 1: no downlink)."""
    h = {"lr_device": None, "lr_server": None, **hparams(ds, method)}
    private = math.isfinite(epsilon)
    head_clip = h.pop("head_clip", None)
    if private and method != "vafl":  # vafl's head is not a DP mechanism: its tuned rate stays
        h["lr_server"] = None
    return Cell(
        "grid",
        ds,
        method,
        "pld",
        epsilon,
        seed,
        **h,
        freeze=freeze,
        head_clip=head_clip if private else None,
        head_share=1.0 if private and freeze == "devices" else None,
    )


def sweep_cells(datasets, methods, done: list[dict]) -> list[Cell]:
    """The sweep cells that can be named given the finished rows ``done``: stage 1 always, stage 2
    once stage 1 of that (dataset, method) is done, stage 3 once stage 2 is (module docstring)."""
    cells = []
    for ds in datasets:
        for m in methods:
            lr_d, lr_s = default_lr(m)
            stage1 = [
                Cell("sweep", ds, m, "pld", SWEEP_EPSILON, SWEEP_SEED, c, lr_d, lr_s) for c in SWEEP_CLIPS
            ]
            cells += stage1
            rows = [r for r in done if r["key"] in {c.key for c in stage1}]
            if len(rows) < len(stage1):
                continue
            best = _best(rows)["cell"]["clip"]
            stage2 = [
                Cell("sweep", ds, m, "pld", SWEEP_EPSILON, SWEEP_SEED, best, lr_d * k, lr_s * k)
                for k in SWEEP_LR_SCALES
            ]
            cells += stage2
            rows2 = [r for r in done if r["key"] in {c.key for c in stage2}]
            if len(rows2) == len(stage2):
                top = _best(rows + rows2)["cell"]
                if top["lr_server"] != lr_s:  # stage 3: the best device rate with the default server rate
                    cells.append(
                        Cell(
                            "sweep",
                            ds,
                            m,
                            "pld",
                            SWEEP_EPSILON,
                            SWEEP_SEED,
                            top["clip"],
                            top["lr_device"],
                            lr_s,
                        )
                    )
    return cells


def _best(rows: list[dict]) -> dict:
    """The most accurate row; ties go to the smaller C, then the smaller device rate."""
    ordered = sorted(rows, key=lambda r: (r["cell"]["clip"], r["cell"]["lr_device"]))
    return max(ordered, key=lambda r: r["test_accuracy"])


def run_cell(cell: Cell, secret_seed: int | None = None) -> dict:
    """Train one cell in a temporary folder; return its results row (which holds no secret seed).

    The run's secret seed is derived from ``secret_seed`` and the cell (``--secret-seed``, for a
    reproducible benchmark), or drawn from the OS; never from the cell's public seed.
    """
    from privzv import accounting
    from privzv.training import divergence, methods, run, seeds

    config = cell.config()
    secret = None if secret_seed is None else seeds.derive(secret_seed, cell.key)
    with tempfile.TemporaryDirectory(prefix="bench-repro-") as tmp:
        out = Path(tmp) / "run"
        start = time.perf_counter()
        try:
            summary = run.train(config, out, secret_seed=secret)
        except divergence.Diverged as e:  # a result, not a crash: the row says so, no accuracy
            return {
                "key": cell.key,
                "cell": dataclasses.asdict(cell),
                "variant": cell.variant,
                "seed": cell.seed,
                "diverged": str(e),
                "test_accuracy": None,
                "wall_seconds": time.perf_counter() - start,
            }
        wall = time.perf_counter() - start
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]
        saved = json.loads((out / "config.json").read_text())
    row = {
        "key": cell.key,
        "cell": dataclasses.asdict(cell),
        "variant": cell.variant,
        "config": saved["config"],
        "seed": cell.seed,
        "versions": saved["versions"],
        "test_accuracy": summary["test_accuracy"],
        "sigma": summary["sigma"],
        "epsilon_spent": summary["epsilon_spent"],
        "rounds": summary["rounds"],
        "bytes_up": summary["bytes_up"],
        "bytes_down": summary["bytes_down"],
        "stopped": summary["stopped"],
        "wall_seconds": wall,
        "mechanisms": summary.get("mechanisms"),
        "curve": {k: [r[k] for r in metrics] for k in ("round", "test_accuracy", "bytes_up", "bytes_down")},
    }
    if cell.accountant == "seed" and summary["sigma"] > 0:
        # What the seed's sigma really gives against the receiving device (rigorous, pld).
        from privzv.release import Schedule

        release = methods.get(cell.method).release(config).with_sigma(summary["sigma"])
        schedule = Schedule(
            steps=saved["rounds"], dataset_size=_records(config), devices=config.devices, threat="device"
        )
        row["epsilon_device_pld"] = accounting.account(release, schedule, DELTA, accountant="pld").epsilon
    return row


def _records(config) -> int:
    from privzv.training import data

    return len(data.load(config.dataset, config.devices, seed=config.seed).y_train)


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def execute(cells: list, path: Path, workers: int, secret_seed: int | None = None, runner=run_cell) -> None:
    """Run the cells not yet in ``path`` with ``runner(cell, secret_seed)`` (a picklable function
    returning the row: ``key``, ``test_accuracy``, ``wall_seconds``), appending each finished row
    (resumable)."""
    from privzv.cliutil import progress

    done = {r["key"] for r in read_rows(path)}
    todo = [c for c in cells if c.key not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    bar = progress(total=len(todo), desc="cells")
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool, open(path, "a") as fh:
        futures = {pool.submit(runner, c, secret_seed): c for c in todo}
        for fut in cf.as_completed(futures):
            row = fut.result()
            fh.write(json.dumps(strict_json(row), allow_nan=False) + "\n")
            fh.flush()
            bar.update(1)
            print(
                f"{futures[fut].key}: acc {row['test_accuracy']} ({row['wall_seconds']:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    bar.close()


def _inf_to_none(x):
    return None if isinstance(x, float) and math.isinf(x) else str(x)


def strict_json(obj):
    """``obj`` with every non-finite float (epsilon = inf) as None: no Infinity/NaN tokens."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def _eps(cell: dict) -> float:
    e = cell["epsilon"]
    return math.inf if e is None or e == "inf" else float(e)


def bytes_to_target(row: dict, target: float) -> float:
    """Bytes up + down at the first evaluation reaching ``target`` (inf if never)."""
    c = row["curve"]
    for acc, up, down in zip(c["test_accuracy"], c["bytes_up"], c["bytes_down"]):
        if acc >= target:
            return up + down
    return math.inf


def _stats(values: list[float]) -> dict:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values):
        return {"mean": None, "std": None, "n": len(values), "reached": len(finite)}
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "n": len(values),
    }


def summarize(rows: list[dict]) -> dict:
    grid = [r for r in rows if r["cell"]["phase"] in ("grid", "reference")]
    sweep = [r for r in rows if r["cell"]["phase"] == "sweep"]
    cells: dict[tuple, list[dict]] = {}
    for r in grid:
        eps = _eps(r["cell"])
        cells.setdefault((r["cell"]["dataset"], r["variant"], "inf" if math.isinf(eps) else eps), []).append(
            r
        )
    table = []
    for (ds, variant, eps), all_rs in sorted(
        cells.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))
    ):
        rs = [r for r in all_rs if not r.get("diverged")]
        if not rs:
            table.append(
                {
                    "dataset": ds,
                    "variant": variant,
                    "epsilon": eps,
                    "seeds": [],
                    "diverged_seeds": sorted(r["seed"] for r in all_rs),
                }
            )
            continue
        entry = {
            "dataset": ds,
            "variant": variant,
            "epsilon": eps,
            "seeds": sorted(r["seed"] for r in rs),
            "test_accuracy": _stats([r["test_accuracy"] for r in rs]),
            "sigma": statistics.fmean(r["sigma"] for r in rs),
            "epsilon_spent": (
                statistics.fmean(r["epsilon_spent"] for r in rs)
                if rs[0]["epsilon_spent"] is not None
                else None
            ),
            "bytes_total": statistics.fmean(r["bytes_up"] + r["bytes_down"] for r in rs),
            f"bytes_to_{SETTINGS[ds]['target']:g}": _stats(
                [bytes_to_target(r, SETTINGS[ds]["target"]) for r in rs]
            ),
            "wall_seconds": statistics.fmean(r["wall_seconds"] for r in rs),
            "diverged_seeds": sorted(r["seed"] for r in all_rs if r.get("diverged")),
        }
        if "epsilon_device_pld" in rs[0]:
            entry["epsilon_device_pld"] = statistics.fmean(r["epsilon_device_pld"] for r in rs)
        table.append(entry)
    sweep_rows = [_sweep_row(r) for r in sweep]
    best = {}
    for r in sweep:
        best.setdefault(f"{r['cell']['dataset']}/{r['cell']['method']}", []).append(r)
    best = {k: _sweep_row(_best(rs)) for k, rs in best.items()}
    versions = next((r["versions"] for r in rows if "versions" in r), {})
    return {
        "benchmark": "reproduction",
        "settings": SETTINGS,
        "delta": DELTA,
        "threat": "device",
        "seeds": list(SEEDS),
        "sweep": {"seed": SWEEP_SEED, "epsilon": SWEEP_EPSILON, "runs": sweep_rows, "best": best},
        "hparams": {f"{d}/{m}": h for (d, m), h in HPARAMS.items()},
        "cells": table,
        "grid_runs": len(grid),
        "grid_run_seconds_total": sum(r["wall_seconds"] for r in grid),
        "diverged_runs": [r["key"] for r in grid if r.get("diverged")],
        "versions": versions,
    }


def _sweep_row(r: dict) -> dict:
    c = r["cell"]
    return {
        "dataset": c["dataset"],
        "method": c["method"],
        "clip": c["clip"],
        "lr_device": c["lr_device"],
        "lr_server": c["lr_server"],
        "sigma": r["sigma"],
        "test_accuracy": r["test_accuracy"],
    }


def plot(summary: dict, folder: Path) -> list[Path]:
    """accuracy_vs_epsilon_DATASET.{png,svg}: mean test accuracy (%) over seeds, +-1 std bars;
    epsilon on a log axis, the no-noise runs at the right edge ("inf")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    finite = [e for e in EPSILONS if math.isfinite(e)]
    x_inf = finite[-1] * 4
    for ds in sorted({c["dataset"] for c in summary["cells"]}):
        fig, ax = plt.subplots(figsize=(9.0, 4.2))
        rows = [c for c in summary["cells"] if c["dataset"] == ds and "test_accuracy" in c]
        for variant in [v for v in ORDER if any(c["variant"] == v for c in rows)]:
            pts = sorted(
                (x_inf if c["epsilon"] == "inf" else c["epsilon"], c["test_accuracy"])
                for c in rows
                if c["variant"] == variant
            )
            xs = [p[0] for p in pts]
            ys = [100 * p[1]["mean"] for p in pts]
            err = [100 * p[1]["std"] for p in pts]
            if variant == REFERENCE:
                ax.axhspan(ys[0] - err[0], ys[0] + err[0], color="black", alpha=0.1)
                ax.axhline(ys[0], color="black", ls=":", label=REFERENCE + "\n(default learning rates)")
                continue
            if variant == "frozen devices":
                ax.errorbar(
                    xs,
                    ys,
                    yerr=err,
                    ls=":",
                    marker="s",
                    color="grey",
                    capsize=3,
                    label="frozen devices (DP head alone)",
                )
                continue
            style = "--" if "seed" in variant else "-"
            label = {
                "dpzv (seed acct.)": "dpzv (seed accountant, NOT rigorous)",
                "vafl": "vafl (forward noise: protects features\nagainst the server, a different secret)",
            }.get(variant, variant)
            ax.errorbar(xs, ys, yerr=err, ls=style, marker="o", capsize=3, label=label)
        ax.set_xscale("log")
        ax.set_xticks(finite + [x_inf], [f"{e:g}" for e in finite] + ["inf\n(no noise)"])
        ax.minorticks_off()
        ax.set_xlabel("whole-run epsilon, downlink + DP head (delta = 1e-5; device threat, pld)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{ds}: accuracy vs epsilon (mean \u00b1 std over {len(summary['seeds'])} seeds)")
        written += save(fig, ax, folder / f"accuracy_vs_epsilon_wholerun_{ds}")
    return written


def save(fig, ax, stem: Path) -> list[Path]:
    """Grid, legend outside the axes, ``stem``.png and .svg written; the figure closed."""
    import matplotlib.pyplot as plt

    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    written = [stem.with_suffix(f".{ext}") for ext in ("png", "svg")]
    for path in written:
        fig.savefig(path, bbox_inches="tight")  # a title wider than the axes is not cut
    plt.close(fig)
    return written


PROTECTS = {
    "dpzv": "labels vs the receiving device: scalar downlink noise + DP head update",
    "dpzv (seed acct.)": "same release as dpzv; sigma from Theorem VI.5 (NOT rigorous)",
    "vafl": "device features vs the server (forward noise on embeddings); downlink and head not noised",
    "fo-vector": "labels vs the receiving device: vector downlink noise + DP head update",
    "zoo-vfl": "labels vs the receiving device: scalar downlink noise + DP zeroth-order head update",
    "czofo": "labels vs the receiving device: per-record loss differences + DP head update",
    "frozen devices": "control: no device training, no downlink; the DP head alone with the whole budget",
    "fo-vector (non-private ref.)": "nothing (epsilon inf, no noise; fo-vector's default rates, not tuned)",
}
REFERENCE = "fo-vector (non-private ref.)"
ORDER = tuple(PROTECTS)


def markdown(summary: dict) -> str:
    """The tables of docs/results.md: accuracy vs epsilon, the seed accountant, bytes to target."""
    out = []
    cells = summary["cells"]
    eps_cols = [e if math.isfinite(e) else "inf" for e in EPSILONS]
    for ds in sorted({c["dataset"] for c in cells}):
        at = {(c["variant"], c["epsilon"]): c for c in cells if c["dataset"] == ds}
        out += [
            f"**{ds}**: test accuracy, mean +- std over seeds {summary['seeds']}",
            "",
            "| method | "
            + " | ".join(f"eps={e:g}" if e != "inf" else "eps=inf" for e in eps_cols)
            + " | what the noise protects (observer) |",
            "|---" * (len(eps_cols) + 2) + "|",
        ]
        for v in ORDER:
            vals = []
            for e in eps_cols:
                vals.append(_accuracy(_lookup(at, v, e)))
            if any(at.get((v, e)) for e in eps_cols):
                out.append(f"| {v} | " + " | ".join(vals) + f" | {PROTECTS[v]} |")
        out.append("")
        seed = [(e, at.get(("dpzv (seed acct.)", e)), at.get(("dpzv", e))) for e in eps_cols if e != "inf"]
        if any(s for _, s, _ in seed):
            out += [
                f"**{ds}**: DPZV's sigma from the seed's formula vs pld (device threat), and the epsilon"
                " the seed's sigma really gives against the receiving device",
                "",
                "| target eps | seed sigma | pld sigma | pld / seed | epsilon of the seed sigma (pld, device)"
                " | accuracy seed / pld |",
                "|---|---|---|---|---|---|",
            ]
            for e, s, r in seed:
                if s and r:
                    out.append(
                        f"| {e:g} | {s['sigma']:.4g} | {r['sigma']:.4g} | {r['sigma'] / s['sigma']:.1f}x"
                        f" | {s['epsilon_device_pld']:.4g} | {s['test_accuracy']['mean']:.3f} /"
                        f" {r['test_accuracy']['mean']:.3f} |"
                    )
            out.append("")
    present = [v for v in ORDER if any(c["variant"] == v for c in cells)]
    out += [
        "Bytes (up + down, eq. (23), MB) to reach the target test accuracy, mean +- std over seeds;"
        " inf = not reached by every seed (k/3 = seeds that reached it)",
        "",
        "| dataset (target) | eps | " + " | ".join(present) + " |",
        "|---" * (len(present) + 2) + "|",
    ]
    for ds in sorted({c["dataset"] for c in cells}):
        tgt = SETTINGS[ds]["target"]
        at = {(c["variant"], c["epsilon"]): c for c in cells if c["dataset"] == ds}
        for e in (1.0, 10.0, "inf"):
            vals = []
            for v in present:
                b = (c := _lookup(at, v, e)) and c.get(f"bytes_to_{tgt:g}")
                vals.append(
                    "-"
                    if not b
                    else f"{b['mean'] / 1e6:.2f} +- {b['std'] / 1e6:.2f}"
                    if b["mean"] is not None
                    else f"inf ({b['reached']}/{b['n']})"
                )
            out.append(f"| {ds} ({tgt:.0%}) | {e if e == 'inf' else f'{e:g}'} | " + " | ".join(vals) + " |")
    out.append("")
    sweep = summary["sweep"]["runs"]
    if sweep:
        out += [
            f"Sweep (seed {summary['sweep']['seed']}, eps={summary['sweep']['epsilon']:g}, device/pld):"
            " test accuracy",
            "",
            "| dataset | method | C | lr device | lr server | sigma | accuracy |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in sorted(
            sweep, key=lambda r: (r["dataset"], ORDER.index(r["method"]), r["clip"], r["lr_device"])
        ):
            out.append(
                f"| {r['dataset']} | {r['method']} | {r['clip']:g} | {r['lr_device']:.3g} |"
                f" {r['lr_server']:.3g} | {r['sigma']:.4g} | {r['test_accuracy']:.3f} |"
            )
    return "\n".join(out) + "\n"


def _accuracy(c: dict | None) -> str:
    """A table entry: mean +- std over the seeds that finished, and how many diverged."""
    if not c:
        return "-"
    div = c.get("diverged_seeds", [])
    n = len(c["seeds"]) + len(div)
    if "test_accuracy" not in c:
        return f"diverged ({len(div)}/{n})"
    a = c["test_accuracy"]
    return f"{a['mean']:.3f} +- {a['std']:.3f}" + (f" ({len(div)}/{n} diverged)" if div else "")


def _lookup(at: dict, variant: str, eps) -> dict | None:
    """The summary cell of ``variant`` at ``eps``; the seed accountant at inf (no noise) is plain
    dpzv's inf cell."""
    if variant == "dpzv (seed acct.)" and eps == "inf":
        return at.get(("dpzv", "inf"))
    return at.get((variant, eps))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phase", choices=("sweep", "grid", "report"), default="grid")
    p.add_argument("--datasets", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--out", default="docs/figures/reproduction_pooled.jsonl", help="JSON lines, appended")
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS), help="grid seeds")
    p.add_argument(
        "--epsilons", nargs="+", type=float, default=list(EPSILONS), help="grid epsilons (inf for no noise)"
    )
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--plot", metavar="DIR", help="write accuracy-vs-epsilon figures here")
    p.add_argument("--markdown", metavar="FILE", help="write the tables of docs/results.md here")
    p.add_argument(
        "--secret-seed",
        type=int,
        help="root of the runs' secret noise seeds, for an "
        "exact rerun (never written to --out; default: the OS's entropy)",
    )
    args = p.parse_args(argv)
    path = Path(args.out)
    start = time.perf_counter()
    if args.phase == "sweep":
        for _ in range(3):  # stage k+1 cells exist once stage k is done
            execute(
                sweep_cells(args.datasets, args.methods, read_rows(path)),
                path,
                args.workers,
                args.secret_seed,
            )
    elif args.phase == "grid":
        execute(
            grid_cells(args.datasets, args.methods, args.seeds, args.epsilons),
            path,
            args.workers,
            args.secret_seed,
        )
    summary = summarize(read_rows(path))
    summary["this_invocation_wall_seconds"] = time.perf_counter() - start
    if args.plot:
        summary["figures"] = [str(f) for f in plot(summary, Path(args.plot))]
    if args.markdown:
        Path(args.markdown).write_text(markdown(summary))
    print(json.dumps(strict_json(summary), default=_inf_to_none, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
