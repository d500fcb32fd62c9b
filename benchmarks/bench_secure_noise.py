"""Round cost of the noise sources, side by side in one run: the old default (``seeded``: float32
``torch.randn`` from a Mersenne Twister, :class:`~privzv.training.noise.SeededNoise`), the new
default (``keyed``: ChaCha20 streams and an exact discrete Gaussian, ``KeyedNoise``) and
``--secure-noise`` (``opendp``: OpenDP's Gaussian, ``SecureNoise``).

Setting: the digits demo's private run (``privzv demo``: DPZV, 4 devices, batch 32, C tuned,
epsilon 1, delta 1e-5, device threat, pld, the DP head on) for one epoch (180 rounds), no
transcripts, one torch thread; and fo-vector (a 32 x 16 per-sample release per round) in the same
setting. Each (method, source) pair is trained ``REPEATS`` times in alternating order (so every
source sees the same background load); the figure is milliseconds of the training loop's CPU time
(``time.thread_time``, the work done, not the wait for a core on a shared machine) per round,
median over the repeats; ``ratio`` is each source's over ``seeded``'s. Run:
``python benchmarks/bench_secure_noise.py`` (``opendp`` needs the ``secure`` extra; left out
without it).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import platform
import statistics
import time

import torch

from privzv.attacks.demo import DEMO_DELTA, DEMO_EPSILON, DIGITS_CLIP
from privzv.training import data, noise, privacy, run
from privzv.training import methods as method_registry
from privzv.training.config import TrainConfig

METHODS = ("dpzv", "fo-vector")
REPEATS = 3
SOURCES = ("seeded", "keyed") + (("opendp",) if importlib.util.find_spec("opendp") else ())


def ms_per_round(config: TrainConfig, dataset, source: str) -> float:
    """CPU milliseconds per round of one epoch of ``config`` with every party on ``source``."""
    records = len(dataset.y_train)
    rounds = run.rounds_for(config, records)
    plan = privacy.plan(config, method_registry.get(config.method), records, rounds)
    default = noise.source
    if source == "seeded":  # the old default: a Mersenne Twister per party
        noise.source = lambda cfg, root, *names: noise.SeededNoise(root, *names)
    try:
        sched = run.build(
            dataclasses.replace(config, secure_noise=source == "opendp"),
            dataset,
            ledger=privacy.ledger(config, plan),
            release=plan.release,
            secret_seed=1,
        )
    finally:
        noise.source = default
    cpu = time.thread_time()
    sched.run(rounds, lambda r: False, lambda r: None)
    return 1e3 * (time.thread_time() - cpu) / rounds


def main() -> dict:
    torch.set_num_threads(1)
    dataset = data.load("digits", 4)
    out = {
        "setting": f"digits demo: 4 devices, batch 32, epsilon {DEMO_EPSILON:g}, delta "
        f"{DEMO_DELTA:g}, device threat, DP head, 1 epoch (180 rounds), CPU ms per round",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "repeats": REPEATS,
    }
    for method in METHODS:
        config = TrainConfig(
            dataset="digits",
            method=method,
            devices=4,
            epochs=1,
            epsilon=DEMO_EPSILON,
            delta=DEMO_DELTA,
            clip=DIGITS_CLIP if method == "dpzv" else None,
            transcripts=False,
        ).validate()
        times = {name: [] for name in SOURCES}
        for _ in range(REPEATS):
            for name in SOURCES:
                times[name].append(ms_per_round(config, dataset, name))
        row = {name: round(statistics.median(ts), 2) for name, ts in times.items()}
        row["ratio"] = {name: round(row[name] / row["seeded"], 2) for name in SOURCES if name != "seeded"}
        out[method] = row
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
