"""Faults of a local Flower run (issue 25 items 4 and 5), real processes on 127.0.0.1, each
bounded in time: whatever ends the run, every process it started is gone, the work folder with the
devices' noise keys, reply keys and data slices is removed, and the error is one line with the
documented exit code (1: the run failed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from privzv.training.cli import main  # noqa: E402
from privzv.training.run_folder import FolderLock  # noqa: E402

ARGS = [
    "--dataset",
    "digits",
    "--method",
    "dpzv",
    "--devices",
    "2",
    "--epsilon",
    "8",
    "--secret-seed",
    "5",
    "--engine",
    "flower",
]


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    """A private temp directory for the launcher's work folders (``$TMPDIR``)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_timeout_is_one_line_exit_1_and_leaves_nothing(tmp, tmp_path, capsys, procs):
    code = main([*ARGS, "--epochs", "1", "--out", str(tmp_path / "run"), "--flower-timeout", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "--flower-timeout" in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert list(tmp.glob("privzv-flower-*")) == [] and procs.inside(tmp) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 128 + signal.SIGTERM)]
)
def test_a_killed_launcher_leaves_no_process_and_no_secret(tmp, sig, code, procs):
    """SIGKILL of the launcher: its guard stops the SuperLink and the SuperNodes and removes
    the 0700 work folder with the devices' noise keys; SIGTERM: the launcher does it, exit 143."""
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "from pathlib import Path; from privzv.training.config import TrainConfig; "
                "from privzv.training.engines.flower import launcher; "
                "launcher.run(TrainConfig(dataset='digits', devices=2, epsilon=8.0), Path(r'%s'), secret_seed=5, "
                "timeout=60)"
            )
            % (tmp.parent / "run"),
        ],
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        (work,) = procs.until(
            lambda: [w for w in tmp.glob("privzv-flower-*") if (w / "device1" / "noise-key").exists()],
            30,
            "the work folder",
        )
        assert (work.stat().st_mode & 0o777) == 0o700 and (work / "device0").stat().st_mode & 0o077 == 0
        procs.until(
            lambda: len(procs.inside(work)) >= 4, 30, "the run's processes"
        )  # SuperLink, SuperExec, 2 SuperNodes
    finally:
        launcher.send_signal(sig)
        launcher.wait(20)
    procs.until(lambda: not work.exists() and procs.inside(tmp) == [], 60, "nothing left")
    assert launcher.returncode == code


@pytest.mark.slow
def test_a_killed_serverapp_ends_the_run_at_once(tmp, tmp_path, procs):
    """The ServerApp killed (it runs in the SuperLink's process, ``serverlink``): the launcher
    notices within seconds, not after --flower-timeout; one line naming the SuperLink, exit 1; no
    process left; the run folder's lock is free."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "privzv",
            "train",
            *ARGS,
            "--epochs",
            "20",
            "--out",
            str(out),
            "--flower-timeout",
            "300",
        ],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def server():
            running = (out / "metrics.jsonl").exists()  # the ServerApp's first evaluation
            return running and [pid for pid in procs.inside(tmp) if "flower.serverlink" in procs.cmdline(pid)]

        (pid, *_) = procs.until(server, 120, "the ServerApp")
        time.sleep(1.0)  # the launcher has seen it (it looks every 0.2 s)
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.monotonic() - killed < 30  # --flower-timeout is 300
    assert proc.returncode == 1 and "superlink exited with code -9" in err and err.count("\n") == 1, err
    assert procs.inside(tmp) == [] and list(tmp.glob("privzv-flower-*")) == []
    lock = FolderLock.take(out.parent / f".{out.name}.lock")
    assert lock is not None
    lock.release()


@pytest.mark.slow
def test_a_port_in_use_is_one_line_exit_1(tmp, tmp_path, capsys, monkeypatch, procs):
    """The SuperLink's port taken by another process (between privzv's choice and the bind): the
    SuperLink exits, the launcher says so in one line (exit 1) and leaves nothing."""
    from privzv.training.engines.flower import launcher

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setattr(launcher, "free_port", lambda: busy.getsockname()[1])
        code = main([*ARGS, "--epochs", "1", "--out", str(tmp_path / "run"), "--flower-timeout", "120"])
    err = capsys.readouterr().err
    assert code == 1 and "superlink exited" in err and "port is in use" in err and err.count("\n") == 1, err
    assert list(tmp.glob("privzv-flower-*")) == [] and procs.inside(tmp) == []


@pytest.mark.slow
def test_a_killed_device_is_named_at_once_and_resume_reaches_the_unkilled_run(
    tmp, tmp_path, procs, capsys, curve_after_resume
):
    """Device 0's process killed mid-run (SIGKILL): the launcher names it in one line within
    seconds (not after --flower-timeout), exit 1; no process left, the lock free; the server's
    last checkpoint and every device's own saved state are of the same checkpoint; ``--resume
    --engine flower`` (fresh credentials, fresh processes) then finishes the run as the unkilled
    in-process run: metrics, epsilon, ledger, every party's transcript."""
    from privzv.training import run_folder, transcript

    out, args = tmp_path / "run", [*ARGS, "--epochs", str(14 / 90), "--checkpoint-every", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "privzv", "train", *args, "--out", str(out), "--flower-timeout", "300"],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def device0_busy():  # a few of device 0's rounds answered
            found = [
                (pid, w)
                for pid in procs.inside(tmp)
                if "flower.supernode" in procs.cmdline(pid) and "device0" in procs.cmdline(pid)
                for w in tmp.glob("privzv-flower-*/device0/device0.jsonl")
                if w.stat().st_size > 2000
            ]
            return found[0] if found else None

        pid, _ = procs.until(device0_busy, 240, "device 0 at work")
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert time.monotonic() - killed < 30  # --flower-timeout is 300
    assert proc.returncode == 1 and "device0 exited with code -9" in err and err.count("\n") == 1, err
    procs.until(lambda: procs.inside(tmp) == [] and not list(tmp.glob("privzv-flower-*")), 60, "nothing left")
    checkpoint = run_folder.party_state(out, "device0")
    assert 0 < len(checkpoint["devices"]) and checkpoint["devices"][0]["step"] < 7  # killed mid-run
    for m in range(2):
        tag = run_folder.party_state(out, f"device{m}")["devices"][m]["tag"]
        assert (out / "private" / f"device{m}" / "flower" / f"state-{tag}.pt").is_file()
    resumed = subprocess.run(
        [sys.executable, "-m", "privzv", "train", "--resume", str(out), "--engine", "flower", "--json"],
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert procs.inside(tmp) == [] and list(tmp.glob("privzv-flower-*")) == []
    assert main([*args, "--engine", "inprocess", "--out", str(tmp_path / "ref"), "--json"]) == 0
    ref, got = json.loads(capsys.readouterr().out), json.loads(resumed.stdout)
    assert (got["rounds"], got["epsilon_spent"], got["bytes_up"]) == (
        ref["rounds"],
        ref["epsilon_spent"],
        ref["bytes_up"],
    )
    curve_after_resume(got["curve"], ref["curve"])
    ledgers = [json.loads((r / "private" / "ledger.json").read_text()) for r in (out, tmp_path / "ref")]
    assert ledgers[0] == ledgers[1]
    for party in ("server", "device0", "device1"):
        ours, theirs = (transcript.load(r, party) for r in (out, tmp_path / "ref"))
        assert [(e.round, e.direction, e.kind) for e in ours.entries] == [
            (e.round, e.direction, e.kind) for e in theirs.entries
        ]
        for e, f in zip(ours.entries, theirs.entries):
            for name in e.fields:
                assert np.allclose(e.fields[name], f.fields[name], rtol=1e-6, atol=1e-7), (party, e)


def test_the_stack_names_a_dead_process_and_stops_orphaned_descendants(tmp_path, procs):
    """A process of the run that exits (a killed SuperNode, a SuperLink that could not bind its
    port) is one line, exit 1; a descendant it left behind (as a killed SuperLink leaves Flower's
    SuperExec and ServerApp, in sessions of their own) is stopped too, and the folder removed."""
    from privzv.cliutil import Failed
    from privzv.training.engines.flower import launcher

    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    stack = launcher.Stack(work, work / "logs")
    try:
        stack.start("device0", ["sleep", "30"], dict(os.environ))
        parent = stack.start(
            "superlink", ["sh", "-c", "setsid sleep 31 & echo $! > orphan; sleep 3"], dict(os.environ)
        )
        orphan = int(
            procs.until(
                lambda: (work / "orphan").exists() and (work / "orphan").read_text().strip(), 10, "the orphan"
            )
        )
        parent.wait(10)  # the orphan now belongs to init, in a session of its own
        time.sleep(0.5)  # the guard has looked (every 0.2 s)
        with pytest.raises(Failed, match="superlink exited with code 0"):
            stack.check_alive()
    finally:
        stack.stop()
    assert not work.exists()
    assert not Path(f"/proc/{orphan}").exists() or "sleep" not in procs.cmdline(orphan)
