"""Cost of --secure-noise: training rounds per second with the seeded and the secure noise source.

Setting: digits, 4 devices, batch 32, epsilon 1 (pld, device threat), one epoch (180 rounds), no
transcripts, one torch thread; DPZV (one scalar release per round) and fo-vector (a 32 x 16
per-sample release per round). Each (method, source) pair is trained ``REPEATS`` times in
alternating order (so both sources see the same background load); the figure is rounds divided
by the training loop's CPU time (``time.thread_time``, the work done, not the wait for a core on
a shared machine), median over the repeats; wall-clock rounds per second are beside.
Run: ``python benchmarks/bench_secure_noise.py`` (needs the ``secure`` extra, opendp).
"""
from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import time

import torch

from privzv.training import data, privacy, run
from privzv.training import methods as method_registry
from privzv.training.config import TrainConfig

METHODS = ("dpzv", "fo-vector")
REPEATS = 3


def rounds_per_second(config: TrainConfig, dataset) -> tuple[float, float]:
    records = len(dataset.y_train)
    rounds = run.rounds_for(config, records)
    plan = privacy.plan(config, method_registry.get(config.method), records, rounds)
    sched = run.build(config, dataset, sigma=plan.sigma)
    cpu, wall = time.thread_time(), time.perf_counter()
    sched.run(rounds, lambda r: False, lambda r: None)
    return rounds / (time.thread_time() - cpu), rounds / (time.perf_counter() - wall)


def main() -> None:
    torch.set_num_threads(1)
    dataset = data.load("digits", 4)
    out = {"setting": "digits, 4 devices, batch 32, epsilon 1, 1 epoch (180 rounds)",
           "python": platform.python_version(), "repeats": REPEATS}
    for method in METHODS:
        base = TrainConfig(method=method, epochs=1, epsilon=1.0, transcripts=False, secret_seed=1)
        runs = {"seeded": [], "secure": []}
        for _ in range(REPEATS):
            for name in ("seeded", "secure"):
                config = dataclasses.replace(base, secure_noise=name == "secure").validate()
                runs[name].append(rounds_per_second(config, dataset))
        out[method] = {name: {"rounds_per_cpu_second": round(statistics.median(r[0] for r in rs), 1),
                              "rounds_per_wall_second": round(statistics.median(r[1] for r in rs), 1)}
                       for name, rs in runs.items()}
        seeded, secure = (out[method][n]["rounds_per_cpu_second"] for n in ("seeded", "secure"))
        out[method]["slowdown"] = round(seeded / secure, 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
