"""Where a Flower round's time goes (issue 23 item 1): one Flower deployment run (digits, dpzv,
M = 1, B = 32, epsilon 8, as ``bench_engines.py``) with Flower's DEBUG logs, whose lines carry
timestamps (ms), and per round (``query.send``) the median of four hops:

``push_to_node``    the ServerApp's push of the round's request (``Runtime.PushMessages``, a call
                    in the SuperLink's process: ``serverlink``) until the SuperNode holds the
                    message and its objects (``Received successfully``): the SuperNode's held
                    pull and its object pulls (its confirmation goes on meanwhile);
``device``          the SuperNode's ClientApp task until it pushes the reply (``Sending:``): the
                    task's Runtime API calls in its process and the device's compute;
``node_to_server``  until the ServerApp has confirmed the reply (``Runtime.ConfirmMessageReceived``
                    in the SuperLink): the SuperNode's push and object pushes, the ServerApp's held
                    pull and its object pulls (calls in the SuperLink's process);
``server``          until the ServerApp's next push: the server's half of the round, its ledger
                    and transcript, the next request.

``requests_per_round``: the HTTPS requests the SuperLink served per round (``POST`` lines of its
access log; the ServerApp's calls, in its process, are none of them), ``load_average``: the
1-minute load at the end. Logging every request adds its own cost, so the hops add up to more
than ``bench_engines.py``'s seconds per round.
Run: ``python benchmarks/flower_hops.py [--rounds 20]`` (prints JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import tempfile
from pathlib import Path

LINE = re.compile(
    r"^(?:\x1b\[[0-9;]*m)*[A-Z]+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})(?:\x1b\[[0-9;]*m)*:\s+(.*)$"
)
ACCESS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z .*\"POST /v1/")


def _events(log: Path) -> list[tuple[float, str]]:
    """(seconds, message) of each timestamped Flower line of ``log``."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if match := LINE.match(line):
            when = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((when, match[2].strip()))
    return out


def _requests(log: Path) -> list[float]:
    return [
        datetime.datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
        for line in log.read_text(errors="replace").splitlines()
        if (m := ACCESS.match(line))
    ]


def _first(events: list[tuple[float, str]], text: str, after: float) -> float:
    return next(t for t, msg in events if t >= after and msg.startswith(text))


def hops(logs: Path) -> dict:
    """The per-round hops (ms, medians) of the logs of a run with one device."""
    node, link = _events(logs / "device0.log"), _events(logs / "superlink.log")
    pushes = [t for t, msg in link if msg == "Runtime.PushMessages"]
    rows, spans = [], []
    for start, msg in node:
        if not msg.startswith("Receiving: query.send"):
            continue
        push = max(t for t in pushes if t <= start)
        held = _first(node, "Received successfully", start)
        sent = _first(node, "Sending:", held)
        confirmed = _first(link, "Runtime.ConfirmMessageReceived", sent)
        following = [t for t in pushes if t >= confirmed]
        if following:
            rows.append((held - push, sent - held, confirmed - sent, following[0] - confirmed))
            spans.append((push, following[0]))
    served = [t for t in _requests(logs / "superlink.log") if any(a <= t < b for a, b in spans)]
    names = ("push_to_node", "device", "node_to_server", "server")
    return {
        "rounds": len(rows),
        "ms": {name: round(1e3 * statistics.median(col), 1) for name, col in zip(names, zip(*rows))},
        "requests_per_round": round(len(served) / len(rows), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    os.environ["FLWR_LOG_LEVEL"] = "DEBUG"  # before Flower is imported: timestamps on every line
    from privzv.training.config import TrainConfig
    from privzv.training.engines.flower import launcher

    with tempfile.TemporaryDirectory() as tmp:
        kept, stop = Path(tmp) / "logs", launcher.Stack.stop

        def keep_logs(stack) -> None:
            shutil.copytree(stack.logs, kept)
            stop(stack)

        launcher.Stack.stop = keep_logs
        config = TrainConfig(dataset="digits", devices=1, epochs=args.rounds / 90, evals=1, epsilon=8.0)
        summary = launcher.run(config, Path(tmp) / "run", secret_seed=5, timeout=1200)["summary"]
        result = hops(kept)
    seconds = summary["wall_seconds"] / summary["rounds"]
    print(json.dumps({**result, "seconds_per_round": seconds, "load_average": os.getloadavg()[0]}, indent=1))


if __name__ == "__main__":
    main()
