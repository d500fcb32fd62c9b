"""Every method x every embedded dataset at its defaults, against the majority class (issue 22
item 5).

Runs ``privzv train --dataset D --method M --epsilon E --seed S --secret-seed K`` (threat device,
everything else default; ``--epochs`` only if given; K = 0 as in
tests/training/test_stable_defaults.py, so that a row's noise is reproduced bit for bit; rows
without ``secret_seed`` were measured before, each with a fresh secret seed) for each cell of methods x datasets x ``--epsilons``
and appends one JSON line per run to ``--out`` (default
``docs/figures/stable_defaults.jsonl``): the final and best test accuracy, the
majority-class accuracy of the test set, whether the run diverged, its wall seconds. Resumable:
cells already in ``--out`` (same dataset, method, epsilon, seed, epochs, extra flags) are
skipped. ``--jobs`` runs that many at once (at most 2: the machine is shared).

    nice -n 10 python benchmarks/stable_defaults_grid.py [--seed 0] [--secret-seed 0] [--epsilons 2 10]
        [--methods ...] [--datasets ...] [--epochs N] [--jobs 2] [--extra "--lr-device 1e-3"]

``--embedding-norms`` instead prints, per dataset, the median L2 norm of each device model's
initial embeddings (embed_dim 16, 4 devices, ``--seed``, 500 training records): the scale vafl's
device rate takes as unclipped (``privzv.training.methods.vafl.EMBED_NORM``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from privzv.training import data, methods, models

EMBEDDED = ("digits", "breast-cancer", "mnist-5k", "mnist1d")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "figures" / "stable_defaults.jsonl"


def majority(dataset: str, seed: int) -> float:
    """The test set's majority-class share (what always answering that class scores)."""
    y = data.load(dataset, devices=1, seed=seed).y_test
    return float(y.bincount().max()) / len(y)


def key(row: dict) -> tuple:
    return (
        row["dataset"], row["method"], row["epsilon"], row["seed"], row.get("secret_seed"), row["epochs"],
        row["extra"],
    )  # fmt: skip


def run(cell: dict) -> dict:
    """One training run of ``cell``; its row."""
    with tempfile.TemporaryDirectory(prefix="stable-defaults-") as tmp:
        argv = [
            sys.executable, "-m", "privzv", "train",
            "--dataset", cell["dataset"], "--method", cell["method"],
            "--epsilon", str(cell["epsilon"]), "--seed", str(cell["seed"]),
            "--secret-seed", str(cell["secret_seed"]),
            "--no-transcripts", "--out", f"{tmp}/run", "--json",
            *(["--epochs", str(cell["epochs"])] if cell["epochs"] is not None else []),
            *shlex.split(cell["extra"]),
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True)
    row = {**cell, "exit": done.returncode}
    if done.returncode != 0:
        return {**row, "error": done.stderr.strip().splitlines()[-1:] or [""]}
    summary = json.loads(done.stdout)
    return {
        **row,
        "test_accuracy": summary["test_accuracy"],
        "best_accuracy": max(p["test_accuracy"] for p in summary["curve"]),
        "diverged": summary["diverged"],
        "beats_majority": summary["test_accuracy"] > cell["majority"],
        "wall_seconds": summary["wall_seconds"],
    }


def embedding_norms(dataset: str, seed: int) -> list[float]:
    """The median initial embedding norm of each of 4 device models on 500 training records."""
    ds = data.load(dataset, devices=4, seed=seed)
    torch.manual_seed(seed)
    norms = []
    for m in range(ds.devices):
        with torch.no_grad():
            h = models.device_model(ds, m, 16)(ds.x_train[m][:500].float())
        norms.append(round(float(h.norm(dim=1).median()), 3))
    return norms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--secret-seed", type=int, default=0)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--methods", nargs="+", default=list(methods.MODULES))
    parser.add_argument("--datasets", nargs="+", default=list(EMBEDDED))
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--extra", default="", help="more flags for every run")
    parser.add_argument("--jobs", type=int, choices=(1, 2), default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--embedding-norms", action="store_true", help="print them and stop")
    args = parser.parse_args()
    if args.embedding_norms:
        for d in args.datasets:
            print(json.dumps({"dataset": d, "median_norms": embedding_norms(d, args.seed)}), flush=True)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = (
        {key(json.loads(line)) for line in args.out.read_text().splitlines()} if args.out.exists() else set()
    )
    shares = {d: majority(d, args.seed) for d in args.datasets}
    cells = [
        {"dataset": d, "method": m, "epsilon": e, "seed": args.seed, "secret_seed": args.secret_seed,
         "epochs": args.epochs,
         "extra": args.extra, "majority": shares[d]}
        for d in args.datasets for m in args.methods for e in args.epsilons
    ]  # fmt: skip
    todo = [c for c in cells if key(c) not in done]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, args.out.open("a") as out:
        for row in pool.map(run, todo):
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps({k: row.get(k) for k in ("dataset", "method", "epsilon", "test_accuracy",
                                                        "majority", "diverged", "wall_seconds")}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
