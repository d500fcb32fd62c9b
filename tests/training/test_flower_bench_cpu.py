"""``benchmarks/bench_engines.py --cpu``: each process's CPU between a run's first and last
metrics lines, found by its command line below the benchmark's process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="bench_engines imports the Flower engine (privzv[flower])")
if not Path("/proc/self/stat").exists():
    pytest.skip("bench_engines --cpu reads /proc", allow_module_level=True)

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_engines.py"
_spec = importlib.util.spec_from_file_location("bench_engines", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_the_flower_processes_are_found_by_role_below_the_benchmark():
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    procs = [
        subprocess.Popen([*sleep, "-m", "privzv.training.engines.flower.serverlink"]),
        subprocess.Popen([*sleep, "privzv.training.engines.flower.supernode", "partition-id=3 folder=x"]),
        subprocess.Popen([*sleep, "something else"]),
    ]
    try:
        found = bench._processes(bench.os.getpid())
        assert found == {"superlink": procs[0].pid, "device3": procs[1].pid}
        assert all(bench._cpu(pid) >= 0 for pid in found.values())
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_the_cpu_counted_is_the_one_spent_between_the_first_and_last_metrics_lines(tmp_path):
    """Work done before the first line and after the last is not counted; work between is."""
    metrics = tmp_path / "metrics.jsonl"
    watch = bench.CpuWatch(tmp_path, flower=False)
    watch.start()

    def burn(seconds: float) -> None:
        start = bench._cpu(bench.os.getpid())
        while bench._cpu(bench.os.getpid()) - start < seconds:
            sum(range(10_000))

    burn(0.3)  # before the first line
    metrics.write_text("{}\n")
    burn(0.2)  # between the lines
    with metrics.open("a") as fh:
        fh.write("{}\n")
    watch.join(timeout=60)
    burn(0.3)  # after the last line
    assert not watch.is_alive() and set(watch.seconds) == {"inprocess"}
    assert 0.15 <= watch.seconds["inprocess"] < 0.5  # 0.2 s, to a poll and a clock tick


def test_without_cpu_the_benchmark_watches_nothing(tmp_path):
    args = type("Args", (), {"cpu": False})()
    before = threading.active_count()
    assert bench._watched(args, tmp_path, True, lambda: 7) == (7, {})
    assert threading.active_count() == before
