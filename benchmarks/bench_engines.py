"""Rounds per second and bytes on the wire: the in-process engine against the Flower engine (issue 12).

Setting: digits, M devices (``--devices 1 2 4``; default 2), batch 32, DPZV (``--method``), ``--rounds`` rounds, epsilon 8, one
evaluation at the end (plus the one at round 0), the same public and secret seeds. The Flower run
``--modes`` (``launcher.MODES``) picks the Flower runs: ``deployment`` (the default; row
``flower``) is ``privzv train --engine flower``'s: a SuperLink, one SuperNode per device, each
device's long-lived ClientApp executor (``executor``, the device kept in its memory) and the
ServerApp (in the SuperLink's process: ``serverlink``) on 127.0.0.1; ``simulation`` (row ``flower_simulation``) is ``--engine flower-sim``:
Flower's simulation runtime on Ray.

Reported per device count M (``devices``), per engine: ``loop_seconds`` (the run's own ``wall_seconds``: rounds and evaluations),
``total_seconds`` (with the start and stop of the Flower processes), ``rounds_per_second`` =
rounds / loop_seconds, eq. (23)'s ``bytes_up`` / ``bytes_down`` (tensor bytes), and for Flower
the serialised bytes of the messages (``wire_bytes``: uplinks, downlinks, control = the round
requests, acknowledgements, hello and evaluation messages) and their count. ``overhead`` is the
Flower loop's seconds per round minus the in-process one; ``same_metrics``: this tree's Flower
rows end at the in-process row's accuracy and epsilon (the baseline row is not compared: another
commit may calibrate another noise multiplier). The loop starts after the setup (the
devices' ``query.hello``, where each loads its data slice). Each row has the machine's 1-minute
load average at its end: on a shared machine the Flower figures grow with it.
``wire_bytes["kinds"]``: per message kind (``query.send`` the round request, ``query.send reply``
the uplink, ``train.receive`` the downlink, ...), its count and serialised bytes, beside eq. (23)'s
``bytes_up`` / ``bytes_down`` of the same row.

``--baseline TREE``: also the Flower deployment row of the privzv in ``TREE`` (a checkout of another
commit, e.g. ``git archive main | tar -x -C TREE``), run in a subprocess that imports that tree,
in the same session (row ``flower_baseline``, and ``speedup_vs_baseline`` of the loop's seconds
per round): a before/after comparison on the same machine at the same load.
``seconds_per_round``: loop_seconds / rounds of each row; ``speedup_vs_issue``: the Flower row's
against :data:`ISSUE_SECONDS_PER_ROUND` (2.0 s a round, this setting at M = 2 when issue 23 was
filed); ``flower_rounds_per_second``: the Flower row's rounds per second by M (devices compute
concurrently: rounds of idle devices start while one is served).
``--cpu``: each row also gets ``cpu_seconds_per_round``, per process of the run (``inprocess``:
the benchmark's own; Flower: ``superlink``, the SuperLink with its ServerApp thread, and
``device<m>``, device m's SuperNode; the rows' child processes found in /proc by command line):
its user + system CPU seconds (``/proc/PID/stat``) from the run's first metrics line (the
evaluation at round 0) to its last (the final evaluation), divided by the rounds (a tick is
1/``SC_CLK_TCK`` s). A process's CPU time a round moves far less with the machine's load than the
wall time does, though it is not free of it (caches, frequency, lock hand-offs).
Run: ``python benchmarks/bench_engines.py [--rounds 4] [--devices 1 2 4] [--method dpzv]
[--modes deployment ...] [--baseline TREE]`` (needs privzv[flower]; simulation: privzv[flower-sim]).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from privzv.training import run
from privzv.training.config import TrainConfig
from privzv.training.engines.flower import launcher

ISSUE_SECONDS_PER_ROUND = 2.0  # a Flower round of this setting (M = 2) on main when issue 23 was filed
SECRET = 5
TICK = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's CPU times are in these units a second
ROLES = {"flower.serverlink": "superlink", "flower.supernode": "device"}  # command line -> process


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _processes(root: int) -> dict[str, int]:
    """The Flower processes below ``root`` by role (:data:`ROLES`; ``device<m>`` by partition id)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        for key, role in ROLES.items():
            if any(arg.endswith(key) for arg in args):
                part = next((a.split()[0] for a in args if a.startswith("partition-id=")), None)
                found[role if part is None else f"{role}{part.split('=')[1]}"] = pid
    return found


class CpuWatch(threading.Thread):
    """Per process (the Flower processes below this one, else this process as ``inprocess``), the
    CPU seconds between the first and the second line of ``folder/metrics.jsonl``."""

    def __init__(self, folder: Path, flower: bool):
        super().__init__(daemon=True)
        self.metrics, self.flower, self.done = folder / "metrics.jsonl", flower, threading.Event()
        self.seconds: dict[str, float] = {}

    def _lines(self) -> int:
        try:
            return self.metrics.read_bytes().count(b"\n")
        except OSError:
            return 0

    def run(self) -> None:
        pids, found = ({} if self.flower else {"inprocess": os.getpid()}), 0.0
        while not self.done.is_set() and self._lines() < 1:
            if self.flower and time.monotonic() > found + 0.25:
                pids, found = _processes(os.getpid()), time.monotonic()
            time.sleep(0.002)
        start = {name: _cpu(pid) for name, pid in pids.items()}
        while not self.done.is_set() and self._lines() < 2:
            time.sleep(0.002)
        self.seconds = {name: _cpu(pid) - start[name] for name, pid in pids.items()}


def _watched(args, folder: Path, flower: bool, work):
    """``work()``'s result and, with ``--cpu``, a :class:`CpuWatch` of run folder ``folder``'s CPU."""
    watch = CpuWatch(folder, flower)
    if args.cpu:
        watch.start()
    try:
        result = work()
    finally:
        watch.done.set()
        if args.cpu:
            watch.join()
    return result, watch.seconds


def _row(summary: dict, total: float, cpu: dict[str, float]) -> dict:
    loop = summary["wall_seconds"]
    return {
        **({"cpu_seconds_per_round": {k: v / summary["rounds"] for k, v in cpu.items()}} if cpu else {}),
        "rounds": summary["rounds"],
        "loop_seconds": loop,
        "total_seconds": total,
        "rounds_per_second": summary["rounds"] / loop,
        "bytes_up": summary["bytes_up"],
        "bytes_down": summary["bytes_down"],
        "test_accuracy": summary["test_accuracy"],
        "epsilon_spent": summary["epsilon_spent"],
        "load_average": os.getloadavg()[0],
    }


BASELINE = (
    """import json, sys
from pathlib import Path
from privzv.training.config import TrainConfig
from privzv.training.engines.flower import launcher
assert Path(launcher.__file__).is_relative_to(Path(sys.argv[3])), launcher.__file__
print(json.dumps(launcher.run(TrainConfig.from_dict(json.loads(sys.argv[1])), Path(sys.argv[2]), secret_seed=%d,
                              timeout=1200)))"""
    % SECRET
)


def _baseline(args, config: TrainConfig, tmp: Path) -> dict:
    """The Flower deployment row of the privzv in ``tree`` (its privzv/, training/ and attacks/
    folders arranged as the installed package, first on PYTHONPATH of a subprocess)."""
    tree, farm = args.baseline, tmp / "baseline-package"
    shutil.copytree(tree / "privzv", farm / "privzv")
    for sub in ("training", "attacks"):
        (farm / "privzv" / sub).symlink_to((tree / sub).resolve())
    start = time.perf_counter()
    done, cpu = _watched(
        args,
        tmp / "baseline",
        True,
        lambda: subprocess.run(
            [
                sys.executable,
                "-c",
                BASELINE,
                json.dumps(config.to_dict()),
                str(tmp / "baseline"),
                str(farm.resolve()),
            ],
            capture_output=True,
            text=True,
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": str(farm)},
        ),
    )  # not a cwd with privzv/
    if done.returncode != 0:
        raise SystemExit(f"the baseline run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        **_row(result["summary"], time.perf_counter() - start, cpu),
        "wire_bytes": result["wire"],
        "tree": str(tree),
    }


def _compare(args, devices: int, tmp: Path) -> dict:
    """The rows of one device count M: in-process, the Flower ``--modes``, the baseline."""
    config = TrainConfig(
        dataset="digits", method=args.method, devices=devices, epochs=args.rounds / 90, evals=1, epsilon=8.0
    )
    start = time.perf_counter()
    summary, cpu = _watched(
        args, tmp / "inprocess", False, lambda: run.train(config, tmp / "inprocess", secret_seed=SECRET)
    )
    inproc = _row(summary, time.perf_counter() - start, cpu)
    rows = {"inprocess": inproc}
    for mode in args.modes:
        name = "flower" if mode == "deployment" else f"flower_{mode.replace('-', '_')}"
        start = time.perf_counter()
        result, cpu = _watched(
            args,
            tmp / name,
            True,
            lambda: launcher.run(config, tmp / name, secret_seed=SECRET, timeout=1200, mode=mode),  # noqa: B023
        )
        rows[name] = {
            **_row(result["summary"], time.perf_counter() - start, cpu),
            "wire_bytes": result["wire"],
        }
    if args.baseline is not None:
        rows["flower_baseline"] = _baseline(args, config, tmp)
    per_round = {name: row["loop_seconds"] / row["rounds"] for name, row in rows.items()}
    return {
        **rows,
        "seconds_per_round": per_round,
        "overhead_seconds_per_round": {
            name: per_round[name] - per_round["inprocess"] for name in rows if name != "inprocess"
        },
        **(
            {"speedup_vs_baseline": per_round["flower_baseline"] / per_round["flower"]}
            if "flower_baseline" in rows and "flower" in rows
            else {}
        ),
        **({"speedup_vs_issue": ISSUE_SECONDS_PER_ROUND / per_round["flower"]} if "flower" in rows else {}),
        # this tree's Flower rows against in-process (a baseline of another commit may calibrate
        # another noise multiplier, and draw other noise from it)
        "same_metrics": all(
            (inproc["test_accuracy"], inproc["epsilon_spent"]) == (row["test_accuracy"], row["epsilon_spent"])
            for name, row in rows.items()
            if name != "flower_baseline"
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--method", default="dpzv")
    ap.add_argument("--devices", type=int, nargs="+", default=[2], help="device counts M (default 2)")
    ap.add_argument(
        "--modes",
        nargs="+",
        choices=launcher.MODES,
        default=["deployment"],
        help="Flower runs to time (launcher.MODES; default deployment): simulation = Ray "
        "(privzv[flower-sim])",
    )
    ap.add_argument("--baseline", type=Path, help="a checkout of another commit: its Flower row too")
    ap.add_argument("--cpu", action="store_true", help="each process's CPU seconds a round, too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        by_devices = {}
        for m in args.devices:
            (Path(tmp) / f"M{m}").mkdir()
            by_devices[m] = _compare(args, m, Path(tmp) / f"M{m}")
    print(
        json.dumps(
            {
                "setting": {
                    "dataset": "digits",
                    "method": args.method,
                    "batch_size": 32,
                    "rounds": args.rounds,
                    "epsilon": 8.0,
                },
                "devices": by_devices,
                "flower_rounds_per_second": {
                    m: rows["flower"]["rounds_per_second"]
                    for m, rows in by_devices.items()
                    if "flower" in rows
                },
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
