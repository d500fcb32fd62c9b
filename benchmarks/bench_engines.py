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
Flower loop's seconds per round minus the in-process one. The loop starts after the setup (the
devices' ``query.hello``, where each loads its data slice). Each row has the machine's 1-minute
load average at its end: on a shared machine the Flower figures grow with it.
``wire_bytes["kinds"]``: per message kind (``query.send`` the round request, ``query.send reply``
the uplink, ``train.receive`` the downlink, ...), its count and serialised bytes, beside eq. (23)'s
``bytes_up`` / ``bytes_down`` of the same row.

``--baseline TREE``: also the Flower deployment row of the privzv in ``TREE`` (a checkout of another
commit, e.g. ``git archive main | tar -x -C TREE``), run in a subprocess that imports that tree,
in the same session (row ``flower_baseline``, and ``speedup_vs_baseline`` of the loop's seconds
per round): a before/after comparison on the same machine at the same load.
``seconds_per_round``: loop_seconds / rounds of each row.
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
import time
from pathlib import Path

from privzv.training import run
from privzv.training.config import TrainConfig
from privzv.training.engines.flower import launcher

SECRET = 5


def _row(summary: dict, total: float) -> dict:
    loop = summary["wall_seconds"]
    return {
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


def _baseline(tree: Path, config: TrainConfig, tmp: Path) -> dict:
    """The Flower deployment row of the privzv in ``tree`` (its privzv/, training/ and attacks/
    folders arranged as the installed package, first on PYTHONPATH of a subprocess)."""
    farm = tmp / "baseline-package"
    shutil.copytree(tree / "privzv", farm / "privzv")
    for sub in ("training", "attacks"):
        (farm / "privzv" / sub).symlink_to((tree / sub).resolve())
    start = time.perf_counter()
    done = subprocess.run(
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
    )  # not a cwd with privzv/
    if done.returncode != 0:
        raise SystemExit(f"the baseline run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        **_row(result["summary"], time.perf_counter() - start),
        "wire_bytes": result["wire"],
        "tree": str(tree),
    }


def _compare(args, devices: int, tmp: Path) -> dict:
    """The rows of one device count M: in-process, the Flower ``--modes``, the baseline."""
    config = TrainConfig(
        dataset="digits", method=args.method, devices=devices, epochs=args.rounds / 90, evals=1, epsilon=8.0
    )
    start = time.perf_counter()
    inproc = _row(run.train(config, tmp / "inprocess", secret_seed=SECRET), time.perf_counter() - start)
    rows = {"inprocess": inproc}
    for mode in args.modes:
        name = "flower" if mode == "deployment" else f"flower_{mode.replace('-', '_')}"
        start = time.perf_counter()
        result = launcher.run(config, tmp / name, secret_seed=SECRET, timeout=1200, mode=mode)
        rows[name] = {**_row(result["summary"], time.perf_counter() - start), "wire_bytes": result["wire"]}
    if args.baseline is not None:
        rows["flower_baseline"] = _baseline(args.baseline, config, tmp)
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
        "same_metrics": all(
            (inproc["test_accuracy"], inproc["epsilon_spent"]) == (row["test_accuracy"], row["epsilon_spent"])
            for row in rows.values()
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
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
