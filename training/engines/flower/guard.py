"""``python -m privzv.training.engines.flower.guard WORK``: stops a local Flower run's processes
and removes its work folder ``WORK`` (the devices' noise seeds, reply keys and data slices)
however the launcher ends, SIGKILL included.

The launcher writes the pid of every process it starts to the guard's stdin, one a line. The
guard follows them and every descendant they start (in Flower's simulation, its SuperExec and
``flwr-simulation`` run in sessions of their own, and outlive a killed SuperLink), each known by pid and start time (a
reused pid is never signalled). When its stdin closes (the launcher stopped the run, or died),
it sends SIGTERM to every one still alive, SIGKILL after :data:`GRACE` s, removes ``WORK`` and
exits.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import time
from pathlib import Path

GRACE = 3.0
LOOK, LOOK_CAP = 0.2, 2.0  # seconds between looks for new descendants: doubling while none appear


def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    return children


class Tracked:
    """Processes by pid with their start time; :meth:`look` adds the live descendants."""

    def __init__(self):
        self.procs: dict[int, int] = {}

    def add(self, pid: int) -> None:
        start = _start_time(pid)
        if start is not None:
            self.procs.setdefault(pid, start)

    def look(self) -> bool:
        """Add the live descendants; whether there was a new one."""
        children, known = _children(), len(self.procs)
        todo = [pid for pid in self.procs if self.alive(pid)]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in self.procs:
                    self.add(child)
                    todo.append(child)
        return len(self.procs) > known

    def alive(self, pid: int) -> bool:
        return _start_time(pid) == self.procs[pid]

    def signal(self, sig: int) -> None:
        for pid in self.procs:
            if self.alive(pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def stop(self, grace: float = GRACE) -> None:
        """SIGTERM to every tracked process alive, SIGKILL to those alive after ``grace`` s."""
        self.look()
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(self.alive(pid) for pid in self.procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.look()
        self.signal(signal.SIGKILL)


def main() -> None:
    work = Path(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the launcher: the launcher stops us
    tracked, buffered, pause = Tracked(), b"", LOOK
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], pause)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            *lines, buffered = (buffered + chunk).split(b"\n")
            for line in lines:
                tracked.add(int(line))
        # a scan of /proc costs CPU on a busy machine: looked at less often while nothing starts
        pause = LOOK if tracked.look() or ready else min(2 * pause, LOOK_CAP)
    tracked.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
