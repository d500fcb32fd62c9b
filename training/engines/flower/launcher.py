"""Start a local Flower run on 127.0.0.1, submit privzv's app, wait, stop every process.

``run(config, out, ..., mode)`` (what ``privzv train --engine flower`` / ``flower-sim`` call):

1. a SuperLink (``flower-superlink --insecure``, its Fleet, Control and runtime APIs on one free
   port; ``--simulation`` in mode ``simulation``), with the server's inputs in its environment
   only (the run folder, the secret seed; in mode ``simulation``, which refuses private runs
   because its Ray workers inherit that environment, no secret);
2. each device's folder with its private noise key (``seeds.key(secret, "device", m)``, never
   the root) in the 0600 file ``folder/noise-key`` (not on a command line, which every local
   user can read in ``ps``);
   except in mode ``simulation`` (virtual SuperNodes): M SuperNodes (``supernode``, Flower's
   SuperNode with short waits), node config ``partition-id=m folder=<its folder>``, in mode
   ``deployment`` each with its long-lived ClientApp ``executor`` (``--isolation process``), in
   mode ``per-message`` with Flower's ClientApp process per message;
3. ``flwr run`` of a generated app folder (``pyproject.toml`` naming ``apps.server_app`` and
   ``apps.client_app``, the public config as the run config ``privzv-config``);
4. waits for the ServerApp's status file (bounded by ``timeout``), copies the devices'
   transcripts into ``out/transcripts/``, stops every process it started (SIGTERM, then SIGKILL).

Every process runs in its own session; on any error or timeout all of them are stopped.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from privzv.errors import PrivzvError
from privzv.training import methods, seeds
from privzv.training.config import TrainConfig
from privzv.training.messages import device_name

APP = "privzv.training.engines.flower.apps"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_folder(folder: Path, config: TrainConfig) -> Path:
    """A Flower app whose components are privzv's apps and whose run config is ``config``."""
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "privzv-run"
version = "1.0.0"
description = "a privzv training run on Flower"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "privzv"

[tool.flwr.app.components]
serverapp = "{APP}:server_app"
clientapp = "{APP}:client_app"

[tool.flwr.app.config]
privzv-config = {json.dumps(json.dumps(config.to_dict()))}
""")
    return folder


class Stack:
    """The processes of one local Flower deployment (stopped by :meth:`stop`, also on error)."""

    def __init__(self, work: Path, logs: Path):
        self.work, self.logs = work, logs
        self.procs: list[subprocess.Popen] = []
        self.names: dict[int, str] = {}   # pid -> the name given to start

    def start(self, name: str, args: list[str], env: dict) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=self.work, start_new_session=True)
        log.close()
        self.procs.append(proc)
        self.names[proc.pid] = name
        return proc

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise PrivzvError(f"flower: {self.names[proc.pid]} exited with code {proc.returncode}"
                                  f" (logs in {self.logs})")

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM to every process started and to their descendants, SIGKILL after ``grace``."""
        pids = [p for proc in self.procs for p in [proc.pid, *_descendants(proc.pid)]]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        for proc in self.procs:
            proc.wait()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc; empty where /proc is missing)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _bin(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        raise PrivzvError(f"--engine flower: {name} not found next to {sys.executable}; "
                          "pip install 'privzv[flower]'")
    return str(path)


MODES = ("deployment", "per-message", "simulation")


def run(config: TrainConfig, out: Path, *, secret_seed: int, overwrite: bool = False,
        checkpoint_every: int | None = None, timeout: float = 600.0, mode: str = "deployment") -> dict:
    """Train ``config`` on a local Flower run into run folder ``out``; returns
    ``{"summary": ..., "wire": ...}`` (the ServerApp's summary and its message bytes).

    ``mode``: ``"deployment"``: one SuperNode per device (``--isolation process``) and beside it
    the device's long-lived ClientApp ``executor``; ``"per-message"``: the same SuperNodes with
    Flower's own ClientApp process per message (``--isolation subprocess``); ``"simulation"``:
    Flower's simulation runtime (``flower-superlink --simulation``, Ray; ``privzv[flower-sim]``),
    virtual SuperNodes whose ClientApps run in Ray workers shared by all devices."""
    if mode not in MODES:
        raise PrivzvError(f"flower: mode {mode!r}: one of {', '.join(MODES)}")
    if config.threat != "device":
        raise PrivzvError(f"--threat {config.threat}: not with --engine flower (its --insecure gRPC "
                          "shows the secret batches and their sizes; in-process only until TLS)")
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise PrivzvError("--engine flower: needs the optional package flwr: "
                          "pip install 'privzv[flower]'") from None
    if mode == "simulation" and config.private:
        raise PrivzvError("--engine flower-sim: not for a private run (Ray's workers run every "
                          "device's ClientApp beside the server's secrets); use --engine flower")
    if mode == "simulation" and importlib.util.find_spec("ray") is None:
        raise PrivzvError("--engine flower-sim: needs Ray, Flower's simulation backend: "
                          "pip install 'privzv[flower-sim]'")
    if config.secure_noise and methods.get(config.method).RELEASED_BY == "device":
        raise PrivzvError(f"--secure-noise: not with --engine flower for {config.method} (a device "
                          "recomputes its noisy uplink from its seeded generator)")
    out = Path(out).resolve()
    work = Path(tempfile.mkdtemp(prefix="privzv-flower-"))
    logs = work / "logs"
    logs.mkdir()
    stack = Stack(work, logs)
    try:
        result = _run(stack, config, out, secret_seed, overwrite, checkpoint_every, timeout, mode)
    finally:
        stack.stop()   # the logs stay in ``work`` when the run failed
    shutil.rmtree(work, ignore_errors=True)
    return result


def _run(stack: Stack, config, out: Path, secret: int, overwrite: bool, every, timeout: float,
         mode: str) -> dict:
    from privzv.training.engines.flower import apps   # needs flwr (checked by run)

    work = stack.work
    port = free_port()
    status = work / "status.json"
    base = {**os.environ, "FLWR_HOME": str(work / "home"), "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2",
            "PYTHONUNBUFFERED": "1",   # Flower starts flower-superexec, flwr-serverapp etc. from PATH
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    server_env = {**base, "PRIVZV_FLOWER_OUT": str(out), "PRIVZV_FLOWER_STATUS": str(status),
                  "PRIVZV_FLOWER_OVERWRITE": "1" if overwrite else "0", "PRIVZV_FLOWER_TIMEOUT": str(timeout),
                  **secret_environment(secret, mode)}
    if every is not None:
        server_env["PRIVZV_FLOWER_CHECKPOINT_EVERY"] = str(every)
    for m in range(config.devices):
        folder = work / device_name(m)
        folder.mkdir(mode=0o700)
        key_file = folder / apps.NOISE_KEY
        key_file.touch(mode=0o600)
        key_file.write_text(seeds.key(secret, "device", m).hex())
    if mode == "simulation":   # the ClientApps run in Ray workers started from the SuperLink's tree
        stack.start("superlink", [_bin("flower-superlink"), "--insecure", "--simulation", "--host",
                                  "127.0.0.1", "--port", str(port), "--disable-runtime-dependency-installation"],
                    {**server_env, apps.DEVICES_ENV: str(work), "RAY_TMPDIR": str(work)})   # Ray's files go too
    else:
        stack.start("superlink", [_bin("flower-superlink"), "--insecure", "--host", "127.0.0.1",
                                  "--port", str(port), "--disable-runtime-dependency-installation"], server_env)
        for m in range(config.devices):
            _start_device(stack, m, port, mode == "deployment", base)
    home = work / "home"
    home.mkdir()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                      f'address = "127.0.0.1:{port}"\ninsecure = true\n')
    deadline = time.monotonic() + timeout
    app = app_folder(work / "app", config)
    while True:   # the SuperLink takes a few seconds to listen
        stack.check_alive()
        submit = subprocess.run([_bin("flwr"), "run", str(app), "local", *(
            ["--federation-config", f"num-supernodes={config.devices}"] if mode == "simulation" else [])],
                                env=base, cwd=work,
                                capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
        if submit.returncode == 0 and "Successfully started run" in submit.stdout:
            break
        if time.monotonic() > deadline:
            raise PrivzvError(f"flower: flwr run failed: {(submit.stdout + submit.stderr).strip()[-400:]}")
        time.sleep(0.5)
    while not status.exists():
        stack.check_alive()
        if time.monotonic() > deadline:
            raise PrivzvError(f"flower: the run did not finish within {timeout:g} s (--flower-timeout)")
        time.sleep(0.1)
    result = json.loads(status.read_text())
    if "error" in result:
        if "\n" in result["error"]:   # an unexpected failure: its traceback, then one line
            sys.stderr.write(result["error"])
        raise PrivzvError(result["error"].strip().splitlines()[-1])
    if config.transcripts:
        for m in range(config.devices):
            for path in (work / device_name(m)).glob(f"{device_name(m)}.*"):
                shutil.copy2(path, out / "transcripts" / path.name)
    return result


def secret_environment(secret: int, mode: str) -> dict:
    """The SuperLink's secret inputs: the root secret seed, except in mode ``simulation``, where
    the devices' ClientApps run in Ray workers that inherit the SuperLink's environment (that
    mode trains only runs without noise, whose server then draws its own secret seed)."""
    return {} if mode == "simulation" else {"PRIVZV_FLOWER_SECRET_SEED": str(secret)}


def _start_device(stack: Stack, m: int, port: int, warm: bool, env: dict) -> None:
    """Device m's SuperNode (node config: its partition id and folder), and with ``warm`` its
    long-lived ClientApp executor on the SuperNode's Runtime API."""
    folder = stack.work / device_name(m)
    runtime = free_port()
    stack.start(device_name(m), [sys.executable, "-m", "privzv.training.engines.flower.supernode",
                                 "--insecure", "--superlink", f"127.0.0.1:{port}",
                                 "--isolation", "process" if warm else "subprocess",
                                 "--host", "127.0.0.1", "--port", str(runtime),
                                 "--node-config", f"partition-id={m} folder={json.dumps(str(folder))}"], env)
    if warm:
        stack.start(f"{device_name(m)}-executor",
                    [sys.executable, "-m", "privzv.training.engines.flower.executor", "--insecure",
                     "--runtime-api-address", f"127.0.0.1:{runtime}"], env)
