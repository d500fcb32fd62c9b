"""Sweep C and the device learning rate for the study's summing server (training.tuned.HPARAMS_SUM).

The protocol of benchmarks/bench_reproduction.py (docs/results.md) at the study's own setting
(``privzv.attacks.study.train_config``: summing server, the dataset's study epochs), epsilon 1, seed 100
(not a study seed): stage 1 tries C in ``CLIPS`` at the method's default device rate; stage 2
scales the device rate by ``LR_SCALES`` at stage 1's best C. The summing server has no
parameters, so there is no server rate. Best = most accurate; ties: the smaller C, then the
smaller rate. Prints one JSON object (every run, the picks, config, versions); the picks are then
copied into ``HPARAMS_SUM`` by hand.

    python -m attacks.study_sweep --dataset digits --workers 2
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import tempfile
import time
from pathlib import Path

SEED, EPSILON = 100, 1.0
CLIPS = (0.1, 0.3, 1.0, 3.0, 10.0)
LR_SCALES = (0.01, 0.1, 1 / 3, 3.0)


def default_lr_device(method: str) -> float:
    from privzv.training import methods

    return methods.get(method).LR_DEVICE


def run_one(dataset: str, method: str, clip: float, lr_device: float) -> dict:
    import dataclasses

    import torch

    from privzv.attacks.study import StudyConfig, train_config
    from privzv.training import data, run
    from privzv.training.divergence import Diverged

    torch.set_num_threads(1)
    cfg = StudyConfig(dataset=dataset)
    classes = data.load(dataset, 4, seed=SEED).num_classes
    tcfg = dataclasses.replace(
        train_config(cfg, method, EPSILON, SEED, classes, clip=clip, lr_device=lr_device, lr_server=None),
        transcripts=False,
    )
    row = {"method": method, "clip": clip, "lr_device": lr_device, "config": tcfg.to_dict()}
    with tempfile.TemporaryDirectory(prefix="study-sweep-") as tmp:
        try:
            summary = run.train(tcfg, Path(tmp))
        except Diverged as exc:  # a run that diverged is a result of the sweep: no pick
            return {**row, "sigma": None, "test_accuracy": None, "diverged": str(exc)}
    return {**row, "sigma": summary["sigma"], "test_accuracy": summary["test_accuracy"]}


def best(rows: list[dict]) -> dict:
    """The most accurate run that did not diverge; ties: the smaller C, then the smaller rate."""
    ordered = sorted(
        (r for r in rows if r["test_accuracy"] is not None), key=lambda r: (r["clip"], r["lr_device"])
    )
    return max(ordered, key=lambda r: r["test_accuracy"])


def sweep(dataset: str, methods: list[str], workers: int) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:

        def stage(cells):
            return list(pool.map(run_one, *zip(*cells)))

        rows = stage([(dataset, m, c, default_lr_device(m)) for m in methods for c in CLIPS])
        picks = {m: best([r for r in rows if r["method"] == m])["clip"] for m in methods}
        rows += stage([(dataset, m, picks[m], default_lr_device(m) * k) for m in methods for k in LR_SCALES])
    return rows


def main(argv=None) -> int:
    from privzv.attacks.study_settings import DATASETS, METHODS
    from privzv.training.run import versions

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    start = time.perf_counter()
    rows = sweep(args.dataset, args.methods, args.workers)
    picks = {
        m: {
            "clip": (b := best([r for r in rows if r["method"] == m]))["clip"],
            "lr_device": b["lr_device"],
            "test_accuracy": b["test_accuracy"],
        }
        for m in args.methods
    }
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "seed": SEED,
                "epsilon": EPSILON,
                "clips": CLIPS,
                "lr_scales": LR_SCALES,
                "picks": picks,
                "runs": rows,
                "versions": versions(),
                "wall_seconds": time.perf_counter() - start,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
