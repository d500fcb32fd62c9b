"""The issue-10 bottleneck grid (benchmarks/bench_bottleneck.py) runs the cells docs/results.md
reports: the whole-budget control, today's DP-head defaults, no cell on the tuning seed."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from privzv.errors import PrivzvError
from privzv.training import defaults
from privzv.training.methods import head

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_bottleneck.py"
_spec = importlib.util.spec_from_file_location("bench_bottleneck", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def _config(row, name="digits", epsilon=5.0, seed=0):
    return bench.row_config(
        row, bench.SETTINGS[name], epsilon, seed, bench.DPZV_RATE[name], bench.FO_RATE[name]
    )


@pytest.mark.parametrize("name", list(bench.SETTINGS))
def test_the_control_is_the_same_dpzv_run_frozen_with_the_whole_budget_on_the_head(name):
    for epsilon in (1.0, 5.0):
        dpzv, frozen = _config("dpzv", name, epsilon), _config("frozen", name, epsilon)
        assert (frozen.freeze, frozen.head_share) == ("devices", 1.0)
        assert (dpzv.freeze, dpzv.head_share) == (None, 0.5)
        same = {k: v for k, v in dpzv.to_dict().items() if k not in ("freeze", "head_share")}
        assert same == {k: v for k, v in frozen.to_dict().items() if k not in ("freeze", "head_share")}
    assert _config("frozen", name, math.inf).head_share == 0.5  # no budget to place without noise


def test_private_rows_take_todays_head_defaults_not_a_pinned_head_clip():
    """C_h and the window are left open, so the run resolves them as the trainer does."""
    for name in bench.SETTINGS:
        for row in ("dpzv", "frozen", "fo-vector", "czofo"):
            c = _config(row, name)
            assert c.head_clip is None and c.head_window is None
            assert c.threat == "device" and c.accountant == "pld" and c.delta == 1e-5
            assert defaults.with_clip(c).head_clip == (
                defaults.tuned.lookup(c.dataset, c.method, c.server_kind) or {}
            ).get("head_clip", defaults.HEAD_CLIP)
        assert head.window(_config("dpzv", name)) == head.window(_config("frozen", name))


def test_rows_exist_where_they_are_defined():
    assert (
        _config("fo-plain", epsilon=5.0) is None and _config("fo-plain", epsilon=math.inf).epsilon == math.inf
    )
    assert _config("fo-vector", epsilon=math.inf) is None and _config("rr-prior", epsilon=math.inf) is None
    fo = _config("fo-plain", epsilon=math.inf)
    assert fo.lr_device == fo.lr_server == bench.FO_RATE["digits"]
    assert _config("rr-prior").method == "rr-prior"
    assert _config("czofo").method == "czofo" and _config("czofo", epsilon=math.inf) is None


def test_the_grid_refuses_the_tuning_seed_and_runs_important_cells_first(tmp_path):
    with pytest.raises(PrivzvError, match="tuning seed"):
        bench.grid(tmp_path / "x.jsonl", ["digits"], [0, bench.TUNING_SEED], bench.EPSILONS, bench.ROWS)
    assert not (tmp_path / "x.jsonl").exists()
    order = list(bench.cells(list(bench.SETTINGS), [0, 1, 2], bench.EPSILONS, bench.ROWS))
    assert len(order) == len(set(order))
    first = [c for c in order if c[1] in ("dpzv", "frozen") and c[2] in (5.0, math.inf)]
    assert order[: len(first)] == first
    assert {(c[0], c[3]) for c in first} == {(n, s) for n in bench.SETTINGS for s in (0, 1, 2)}


def test_the_cli_turns_a_tuning_seed_into_exit_2(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    assert bench.cli(["--part", "grid", "--seeds", str(bench.TUNING_SEED), "--out", str(out)]) == 2
    assert "tuning seed" in capsys.readouterr().err and not out.exists()


def test_report_pairs_gains_per_seed_and_reads_each_lines_own_setting(tmp_path):
    out = tmp_path / "r.jsonl"
    params = dict(bench.SETTINGS["digits"], epochs=1.0)
    lines = []
    for seed, (dz, fz) in enumerate(((0.50, 0.40), (0.45, 0.42))):
        for row, acc in (("dpzv", dz), ("frozen", fz)):
            lines.append(
                {
                    "key": bench.key("digits", row, 5.0, seed),
                    "setting": "digits",
                    "row": row,
                    "epsilon": 5.0,
                    "seed": seed,
                    "final": acc,
                    "best": acc,
                    "bytes": 10,
                    "diverged": False,
                    "z_downlink": 6.0,
                    "wall_seconds": 1.0,
                    "setting_params": params,
                }
            )
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = bench.report(out)
    (v,) = rep["paired_gain"]
    assert v["gains"] == pytest.approx([0.10, 0.03]) and v["beats_by_0.05_every_seed"] is False
    assert rep["goal_met"] is False and rep["settings"]["digits"]["epochs"] == 1.0
    assert "1 epochs" in bench.markdown(rep) and "| no |" in bench.markdown(rep)


def test_the_mnist1d_rows_resolve_as_they_were_recorded_untuned(monkeypatch):
    """docs/results.md's issue-10 mnist1d rows ran with no tuned entry: the (mnist1d, *) entries
    (C and the device rate, both given by these rows) leave every row's resolved values as they were."""
    pytest.importorskip("mnist1d")
    from privzv.training import data

    ds = data.load("mnist1d", 4)
    configs = [_config(r, "mnist1d", e) for r in bench.ROWS for e in bench.EPSILONS]
    configs = [c for c in configs if c is not None]
    now = [defaults.resolve(c, ds) for c in configs]
    monkeypatch.setattr(defaults.tuned, "lookup", lambda *a: None)
    assert now == [defaults.resolve(c, ds) for c in configs]
