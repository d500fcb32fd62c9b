"""The issue-7 sweep of the pooled DP head (docs/results.md "The pooled DP head"): digits, seed 100
(not a reported seed), epsilon 1 unless given, one run per setting, the grid's settings
(bench_reproduction.SETTINGS) with C and the device rate from ``HPARAMS`` unless overridden.

    python benchmarks/sweep_pooled_head.py '[{"head_window": 4, "head_clip": 1.0}, ...]'

The parties' noise comes from secret seed 100 (as in the reported runs). Prints one JSON line per setting: the overrides, the test accuracy (or why the run stopped) and
the wall seconds. The settings that docs/results.md reports are ``SWEEP`` (the default argument).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

SETTINGS = {
    "digits": dict(devices=4, epochs=10.0, batch_size=32),
    "mnist-5k": dict(devices=7, epochs=2.0, batch_size=64),
}
SWEEP = [
    {"head_window": 4},
    {"head_window": 4, "head_share": 0.8},
    {"head_window": 8, "head_share": 0.8},
    {"head_window": 4, "head_share": 0.8, "lr_device": 0.003},
    {"head_window": 4, "head_share": 0.8, "head_clip": 1.0},
    {"head_window": 4, "head_share": 0.8, "head_clip": 3.0},
    {"head_window": 4, "head_share": 0.5, "head_clip": 1.0},
    {"head_window": 2, "head_share": 0.8, "head_clip": 1.0},
    {"head_window": 0, "head_share": 0.8, "head_clip": 1.0},
    {"head_window": 4, "head_share": 0.8, "head_clip": 1.0, "lr_device": 0.003},
    {"method": "vafl", "epsilon": 0.5, "lr_device": 0.005, "lr_server": 0.005},
    {"method": "vafl", "epsilon": 0.5, "lr_device": 0.015, "lr_server": 0.015},
    {"method": "vafl", "epsilon": 0.5, "lr_device": 0.05, "lr_server": 0.05},
    {"head_window": 4, "head_clip": 1.0, "freeze": "devices", "head_share": 1.0},
]


def main(argv: list[str]) -> int:
    from privzv.training import divergence, run
    from privzv.training.config import TrainConfig
    from privzv.training.tuned import HPARAMS

    for v in json.loads(argv[0]) if argv else SWEEP:
        v = dict(v)
        ds, method = v.pop("dataset", "digits"), v.pop("method", "dpzv")
        h = HPARAMS[(ds, method)]
        cfg = dict(
            dataset=ds,
            method=method,
            epsilon=1.0,
            delta=1e-5,
            clip=h["clip"],
            lr_device=h["lr_device"],
            evals=1,
            transcripts=False,
            seed=100,
            **SETTINGS[ds],
        )
        cfg.update(v)
        start = time.time()
        with tempfile.TemporaryDirectory() as d:
            try:
                acc = run.train(TrainConfig(**cfg), d + "/r", secret_seed=100).get("test_accuracy")
            except divergence.Diverged as e:
                acc = f"diverged: {e}"
        print(
            json.dumps(
                {
                    "dataset": ds,
                    "method": method,
                    **v,
                    "accuracy": acc,
                    "seconds": round(time.time() - start, 1),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
