"""Faults of a local Flower run (issue 25 items 4 and 5), real processes on 127.0.0.1, each
bounded in time: whatever ends the run, every process it started is gone, the work folder with the
devices' noise keys, reply keys and data slices is removed, and the error is one line with the
documented exit code (1: the run failed)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from privzv.training.cli import main  # noqa: E402
from privzv.training.run_folder import FolderLock  # noqa: E402

ARGS = ["--dataset", "digits", "--method", "dpzv", "--devices", "2", "--epsilon", "8", "--secret-seed", "5",
        "--engine", "flower"]


def _inside(folder: Path) -> list[int]:
    """The processes whose working directory is inside ``folder`` (a run's processes run in its
    work folder, also once it is deleted)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(folder)):
            pids.append(int(proc.name))
    return pids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _until(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)
    return value


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    """A private temp directory for the launcher's work folders (``$TMPDIR``)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_timeout_is_one_line_exit_1_and_leaves_nothing(tmp, tmp_path, capsys):
    code = main([*ARGS, "--epochs", "1", "--out", str(tmp_path / "run"), "--flower-timeout", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "--flower-timeout" in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert list(tmp.glob("privzv-flower-*")) == [] and _inside(tmp) == []


@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_a_killed_launcher_leaves_no_process_and_no_secret(tmp, sig, code):
    """SIGKILL of the launcher: its guard stops the SuperLink, SuperNodes and executors and removes
    the 0700 work folder with the devices' noise keys; SIGTERM: the launcher does it, exit 143."""
    launcher = subprocess.Popen([sys.executable, "-c", (
        "from pathlib import Path; from privzv.training.config import TrainConfig; "
        "from privzv.training.engines.flower import launcher; "
        "launcher.run(TrainConfig(dataset='digits', devices=2, epsilon=8.0), Path(r'%s'), secret_seed=5, "
        "timeout=60)") % (tmp.parent / "run")], env={**os.environ, "TMPDIR": str(tmp)})
    try:
        (work,) = _until(lambda: [w for w in tmp.glob("privzv-flower-*") if (w / "device1" / "noise-key").exists()],
                         30, "the work folder")
        assert (work.stat().st_mode & 0o777) == 0o700 and (work / "device0").stat().st_mode & 0o077 == 0
        _until(lambda: len(_inside(work)) >= 5, 30, "the run's processes")   # SuperLink, 2 x (node, executor)
    finally:
        launcher.send_signal(sig)
        launcher.wait(20)
    _until(lambda: not work.exists() and _inside(tmp) == [], 60, "nothing left")
    assert launcher.returncode == code


def test_a_killed_serverapp_ends_the_run_at_once(tmp, tmp_path):
    """The ServerApp killed (or stopped by ``flwr stop``): the launcher notices within seconds, not
    after --flower-timeout; one line, exit 1; no process left; the run folder's lock is free."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "privzv", "train", *ARGS, "--epochs", "20", "--out", str(out),
                             "--flower-timeout", "300"], env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def server():
            return [pid for pid in _inside(tmp) if "flwr-serverapp" in _cmdline(pid)]

        (pid, *_) = _until(server, 120, "the ServerApp")
        time.sleep(1.0)   # the launcher has seen it (it looks every 0.2 s)
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.monotonic() - killed < 30   # --flower-timeout is 300
    assert proc.returncode == 1 and "ServerApp exited without a result" in err and err.count("\n") == 1, err
    assert _inside(tmp) == [] and list(tmp.glob("privzv-flower-*")) == []
    lock = FolderLock.take(out.parent / f".{out.name}.lock")
    assert lock is not None
    lock.release()


def test_a_rogue_process_that_takes_device_0s_task_cannot_answer_it(tmp, tmp_path):
    """Issue 25 item 1, played for real: a local process that is not part of the run connects to
    device 0's SuperNode (its Runtime API on 127.0.0.1), takes device 0's tasks (the device's own
    executor stopped), reads them and pushes a forged uplink. The task carries nothing of the
    device (its context's state is empty: no model, no generator state); the server refuses the
    forged reply (not signed with device 0's key): one line, exit 1."""
    from flwr.app import ConfigRecord, Message as FlowerMessage, RecordDict
    from flwr.common.constant import SubStatus
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

    import httpx
    import torch

    from privzv.training.engines.flower import codec, executor
    from privzv.training.messages import Message

    proc = subprocess.Popen([sys.executable, "-m", "privzv", "train", *ARGS, "--epochs", "2",
                             "--out", str(tmp_path / "run"), "--flower-timeout", "300"],
                            env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stopped, seen = None, []
    try:
        def device0_executor():
            return [pid for pid in _inside(tmp) if "executor" in _cmdline(pid) and
                    any(f"127.0.0.1:{p}" in _cmdline(pid) for p in _node_ports(tmp, 0))]

        (stopped, *_) = _until(device0_executor, 120, "device 0's executor")
        os.kill(stopped, signal.SIGSTOP)   # device 0's own process no longer takes its tasks
        address = _cmdline(stopped).split("\0")[_cmdline(stopped).split("\0").index("--runtime-api-address") + 1]
        def client(*interceptors):   # no retries: the SuperNode goes when the run ends
            return RuntimeHttpClient.from_server_address(server_address=address, insecure=True, root_certificates=None,
                                                         interceptors=list(interceptors), retry_invoker=None)

        tasks = client(RuntimeVersionHttpInterceptor(component_name="SuperExec"))
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and len(seen) < 3:
            try:
                res = tasks.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]))
            except httpx.ConnectError:   # the SuperNode is not listening yet
                res = None
            if not (res is not None and res.HasField("task") and res.token):
                time.sleep(0.05)
                continue
            task = client(RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                          RuntimeTokenHttpInterceptor(res.token))
            message, context, _ = executor.pull_task_input(task)
            kind = message.metadata.message_type
            seen.append((kind, set(context.state.keys())))
            if kind == "query.send":   # a forged uplink: device 0's batch ids, zero embeddings
                ids = message.content["batch"]["ids"].numpy()
                forged = codec.encode(Message(int(message.content["round"]["round"]), "device0", "server", "uplink",
                                              {"ids": torch.from_numpy(ids.copy()),
                                               "h_plus": torch.zeros(len(ids), 8), "h_minus": torch.zeros(len(ids), 8)}))
            else:
                forged = RecordDict({"node": ConfigRecord({"partition-id": 0})})
            push_message(task, FlowerMessage(forged, reply_to=message), context)
            push_task_output(task, context, SubStatus.COMPLETED, "")
            task.close()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert seen and all(keys == set() for _, keys in seen), seen
    assert proc.returncode == 1 and "not signed by device 0's key" in err and err.count("\n") == 1, err
    assert _until(lambda: _inside(tmp) == [], 20, "no process left")


def _node_ports(tmp: Path, m: int) -> list[str]:
    """The Runtime API ports of device m's SuperNode (from its command line)."""
    ports = []
    for pid in _inside(tmp):
        args = _cmdline(pid).split("\0")
        if "--node-config" in args and f"partition-id={m} " in args[args.index("--node-config") + 1]:
            ports.append(args[args.index("--port") + 1])
    return ports


def test_the_stack_names_a_dead_process_and_stops_orphaned_descendants(tmp_path):
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
        parent = stack.start("superlink", ["sh", "-c", "setsid sleep 31 & echo $! > orphan; sleep 3"], dict(os.environ))
        orphan = int(_until(lambda: (work / "orphan").exists() and (work / "orphan").read_text().strip(), 10, "the orphan"))
        parent.wait(10)   # the orphan now belongs to init, in a session of its own
        time.sleep(0.5)   # the guard has looked (every 0.2 s)
        with pytest.raises(Failed, match="superlink exited with code 0"):
            stack.check_alive()
    finally:
        stack.stop()
    assert not work.exists()
    assert not Path(f"/proc/{orphan}").exists() or "sleep" not in _cmdline(orphan)
