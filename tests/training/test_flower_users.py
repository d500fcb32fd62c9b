"""Per-party OS users (issue 23 item 2): run as root with ``--party-users``, each device's
process (its SuperNode, which runs its ClientApp) runs under a uid of their own, which can read its own
folder and state folder and nothing of the server (its work files, the run folder's private
part, the SuperLink's and ServerApp's environment) or of the other device; the run equals the
in-process run, and resumes with fresh ids. Skipped where not root.

Where this Python lives under a folder other users cannot search (here: pyenv under /root, mode
0700), the launcher runs in a private mount namespace in which that folder is a 0711 tmpfs
holding bind mounts of what the Python needs (:func:`_reachable_python`): the device users can
then start it, as they could a system Python; nothing changes outside the namespace."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")
if os.geteuid() != 0:
    pytest.skip(
        "party users: the launcher starts processes as other users, which needs root", allow_module_level=True
    )

from privzv.errors import PrivzvError  # noqa: E402
from privzv.training import run_folder  # noqa: E402
from privzv.training.cli import main  # noqa: E402
from privzv.training.engines.flower import users  # noqa: E402

ARGS = ["--dataset", "digits", "--method", "dpzv", "--devices", "2", "--epsilon", "8", "--secret-seed", "5"]


def _sealed(path: Path) -> Path | None:
    """The highest folder above ``path`` that other users cannot search, if any."""
    for folder in reversed(Path(path).resolve().parents):
        if not folder.stat().st_mode & 0o001:
            return folder
    return None


def _reachable_python(hidden: Path) -> list[str]:
    """A command prefix under which other users can start this Python: none where they already
    can; else a private mount namespace where the sealed folder is a 0711 tmpfs holding bind
    mounts of the entries on the way to this Python (its install and this environment)."""
    needed = [Path(os.path.realpath(sys.executable)), Path(sys.base_prefix), Path(sys.prefix)]
    sealed = {s for s in map(_sealed, needed) if s is not None}
    if not sealed:
        return []
    if len(sealed) > 1 or shutil.which("unshare") is None:
        pytest.skip(f"this Python is below folders other users cannot search: {sorted(map(str, sealed))}")
    (top,) = sealed
    kids = sorted({p.resolve().relative_to(top).parts[0] for p in needed if top in p.resolve().parents})
    script = ["set -e", f'mount --bind "{top}" "{hidden}"', f'mount -t tmpfs -o mode=0711 privzv "{top}"']
    for kid in kids:
        script += [f'mkdir "{top}/{kid}"', f'mount --bind "{hidden}/{kid}" "{top}/{kid}"']
    script.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh"]


@pytest.fixture
def place():
    """A folder other users can search (pytest's own temp folders are 0700), with ``tmp`` for
    the launcher's work folders and ``hidden`` for :func:`_reachable_python`."""
    if _sealed(Path(tempfile.gettempdir()) / "x") is not None:
        pytest.skip(f"{tempfile.gettempdir()} is below a folder other users cannot search")
    base = Path(tempfile.mkdtemp(prefix="privzv-users-"))
    base.chmod(0o711)
    for name, mode in (("tmp", 0o711), ("hidden", 0o700)):
        (base / name).mkdir(mode=mode)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _train(place: Path, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [*_reachable_python(place / "hidden"), sys.executable, "-m", "privzv", "train", *args],
        env={**os.environ, "TMPDIR": str(place / "tmp")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ids(pid: int) -> tuple[int, int, list[int]]:
    """(uid, gid, supplementary groups) of process ``pid``."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return (
        int(fields["Uid"].split()[0]),
        int(fields["Gid"].split()[0]),
        [int(g) for g in fields["Groups"].split()],
    )


def _readable(ids: tuple[int, int, int] | None, paths: list[Path]) -> set[Path]:
    """Which of ``paths`` a process with (uid, gid, group) ``ids`` can read (None: root, as we)."""
    drop = [] if ids is None else [sys.executable, "-I", "-S", "-c", users.DROP, *map(str, ids)]
    loop = 'for f; do if cat -- "$f" >/dev/null 2>&1; then echo "$f"; fi; done'
    done = subprocess.run(
        [*drop, "/bin/sh", "-c", loop, "sh", *map(str, paths)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return {Path(line) for line in done.stdout.splitlines()}


def _pid(procs, tmp: Path, *parts: str) -> int:
    (pid,) = [p for p in procs.inside(tmp) if all(part in procs.cmdline(p) for part in parts)]
    return pid


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.slow
def test_a_device_user_reads_nothing_of_the_server_or_the_other_device_and_the_run_is_the_same(
    place, procs, capsys
):
    """While a run is live (its SuperLink, which runs the ServerApp, paused): device 0's processes
    run as their own uid; that uid is denied every file of the work folder outside device 0's
    folder (device 1's keys, the TLS and SuperExec secrets, the secret seed, the reply keys, the
    logs), every file of the run folder's private/ outside its own state folder, and the
    environment of the SuperLink (the ServerApp's: the secret inputs' paths) and device 1's
    processes; root reads them all, and device 0 reads its own. Then the run finishes as the
    in-process run does."""
    tmp, out = place / "tmp", place / "run"
    args = [*ARGS, "--epochs", str(30 / 90), "--checkpoint-every", "2", "--json"]
    proc = _train(place, [*args, "--engine", "flower", "--party-users", "auto", "--out", str(out)])
    server = None
    try:
        states = [out / "private" / f"device{m}" / "flower" for m in range(2)]
        procs.until(
            lambda: all(list(s.glob("state-*.pt")) for s in states), 300, "both devices' saved states"
        )
        server = _pid(procs, tmp, "flower.serverlink")
        os.kill(server, signal.SIGSTOP)
        (work,) = tmp.glob("privzv-flower-*")
        parties = {
            name: _pid(procs, tmp, *parts)
            for name, parts in {
                "superlink": ("flower.serverlink",),
                **{f"node{m}": ("flower.supernode", f"device{m}") for m in range(2)},
            }.items()
        }
        ids = {name: _ids(pid) for name, pid in parties.items()}
        assert ids["superlink"][0] == 0
        (uid0, gid0, groups0), (uid1, _, _) = ids["node0"], ids["node1"]
        assert 0 != uid0 != uid1 != 0 and groups0 == [groups0[0]]
        device0 = (uid0, gid0, groups0[0])
        denied = [
            *(p for p in _files(work) if work / "device0" not in p.parents),
            *(p for p in _files(out / "private") if states[0] not in p.parents),
            *(Path(f"/proc/{parties[name]}/environ") for name in ("superlink", "node1")),
        ]
        names = {p.name for p in denied}
        assert {
            "node-key",
            "supernode.secret",
            "reply-key",
            "noise-key",
            "secret-seed",
            "reply-keys",
            "control.secret",
            "superlink.secret",
            "secrets.json",
            "ledger.journal",
        } <= names, names
        assert any(p.parent.name == "logs" for p in denied)
        assert any(states[1] in p.parents and p.name.startswith("state-") for p in denied)
        assert _readable(device0, denied) == set()
        assert _readable(None, denied) == set(denied)  # the probe is sound: root reads every one
        own = [
            work / "device0" / "node-key",
            *states[0].glob("state-*.pt"),
            Path(f"/proc/{parties['node0']}/environ"),
        ]
        assert _readable(device0, own) == set(own)
        os.kill(server, signal.SIGCONT)
        stdout, err = proc.communicate(timeout=300)
    finally:
        if server is not None:
            try:
                os.kill(server, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    got = json.loads(stdout)
    assert main([*args, "--out", str(place / "inprocess")]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert (got["rounds"], got["epsilon_spent"], got["bytes_up"], got["bytes_down"]) == (
        ref["rounds"],
        ref["epsilon_spent"],
        ref["bytes_up"],
        ref["bytes_down"],
    )
    for ours, theirs in zip(got["curve"], ref["curve"], strict=True):
        assert ours == pytest.approx(theirs, rel=1e-6)
    # after the run: no process, no work folder; the state folders root's again, private/ 0700
    assert procs.inside(tmp) == [] and list(tmp.glob("privzv-flower-*")) == []
    for folder in (out / "private", *states, *(s.parent for s in states)):
        st = folder.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o700), folder
    assert all(p.stat().st_uid == 0 for s in states for p in s.iterdir())


@pytest.mark.slow
def test_a_killed_party_users_run_resumes_under_fresh_ids_to_the_in_process_run(
    place, procs, capsys, curve_after_resume
):
    """Device 0's SuperNode killed mid-run (after a checkpoint with its saved state): one line,
    exit 1, the devices' saved states root's again; ``--resume --party-users auto`` (fresh ids,
    which the ServerApp hands the state folders to before the restore) finishes as the
    in-process run."""
    tmp, out = place / "tmp", place / "run"
    args = [*ARGS, "--epochs", str(14 / 90), "--checkpoint-every", "2"]
    proc = _train(place, [*args, "--engine", "flower", "--party-users", "auto", "--out", str(out)])
    try:
        state = out / "private" / "device0" / "flower"

        def committed():  # a checkpoint of the server's names a state device 0 saved
            try:
                tag = run_folder.party_state(out, "device0")["devices"][0]["tag"]
            except Exception:  # no checkpoint yet, or one being written
                return None
            return tag and (state / f"state-{tag}.pt").is_file()

        procs.until(committed, 300, "a committed checkpoint with device 0's saved state")
        node = _pid(procs, tmp, "flower.supernode", "device0")
        first = _ids(node)[0]
        os.kill(node, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1 and "device0 exited with code -9" in err and err.count("\n") == 1, err
    procs.until(lambda: procs.inside(tmp) == [] and not list(tmp.glob("privzv-flower-*")), 60, "nothing left")
    assert {p.stat().st_uid for p in state.iterdir()} == {0} and first != 0
    resumed = _train(place, ["--resume", str(out), "--engine", "flower", "--party-users", "auto", "--json"])
    stdout, err = resumed.communicate(timeout=400)
    assert resumed.returncode == 0, err
    assert main([*args, "--json", "--out", str(place / "inprocess")]) == 0
    got, ref = json.loads(stdout), json.loads(capsys.readouterr().out)
    assert (got["rounds"], got["epsilon_spent"], got["bytes_up"]) == (
        ref["rounds"],
        ref["epsilon_spent"],
        ref["bytes_up"],
    )
    curve_after_resume(got["curve"], ref["curve"])
    assert {p.stat().st_uid for p in state.iterdir()} == {0}


# ------------------------------------------------------------------ the parts, without a run
def test_drop_runs_a_command_as_the_device_with_umask_077(tmp_path):
    owners = users.Users(users.AUTO_RANGE[0])
    done = subprocess.run(
        [*owners.prefix(1), "/bin/sh", "-c", "id -u; id -g; id -G; umask"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    uid = owners.uid(1)
    assert done.stdout.split() == [str(uid), str(uid), str(uid), str(owners.base), "0077"], done.stderr


def test_options_and_bad_values(capsys):
    assert not users.resolve("off", 2) and users.resolve("77", 2) == users.Users(77)
    fresh = users.resolve("auto", 3)
    assert users.AUTO_RANGE[0] <= fresh.base < users.AUTO_RANGE[1]
    for bad in ("x", "0", "-5", str(users.LAST_ID)):
        with pytest.raises(PrivzvError, match="--party-users"):
            users.resolve(bad, 2)
    for argv in (["--party-users", "auto"], ["--engine", "flower", "--party-users", "nobody"]):
        assert main([*ARGS, "--epochs", "0.01", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--party-users" in err and "Traceback" not in err, err


def test_state_folders_are_handed_over_and_back_without_following_links(tmp_path):
    """The ServerApp's :meth:`Users.prepare_states`: each state folder the device's, the folders
    above it searchable by the run's group only; a link a device planted hands it nothing;
    :meth:`Users.take_back` returns everything to root, 0700."""
    out = tmp_path / "run"
    (out / "private" / "device0").mkdir(parents=True, mode=0o700)
    out.chmod(0o700)
    (out / "private").chmod(0o700)
    secret = out / "private" / "secrets.json"
    secret.write_text("{}")
    owners = users.Users(users.AUTO_RANGE[0])
    states = [out / "private" / f"device{m}" / "flower" for m in range(2)]
    owners.prepare_states(out, states)
    for folder in (out, out / "private", *(s.parent for s in states)):
        st = folder.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, owners.base, 0o710), folder
    for m, state in enumerate(states):
        st = state.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (owners.uid(m), owners.uid(m), 0o700)
    (states[0] / "link").symlink_to(secret)  # as a device could
    owners.prepare_states(out, states)
    assert secret.stat().st_uid == 0 and (states[0] / "link").lstat().st_uid == owners.uid(0)
    owners.take_back(out, states)
    for folder in (out, out / "private", *states, *(s.parent for s in states)):
        st = folder.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o700), folder
    assert (states[0] / "link").lstat().st_uid == 0


def test_an_unreachable_folder_is_named_before_anything_starts(tmp_path):
    """The launcher's check, run as the device's user: a folder it cannot search is named (where
    this Python itself is out of its reach, the Python is)."""
    sealed = tmp_path / "sealed"
    sealed.mkdir(mode=0o700)
    owners = users.Users(users.AUTO_RANGE[0])
    expected = str(sealed) if _sealed(Path(sys.executable)) is None else sys.executable
    with pytest.raises(PrivzvError, match="device 0's user") as info:
        owners.check_reach(0, [("rx", sealed)])
    assert expected in str(info.value)
