"""The whole-run reproduction grid (benchmarks/bench_reproduction.py) names the runs docs/results.md
reports: private runs leave the server rate to the DP head, the reference uses default rates."""

import importlib.util
import math
import sys
from pathlib import Path

from privzv.training import methods
from privzv.training.tuned import HPARAMS

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_reproduction.py"
_spec = importlib.util.spec_from_file_location("bench_reproduction", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)


def test_private_cells_drop_the_tuned_server_rate_and_keep_clip_and_device_rate():
    """... and take the tuned C_h; the frozen control spends the whole budget on the head."""
    cells = bench.grid_cells(["digits"], list(bench.METHODS))
    for c in cells:
        if c.phase != "grid":
            continue
        h = HPARAMS[("digits", c.method)]
        assert (c.clip, c.lr_device) == (h["clip"], h.get("lr_device"))  # vafl: no tuned rates
        keeps = math.isinf(c.epsilon) or c.method == "vafl"  # vafl's head is not DP
        assert c.lr_server == (h.get("lr_server") if keeps else None)
        private = math.isfinite(c.epsilon)
        assert c.head_clip == (h.get("head_clip") if private else None)
        assert c.head_share == (1.0 if private and c.freeze == "devices" else None)
        assert c.accountant == "pld"
    assert len({c.key for c in cells}) == len(cells)


def test_frozen_control_at_every_epsilon_and_reference_at_default_rates():
    cells = bench.grid_cells(["digits"], ["dpzv", "fo-vector"])
    frozen = [c for c in cells if c.variant == "frozen devices"]
    assert sorted({c.epsilon for c in frozen}) == sorted(bench.EPSILONS)
    refs = [c for c in cells if c.variant == bench.REFERENCE]
    cls = methods.get("fo-vector")
    assert {c.seed for c in refs} == set(bench.SEEDS)
    assert all(
        math.isinf(c.epsilon) and (c.lr_device, c.lr_server) == (cls.LR_DEVICE, cls.LR_SERVER) for c in refs
    )


def test_results_rows_are_strict_json():
    import dataclasses
    import json

    cell = bench._grid_cell("digits", "dpzv", math.inf, 0)
    row = bench.strict_json({"cell": dataclasses.asdict(cell), "curve": [1.0, math.inf, math.nan]})
    text = json.dumps(row, allow_nan=False)
    assert "Infinity" not in text and "NaN" not in text
    assert row["cell"]["epsilon"] is None and math.isinf(bench._eps(row["cell"]))
