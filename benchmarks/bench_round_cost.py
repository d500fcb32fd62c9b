"""Per-round cost against the number of training records: does a round cost more on more data?

A private DPZV run (epsilon 1e6, calibrated sigma, the ledger on, DP head) on synthetic features
(2 devices, 3 features each, batch 32; ``conftest``-style inline data, so D is free), built by
``privzv.training.run.build`` and stepped by its scheduler; thread CPU time per round over
``ROUNDS`` rounds after ``WARMUP``, for D = 1,400 and 200,000 records, round-robin, with both
devices in the same epoch of the shared walk (a run's start) and with device 0 one epoch ahead
(where a long run with skewed activation probabilities ends up: the devices' epochs differ), with
transcripts off and with transcripts streamed to a folder (``Recorder.stream_to``; the bytes they
take per round are reported). Run: ``nice python benchmarks/bench_round_cost.py``.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from privzv.training import methods, privacy, run
from privzv.training.config import TrainConfig
from privzv.training.data import VerticalDataset

RECORDS = (1_400, 200_000)
EPOCHS_APART = (0, 1)
ROUNDS, WARMUP = 1000, 50


def synthetic(records: int, devices: int = 2, features: int = 3, classes: int = 3) -> VerticalDataset:
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, classes, (records,), generator=gen)
    xs = [torch.randn(records, features, generator=gen) + y[:, None].float() for _ in range(devices)]
    return VerticalDataset(
        "breast-cancer", xs, y, [x[:32] for x in xs], y[:32], classes, partition="synthetic"
    )


def per_round(records: int, apart: int, transcripts: bool, folder: Path | None) -> float:
    """Thread CPU seconds per round, device 0 ``apart`` epochs ahead of device 1."""
    config = TrainConfig(
        dataset="breast-cancer",
        devices=2,
        batch_size=32,
        embed_dim=4,
        epochs=1,
        epsilon=1e6,
        transcripts=transcripts,
    ).validate()
    p = privacy.plan(config, methods.get("dpzv"), records, ROUNDS + WARMUP)
    sched = run.build(
        config, synthetic(records), ledger=privacy.ledger(config, p), release=p.release, secret_seed=0
    )
    sched.devices[0].step = apart * sched.sampler.per_epoch
    if folder is not None:
        sched.recorder.stream_to(folder)
    for _ in range(WARMUP):
        sched.step()
    start = time.thread_time()
    for _ in range(ROUNDS):
        sched.step()
    return (time.thread_time() - start) / ROUNDS


def main() -> dict:
    torch.set_num_threads(1)
    rows = []
    for transcripts in (False, True):
        for apart in EPOCHS_APART:
            for records in RECORDS:
                with tempfile.TemporaryDirectory() as tmp:
                    ms = 1e3 * per_round(records, apart, transcripts, Path(tmp) if transcripts else None)
                    on_disk = sum(f.stat().st_size for f in Path(tmp).iterdir())
                rows.append(
                    {
                        "records": records,
                        "epochs_apart": apart,
                        "transcripts": transcripts,
                        "ms_per_round": ms,
                        "transcript_bytes_per_round": on_disk / (ROUNDS + WARMUP) if transcripts else None,
                    }
                )
    return {
        "benchmark": "private DPZV round cost vs training records (thread CPU time)",
        "rounds": ROUNDS,
        "warmup": WARMUP,
        "rows": rows,
        "machine": {"cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
