"""benchmarks/bench_device_step.py's before/after machinery: --baseline DIR steps DPZV on another
checkout's training/zo.py in the same run; the ZO steps beside MeZO's loop act on the model."""

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from privzv.training import zo

_ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "bench_device_step", _ROOT / "benchmarks" / "bench_device_step.py"
)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


_KINDS = ["inference", "privzv_zo", "privzv_zo_kept", "privzv_zo_baseline", "mezo", "first_order"]


def _tiny(size, batch, gen):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(size, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)), torch.randn(
        batch, size, generator=gen
    )


def test_a_baseline_checkout_is_loaded_as_its_own_module_and_swapped_in_only_inside_using():
    code = bench.baseline_zo(str(_ROOT))
    assert code is not zo and Path(code.__file__).resolve() == Path(zo.__file__).resolve()
    own = zo.perturb_
    with bench.using(code):
        assert zo.perturb_ is code.perturb_ and zo.sphere_chunks is code.sphere_chunks
    assert zo.perturb_ is own
    with pytest.raises(RuntimeError), bench.using(code):
        raise RuntimeError("restored on the way out too")
    assert zo.perturb_ is own
    with bench.using(None):
        assert zo.perturb_ is own


def test_the_baseline_step_runs_the_baseline_code_and_every_zo_step_moves_the_model(monkeypatch):
    calls = []
    fake = types.ModuleType("fake_zo")
    fake.perturb_ = lambda *a, **k: calls.append(a[1]) or own(*a, **k)
    own = zo.perturb_
    gen = torch.Generator().manual_seed(0)
    model, x = _tiny(6, 5, gen)
    steps, relink = bench._steps(model, x, torch.device("cpu"), fake)
    assert list(steps) == _KINDS
    steps["privzv_zo"]()
    assert calls == []
    steps["privzv_zo_baseline"]()
    assert len(calls) == 3  # +lam, -2 lam, restore and update (one chunk: no norm pass)
    for name in ("privzv_zo", "privzv_zo_kept", "privzv_zo_baseline"):
        steps["mezo"]()
        relink()  # MeZO replaced every p.data; the ZO steps must move the model again
        before = [p.detach().clone() for p in model.parameters()]
        steps[name]()
        assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_a_row_times_this_checkout_beside_the_baseline(monkeypatch):
    monkeypatch.setitem(bench.MODELS, "tiny", _tiny)
    row = bench._row("tiny", 6, 5, torch.device("cpu"), 2, bench.baseline_zo(str(_ROOT)))
    times = row["step_seconds_median"]
    assert list(times) == _KINDS
    ratios = row["time_ratios"]
    assert ratios["privzv_zo_over_baseline_time"] == times["privzv_zo"] / times["privzv_zo_baseline"]
    assert ratios["privzv_zo_baseline_over_mezo_time"] == times["privzv_zo_baseline"] / times["mezo"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--baseline", "/nonexistent-h21z"], "--baseline '/nonexistent-h21z': no training/zo.py there"),
        (["--threads", "0"], "--threads 0: allowed is an integer >= 1"),
    ],
)
def test_bad_benchmark_input_is_one_line_and_exit_code_2(args, message):
    done = subprocess.run(
        [sys.executable, str(_ROOT / "benchmarks" / "bench_device_step.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and message in done.stderr


def test_a_zo_pass_holds_a_few_chunks_by_default_and_the_whole_draw_only_when_kept():
    """The memory target (ZO step <= 1.05x inference): by default a pass over d = 16 chunks holds at
    most a few chunks at once (float32 draws and ||g||'s float64 copy), not g; kept_draws holds g."""
    flat = torch.zeros(16 * zo.CHUNK)
    peak, _ = bench.allocations(lambda: zo.perturb_(flat, 3, 0.5))
    assert peak <= 3 * 4 * zo.CHUNK + 8 * zo.CHUNK
    with zo.kept_draws(4 * len(flat)):
        peak, kept = bench.allocations(lambda: zo.perturb_(flat, 3, 0.5))
    assert kept >= 4 * len(flat) and peak >= 4 * len(flat)
