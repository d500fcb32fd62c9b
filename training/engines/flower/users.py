"""Per-party OS users of a local Flower run (``privzv train --engine flower --party-users``).

Run as root, the launcher can start each device's process (its SuperNode, which runs its ClientApp)
under an OS user of its own, so that no device reads the server's files, another
device's files or the environment of any process but its own (``/proc/PID/environ`` is its
owner's). :func:`resolve` turns the option into :class:`Users`: ``off`` (every party runs as
the launcher's user), ``auto`` (root: a fresh range of numeric ids nobody uses, per run; not
root: off), or ``UID_BASE`` (root: ids from ``UID_BASE``). With base b, the run's group has gid
b and device m runs with uid = gid = b + 1 + m and the run's group as its only supplementary
group; numeric ids need no ``/etc/passwd`` entry.

A device's process is started through :data:`DROP` (as root: ``setgroups``, ``setgid``,
``setuid``, umask 077, then ``exec`` of its command), also behind a command prefix such as
``ip netns exec`` (``network.Network``). The launcher gives device m its folder (keys, secrets,
the run's CA certificate, its data slice, its transcript), and the ServerApp its state folder in
the run folder (:func:`prepare_states`, before each ``query.checkpoint`` / ``query.restore``);
everything else of the run is the server's. The folders a device must pass through (the work
folder, the run folder, its ``private/`` and ``private/device<m>/``) are opened to the run's
group for search only (mode 0710: no listing, and every file in them is 0600 or 0700); at the
end :func:`take_back` returns them and the state folders to root, 0700.
"""

from __future__ import annotations

import dataclasses
import grp
import os
import pwd
import secrets
import sys
from pathlib import Path

from privzv.errors import PrivzvError
from privzv.training.engines.flower import devicestate

ENV = "PRIVZV_FLOWER_USERS"  # the ServerApp's: the base id b of the run's party users
MODES = ("off", "auto")  # besides a number, UID_BASE
LAST_ID = 2**32 - 2  # (uid_t) -1 means "unchanged" to setuid
AUTO_RANGE = (2**30, 2**31 - 2**16)  # where ``auto`` draws its base: far above any system's users
SEARCH = 0o010  # group search: what the run's group gets on the folders a device passes through

# Run as root before a device's command: drop to the device's ids and the run's group, umask 077.
DROP = (
    "import os,sys\n"
    "u,g,G=(int(a) for a in sys.argv[1:4])\n"
    "os.setgroups([G]);os.setgid(g);os.setuid(u);os.umask(0o077)\n"
    "assert (os.getuid(),os.geteuid(),os.getgid(),os.getegid())==(u,u,g,g)\n"
    "try:os.execv(sys.argv[4],sys.argv[4:])\n"
    "except OSError:print(sys.argv[4]);sys.exit(126)\n"
)
# Run as a device's user: the first path (``r:``, ``x:``, ``rx:`` PATH) it cannot use, exit 1.
CHECK = (
    "import os,sys\n"
    "for a in sys.argv[1:]:\n"
    "  need,path=a.split(':',1)\n"
    "  if not os.access(path,sum({'r':os.R_OK,'x':os.X_OK}[c] for c in need)):\n"
    "    print(path);sys.exit(1)\n"
)


@dataclasses.dataclass(frozen=True)
class Users:
    """Device m's ids: uid = gid = ``base + 1 + m``; the run's group: ``base``. ``base`` None:
    every party runs as the launcher's user."""

    base: int | None = None

    def __bool__(self) -> bool:
        return self.base is not None

    def uid(self, m: int) -> int:
        return self.base + 1 + m

    def prefix(self, m: int) -> list[str]:
        """The command prefix that runs a command as device m (none when off)."""
        if not self:
            return []
        ids = (self.uid(m), self.uid(m), self.base)
        return [sys.executable, "-I", "-S", "-c", DROP, *map(str, ids)]

    def own(self, folder: Path, m: int | None) -> None:
        """``folder`` and its entries (a state folder is flat) owned by device m (``None``: by
        root); a link is never followed, so a device's link cannot hand it another file."""
        owner = (0, 0) if m is None else (self.uid(m), self.uid(m))
        os.lchown(folder, *owner)
        with os.scandir(folder) as entries:
            for entry in entries:
                os.lchown(entry.path, *owner)

    def share(self, folder: Path) -> None:
        """Let the run's group search ``folder`` (0700 -> 0710), unless every user may."""
        mode = folder.stat().st_mode
        if not mode & 0o001:
            os.chown(folder, -1, self.base)
            folder.chmod((mode | SEARCH) & 0o7777)

    def unshare(self, folder: Path) -> None:
        """Undo :meth:`share`: the folder back to root's group, without the group's search."""
        st = folder.stat()
        if st.st_gid == self.base:
            folder.chmod(st.st_mode & ~SEARCH & 0o7777)
            os.chown(folder, -1, 0)

    def prepare_states(self, out: Path, states: list[Path]) -> None:
        """Device m's state folder ``states[m]`` (0700) owned by it, and the folders from the run
        folder ``out`` down to it searchable by the run's group (the ServerApp, as root)."""
        for m, state in enumerate(states):
            devicestate.make_folder(state)
            for folder in [out, *reversed(state.parents[: len(state.relative_to(out).parts) - 1])]:
                self.share(folder)
            self.own(state, m)

    def take_back(self, out: Path, states: list[Path]) -> None:
        """After the run: the state folders root's again, the folders on their way unshared."""
        for state in states:
            if state.is_dir():
                self.own(state, None)
                for folder in state.parents[: len(state.relative_to(out).parts) - 1]:
                    self.unshare(folder)
        if out.is_dir():
            self.unshare(out)

    def check_reach(self, m: int, needs: list[tuple[str, Path]]) -> None:
        """PrivzvError naming the first of ``needs`` ((``r``/``x``/``rx``, path)) that device m's
        user cannot use (run as that user: the kernel's own checks)."""
        if not self:
            return
        import subprocess

        args = [f"{need}:{path}" for need, path in needs]
        done = subprocess.run(
            [*self.prefix(m), sys.executable, "-I", "-S", "-c", CHECK, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:  # a path it cannot use, or this Python cannot start as it
            what = done.stdout.strip() or f"{sys.executable} ({done.stderr.strip()[-200:]})"
            raise PrivzvError(
                f"--party-users: device {m}'s user (uid {self.uid(m)}) cannot reach {what}: make it "
                "and the folders above it searchable (and files readable) by other users, choose "
                "another --out or $TMPDIR, or --party-users off"
            )


OFF = Users()  # every party as the launcher's user


def resolve(spec: str, devices: int) -> Users:
    """:class:`Users` of the option ``spec`` for a run of ``devices`` devices (module docstring)."""
    spec = str(spec).strip()
    if spec == "off" or (spec == "auto" and os.geteuid() != 0):
        return OFF
    if spec == "auto":
        return _fresh(devices)
    try:
        base = int(spec)
    except ValueError:
        raise PrivzvError(
            f"--party-users {spec!r}: one of {', '.join(MODES)}, or a number UID_BASE in "
            f"[1, {LAST_ID - 1024}] (the run's gid; device m gets uid and gid UID_BASE + 1 + m)"
        ) from None
    if not 1 <= base <= LAST_ID - 1 - devices:
        raise PrivzvError(
            f"--party-users {base}: UID_BASE must be in [1, {LAST_ID - 1 - devices}] for "
            f"{devices} devices (the run's gid; device m gets uid and gid UID_BASE + 1 + m)"
        )
    if os.geteuid() != 0:
        raise PrivzvError(f"--party-users {base}: starting parties as other users needs root")
    return Users(base)


def _fresh(devices: int) -> Users:
    """A base whose ids (the group's and every device's) no user, group or process has."""
    taken = _process_ids()
    for _ in range(16):
        base = AUTO_RANGE[0] + secrets.randbelow(AUTO_RANGE[1] - AUTO_RANGE[0])
        ids = range(base, base + 1 + devices)
        if not any(i in taken or _known(i) for i in ids):
            return Users(base)
    raise PrivzvError("--party-users auto: found no free range of user ids; give a UID_BASE")


def _known(i: int) -> bool:
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(i)
            return True
        except KeyError:
            pass
    return False


def _process_ids() -> set[int]:
    """Every uid and gid of a live process (from /proc)."""
    ids: set[int] = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith(("Uid:", "Gid:")):
                    ids.update(int(v) for v in line.split()[1:])
        except (OSError, ValueError):
            continue
    return ids


class Preparing:
    """A ServerApp transport (``server.GridTransport``) that readies the devices' state folders
    (:meth:`Users.prepare_states`) before it pushes a message of one of ``kinds`` (a checkpoint,
    a restore): a fresh run's folder exists only once its first checkpoint is committed."""

    def __init__(self, transport, users: Users, out: Path, states: list[Path], kinds: tuple[str, ...]):
        self.transport, self.users, self.out, self.states, self.kinds = transport, users, out, states, kinds

    def nodes(self, count: int) -> list[int]:
        return self.transport.nodes(count)

    def wait(self, ids: list[str], what: str):
        return self.transport.wait(ids, what)

    def push(self, node: int, kind: str, content):
        if kind in self.kinds:
            self.users.prepare_states(self.out, self.states)
        return self.transport.push(node, kind, content)
