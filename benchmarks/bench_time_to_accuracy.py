"""Time to accuracy: rounds, device epochs and seconds until the test accuracy first reaches a target,
DPZV against fo-vector and VAFL, without noise (issue 10, beside bench_device_step's per-step time).

Each (task, method) is one run of ``privzv.training.run.build`` with the method's default learning
rates except DPZV's device rate (``TASKS``; no DP noise, no transcripts, one torch thread, public seed 0, secret seed 0), stepped by its
scheduler for at most ``EPOCHS`` device epochs and evaluated on the test split every
``EVALS_PER_EPOCH``-th of an epoch. A method's time counts the rounds only (device and server work
and message handling, thread CPU time and wall time), not the evaluations. ``reached`` is the first
evaluation at or above the target; null when the run never got there (its best accuracy is beside).
The tasks: digits (4 devices, batch 32, target 0.90) and mnist-5k in 7 row bands (batch 64, the band
CNN, target 0.80).
Run: ``nice python benchmarks/bench_time_to_accuracy.py`` (mnist-5k needs the ``mnist`` extra).
"""

from __future__ import annotations

import json
import os
import platform
import time

import torch

from privzv.training import data, run
from privzv.training.config import TrainConfig

METHODS = ("dpzv", "fo-vector", "vafl")
# DPZV's device rate: its default (0.03) diverges on both tasks (accuracy peaks, then falls to
# chance on mnist-5k: the ZO step's norm grows like sqrt(d)); these are stable. The first-order
# methods keep their defaults.
TASKS = {
    "digits": {
        "dataset": "digits",
        "devices": 4,
        "batch_size": 32,
        "target": 0.90,
        "epochs": 10,
        "lr_device": {"dpzv": 0.005},
    },
    "mnist-5k": {
        "dataset": "mnist-5k",
        "devices": 7,
        "batch_size": 64,
        "target": 0.80,
        "epochs": 6,
        "lr_device": {"dpzv": 0.001},
    },
}
EVALS_PER_EPOCH = 4


def time_to_accuracy(dataset, task: dict, method: str) -> dict:
    config = TrainConfig(
        dataset=task["dataset"],
        method=method,
        devices=task["devices"],
        batch_size=task["batch_size"],
        epochs=task["epochs"],
        transcripts=False,
        lr_device=task["lr_device"].get(method),
        seed=0,
    ).validate()
    sched = run.build(config, dataset, secret_seed=0)
    per_epoch = run.steps_per_epoch(config, len(dataset.y_train))
    every = max(1, per_epoch // EVALS_PER_EPOCH)
    total = run.rounds_for(config, len(dataset.y_train))
    cpu = wall = 0.0
    curve, reached = [], None
    while sched.round < total:
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(min(every, total - sched.round)):
            sched.step()
        cpu += time.thread_time() - c0
        wall += time.perf_counter() - w0
        acc = sched.evaluate(dataset.x_test, dataset.y_test).test_accuracy
        point = {
            "round": sched.round,
            "epoch": sched.round / per_epoch,
            "test_accuracy": acc,
            "cpu_seconds": cpu,
            "wall_seconds": wall,
        }
        curve.append(point)
        if reached is None and acc >= task["target"]:
            reached = point
    return {
        "reached": reached,
        "best_accuracy": max(p["test_accuracy"] for p in curve),
        "final_accuracy": curve[-1]["test_accuracy"],
        "rounds_run": sched.round,
        "cpu_seconds_per_round": cpu / sched.round,
        "curve": curve,
    }


def main() -> dict:
    torch.set_num_threads(1)
    result = {
        "benchmark": "time to accuracy without noise, DPZV vs fo-vector vs VAFL",
        "evals_per_epoch": EVALS_PER_EPOCH,
        "tasks": {},
    }
    for name, task in TASKS.items():
        dataset = data.load(task["dataset"], task["devices"], seed=0)
        runs = {m: time_to_accuracy(dataset, task, m) for m in METHODS}
        result["tasks"][name] = {
            "setting": task,
            "summary": {
                m: {
                    "target": task["target"],
                    "rounds": r["reached"] and r["reached"]["round"],
                    "epochs": r["reached"] and r["reached"]["epoch"],
                    "cpu_seconds": r["reached"] and r["reached"]["cpu_seconds"],
                    "wall_seconds": r["reached"] and r["reached"]["wall_seconds"],
                    "best_accuracy": r["best_accuracy"],
                    "cpu_seconds_per_round": r["cpu_seconds_per_round"],
                }
                for m, r in runs.items()
            },
            "runs": runs,
        }
    result.update(
        {
            "machine": {"cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
            "versions": {"torch": torch.__version__, "python": platform.python_version()},
            "seed": 0,
            "secret_seed": 0,
        }
    )
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
