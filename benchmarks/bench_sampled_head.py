"""Cost of the head on a secret sample of the table: rounds per second and the head step's share
of a round, for MNIST-1D (``--records`` 10,000 and 100,000: D = 8,000 and 80,000 training
records), 4 devices, B 500, epsilon 1, the ledger on, transcripts off, one torch thread.

For each D: the calibration's time, then ``ROUNDS`` rounds after ``WARMUP`` of DPZV with the
sampled head (the default), DPZV with the per-batch head (``--head-sampling batch``, pooled) and
the frozen-devices control with the sampled head, built by ``privzv.training.run.build`` and
stepped by its scheduler; thread CPU time per round, and the part of it spent in the head's
step. The sampled head computes on a fixed number of rows (``methods.head.capacity``), so its cost
does not depend on how full the table is. ``minutes_20_epochs`` extrapolates the rounds of a
20-epoch run (4 x 20 x ceil(D / 500)) at that rate, without evaluations.
Run: ``PRIVZV_CACHE=DIR nice python benchmarks/bench_sampled_head.py [RECORDS ...]``
(the data sets are generated into the cache the first time: about 2 minutes for 100,000).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

import torch

from privzv.training import data, methods, privacy, run
from privzv.training.config import TrainConfig
from privzv.training.methods import head

RECORDS = (10_000, 100_000)
ROUNDS, WARMUP = 300, 20
VARIANTS = {
    "dpzv, sampled head": {},
    "dpzv, batch head": {"head_sampling": "batch"},
    "frozen devices, sampled head": {"freeze": "devices"},
}


def measure(records: int, changes: dict) -> dict:
    config = TrainConfig(
        dataset="mnist1d",
        records=records,
        devices=4,
        batch_size=500,
        epochs=20,
        epsilon=1.0,
        transcripts=False,
        **changes,
    ).validate()
    dataset = data.load("mnist1d", 4, records=records)
    d = len(dataset.y_train)
    rounds = run.rounds_for(config, d)
    start = time.perf_counter()
    p = privacy.plan(config, methods.get(config.method), d, rounds)
    calibrate = time.perf_counter() - start
    sched = run.build(config, dataset, ledger=privacy.ledger(config, p), release=p.release, secret_seed=0)
    step, spent = sched.method.head.step, [0.0]

    def timed(*args):
        t = time.thread_time()
        step(*args)
        spent[0] += time.thread_time() - t

    sched.method.head.step = timed
    for _ in range(WARMUP):
        sched.step()
    spent[0] = 0.0
    start = time.thread_time()
    for _ in range(ROUNDS):
        sched.step()
    per_round = (time.thread_time() - start) / ROUNDS
    return {
        "records": records,
        "train_records": d,
        "head": type(sched.method.head).__name__,
        "calibrate_seconds": round(calibrate, 2),
        "seconds_per_round": round(per_round, 5),
        "rounds_per_second": round(1.0 / per_round, 1),
        "head_share_of_round": round(spent[0] / ROUNDS / per_round, 3),
        "rounds_20_epochs": rounds,
        "minutes_20_epochs": round(rounds * per_round / 60.0, 2),
    }


def main(records=RECORDS) -> dict:
    torch.set_num_threads(1)
    rows = [{"variant": name, **measure(n, changes)} for n in records for name, changes in VARIANTS.items()]
    return {
        "benchmark": "sampled_head",
        "rounds": ROUNDS,
        "warmup": WARMUP,
        "head_rows": {n: head.capacity(500) for n in records},
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
        },
        "results": rows,
    }


if __name__ == "__main__":
    print(json.dumps(main(tuple(int(a) for a in sys.argv[1:]) or RECORDS), indent=1))
