"""Start a local Flower run on 127.0.0.1, submit privzv's app, wait, stop every process.

``run(config, out, ..., mode)`` (what ``privzv train --engine flower`` / ``flower-sim`` call):

1. a work folder ``$TMPDIR/privzv-flower-*`` (mode 0700) and its ``guard`` process, which stops
   every process of the run and removes the folder however the launcher ends (SIGKILL
   included); folders that dead launchers left are removed first (:func:`remove_stale`);
2. the run's credentials (``credentials.make``: a per-run CA, TLS certificates, node keys,
   SuperExec and Control API secrets, every private part 0600);
3. a SuperLink (``control.py superlink``: ``flower-superlink`` over TLS, its Fleet, Control and
   Runtime APIs on one free port, its Control API for the launcher only; ``--isolation process``
   and ``--enable-supernode-auth``, or ``--simulation`` in mode ``simulation``), which runs the
   ServerApp in its own process (``serverlink``; in mode ``simulation`` Flower's
   ``flwr-simulation``) and has the server's inputs in its environment only, as paths (the run
   folder, the 0600 files of the secret seed and of the devices' reply keys; in mode
   ``simulation``, which refuses private runs because its Ray workers inherit the SuperLink's
   environment, no secret seed);
4. each device's folder (0700) with its private noise key (``seeds.key(secret, "device", m)``,
   never the root) in the 0600 file ``noise-key``, its per-run reply key in ``reply-key``, its
   node key and its SuperNode's TLS key and SuperExec secret (not on a command line, which every
   local user can read in ``ps``), and a copy of the run's CA certificate; except in mode ``simulation`` (virtual SuperNodes): device
   m's node key registered (``flwr supernode register``), its SuperNode (``supernode``,
   Flower's SuperNode with short waits, ``--isolation process``, the device's ClientApp tasks
   answered in its process: ``executor``), node config ``partition-id=m folder=<its folder>
   state=<out/private/device<m>/flower>`` (its own state folder, which outlives the work
   folder: ``devicestate.in_run``); then ``flwr run`` of the
   app (``apps.server_app`` and ``apps.client_app``, the public config as the run config
   ``privzv-config``); with party users (``users``, root only) each device's processes run under
   an OS user of their own, which owns its folder and its state folder and nothing else;
5. waits for the ServerApp's status file (bounded by ``timeout``; a process that exits, the
   ServerApp included, ends the wait at once), copies the devices' transcripts into
   ``out/transcripts/``, and has the guard stop everything (SIGTERM, then SIGKILL).

``run(None, out, resume=True)`` continues the Flower run in ``out`` from its last checkpoint
(:func:`resumed` checks the folder first) on a new work folder and new credentials; each device
continues from its own saved state (``server.FlowerEngine.load_state_dict``).

A runtime failure (a process died, a timeout, a refused reply) raises ``cliutil.Failed`` (exit
1), bad input ``PrivzvError`` (exit 2), both one line naming a copy of the logs; SIGTERM and
SIGHUP stop the run as an error does and exit 143 and 129.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from privzv.cliutil import Failed
from privzv.errors import PrivzvError
from privzv.training import methods, seeds
from privzv.training.config import TrainConfig
from privzv.training.engines.flower import control, credentials, devicestate, guard, serverlink, users
from privzv.training.engines.flower.network import LOCAL, Network
from privzv.training.messages import device_name
from privzv.training.run_folder import RunFolder

APP = "privzv.training.engines.flower.apps"
SERVERLINK = "privzv.training.engines.flower.serverlink"  # the SuperLink that runs the ServerApp
CONTROL = (
    "privzv.training.engines.flower.control"  # flower-superlink and flwr with the run's Control API secret
)
WORK_PREFIX = "privzv-flower-"
SERVER_PROCESS = "flwr-simulation"  # what runs the ServerApp in mode simulation (else the SuperLink)
SECRET_FILE = "PRIVZV_FLOWER_SECRET_SEED_FILE"  # the ServerApp's: the path of the secret seed's 0600 file
SERVER_START = 30.0  # seconds from the submission within which the ServerApp must be running
SCAN = 1.0  # seconds between looks in /proc for the ServerApp (a process's exit is seen at once)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_folder(folder: Path, config: TrainConfig) -> Path:
    """A Flower app whose components are privzv's apps and whose run config is ``config``."""
    folder.mkdir(mode=0o700, parents=True)
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
    """The processes of one local Flower deployment in work folder ``work``: each is handed to a
    ``guard`` process as it starts; :meth:`stop` (or the launcher's death, SIGKILL included)
    makes the guard stop them and their descendants and remove ``work``."""

    def __init__(self, work: Path, logs: Path, server: str | None = None):
        self.work, self.logs, self.server = work, logs, server  # server: the ServerApp's process name
        self.procs: list[subprocess.Popen] = []
        self.names: dict[int, str] = {}  # pid -> the name given to start
        self.guard = subprocess.Popen(
            [sys.executable, "-m", "privzv.training.engines.flower.guard", str(work)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.server_seen = False  # whether the ServerApp process has been seen running
        self.scanned = -math.inf  # time.monotonic() of the last look in /proc

    def start(self, name: str, args: list[str], env: dict) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.work,
            start_new_session=True,
        )
        log.close()
        self.guard.stdin.write(f"{proc.pid}\n".encode())
        self.guard.stdin.flush()
        self.procs.append(proc)
        self.names[proc.pid] = name
        return proc

    def check_alive(self, submitted: float | None = None) -> None:
        """Failed (one line) when a process started has exited, or, once the run was submitted
        (at ``time.monotonic()`` ``submitted``), the ServerApp's task ended (``serverlink``) or
        its process ``server`` is gone (seen, or not seen within :data:`SERVER_START` s: it may
        have come and gone unseen; looked for in /proc at most every :data:`SCAN` s)."""
        for proc in self.procs:
            if proc.poll() is not None:
                name = self.names[proc.pid]
                raise Failed(
                    f"flower: {name} exited with code {proc.returncode}{_why(self.logs / f'{name}.log')}"
                )
        if any(self.work.glob(f"{serverlink.EXIT_PREFIX}*.exit")):  # the SuperLink's ServerApp ended
            raise Failed("flower: the ServerApp exited without a result (stopped)")
        if self.server is None or time.monotonic() < self.scanned + SCAN:
            return
        self.scanned = time.monotonic()
        running = any(self.server in _cmdline(pid) for proc in self.procs for pid in _descendants(proc.pid))
        self.server_seen = self.server_seen or running
        if (
            submitted is not None
            and not running
            and (self.server_seen or time.monotonic() > submitted + SERVER_START)
        ):
            raise Failed("flower: the ServerApp exited without a result (killed, or stopped by flwr stop)")

    def stop(self) -> None:
        """The guard stops every process started and its descendants and removes the work folder."""
        self.guard.stdin.close()
        self.guard.wait()
        for proc in self.procs:
            proc.wait()


WHY = {  # a phrase of a dead process's log -> what the one-line error adds
    "address already in use": "its port is in use by another process",
    "Failed to activate SuperNode": "the SuperLink refused its node key",
    "could not establish a connection to the SuperLink": "the SuperLink cannot be reached",
}


def _why(log: Path) -> str:
    """``": <reason>"`` for the first phrase of :data:`WHY` in ``log`` (with its line), else ``""``."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for phrase, reason in WHY.items():
        for line in reversed(lines):
            if phrase in line:
                return f": {reason} ({line.strip()[-160:]})"
    return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc; empty where /proc is missing)."""
    children = guard._children()
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def remove_stale(tmp: Path) -> None:
    """Remove the work folders ``privzv-flower-*`` in ``tmp`` that this user's dead launchers left
    (a launcher and its guard both killed): each names its launcher's pid in ``launcher.pid``
    (a folder without one is left alone: it may be a launcher's that is starting now)."""
    for folder in tmp.glob(f"{WORK_PREFIX}*"):
        try:
            if folder.stat().st_uid != os.getuid():
                continue
            pid = int((folder / "launcher.pid").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


def _bin(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        raise PrivzvError(
            f"--engine flower: {name} not found next to {sys.executable}; pip install 'privzv[flower]'"
        )
    return str(path)


MODES = ("deployment", "simulation")
SPAWNED = ("flower-superexec", "flwr-simulation", "flwr-clientapp")  # by name, from PATH


def _shims(folder: Path) -> Path:
    """``folder`` with a script per Flower command that Flower starts by name (:data:`SPAWNED`),
    each running that command with this interpreter (``sys.executable``): a console script's own
    ``#!`` line may name another environment's Python (a copied virtualenv), whose privzv is
    not this one."""
    folder.mkdir(mode=0o700)
    for name in SPAWNED:
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(_bin(name))} "$@"\n')
        shim.chmod(0o700)
    return folder


def run(
    config: TrainConfig | None,
    out: Path,
    *,
    secret_seed: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    checkpoint_every: int | None = None,
    timeout: float = 600.0,
    mode: str = "deployment",
    net: Network = LOCAL,
    party_users: str = "off",
) -> dict:
    """Train ``config`` on a local Flower run into run folder ``out``; returns
    ``{"summary": ..., "wire": ...}`` (the ServerApp's summary and its message bytes).

    ``net``: where the processes live (``network.Network``; default: all on 127.0.0.1).
    ``mode``: ``"deployment"``: one SuperNode per device (``--isolation process``), which runs
    the device's ClientApp in its own process (``executor``); ``"simulation"``:
    Flower's simulation runtime (``flower-superlink --simulation``, Ray; ``privzv[flower-sim]``),
    virtual SuperNodes whose ClientApps run in Ray workers shared by all devices.
    ``resume``: continue the Flower run in ``out`` from its last checkpoint (``config`` None or
    the run's own; its secret seed is the run's), on fresh credentials; each device continues
    from its own state, which it saved in its own state folder ``out/private/device<m>/flower``
    (node config ``state``, handed to device m alone; ``devicestate``).
    ``party_users``: ``off``, ``auto`` or ``UID_BASE`` (``users.resolve``): run each device's
    processes under an OS user of its own (root only; not in mode ``simulation``)."""
    if mode not in MODES:
        raise PrivzvError(f"flower: mode {mode!r}: one of {', '.join(MODES)}")
    if resume and mode == "simulation":
        raise PrivzvError(
            "--engine flower-sim: --resume continues in-process and --engine flower runs only (the "
            "simulation's devices keep their state in its temporary work folder)"
        )
    if resume:
        config, secret_seed = resumed(Path(out), config)
    if config.threat != "device":
        raise PrivzvError(
            f"--threat {config.threat}: not with --engine flower (the sizes of its "
            "messages on the wire, TLS or not, show the secret batch sizes; in-process only)"
        )
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise PrivzvError(
            "--engine flower: needs the optional package flwr: pip install 'privzv[flower]'"
        ) from None
    if mode == "simulation" and config.private:
        raise PrivzvError(
            "--engine flower-sim: not for a private run (Ray's workers run every "
            "device's ClientApp beside the server's secrets); use --engine flower"
        )
    if mode == "simulation" and importlib.util.find_spec("ray") is None:
        raise PrivzvError(
            "--engine flower-sim: needs Ray, Flower's simulation backend: pip install 'privzv[flower-sim]'"
        )
    owners = users.resolve(party_users, config.devices)
    if owners and mode == "simulation":
        raise PrivzvError(
            f"--party-users {party_users}: not with --engine flower-sim (its Ray workers run "
            "every device in the SuperLink's process tree)"
        )
    if config.secure_noise and methods.get(config.method).RELEASED_BY == "device":
        raise PrivzvError(
            f"--secure-noise: not with --engine flower for {config.method} (a device "
            "recomputes its noisy uplink from its seeded generator)"
        )
    out = Path(out).resolve()
    remove_stale(Path(tempfile.gettempdir()))
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX))  # mode 0700
    credentials.private_file(work / "launcher.pid", str(os.getpid()).encode())
    logs = work / "logs"
    logs.mkdir(mode=0o700)
    stack = Stack(work, logs, SERVER_PROCESS if mode == "simulation" else None)
    try:
        with _signals_stop():
            return _run(
                stack,
                config,
                out,
                secret_seed,
                resume,
                overwrite,
                checkpoint_every,
                timeout,
                mode,
                net,
                owners,
            )
    except (Failed, PrivzvError) as exc:  # the logs outlive the work folder, the secrets do not
        kept = Path(tempfile.mkdtemp(prefix="privzv-logs-flower-"))
        shutil.copytree(logs, kept, dirs_exist_ok=True)
        raise (Failed if isinstance(exc, Failed) else PrivzvError)(f"{exc} (logs in {kept})") from None
    finally:
        stack.stop()
        if owners:  # the devices' processes are gone: their state folders are root's again
            owners.take_back(out, [devicestate.in_run(out, m) for m in range(config.devices)])


@contextlib.contextmanager
def _signals_stop():
    """SIGTERM and SIGHUP end the run as an error does (every process stopped, the work folder
    removed), then the process exits 128 + the signal's number, as it would have."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _run(
    stack: Stack,
    config,
    out: Path,
    secret: int,
    resume: bool,
    overwrite: bool,
    every,
    timeout: float,
    mode: str,
    net: Network,
    owners: users.Users,
) -> dict:
    from privzv.training.engines.flower import apps  # needs flwr (checked by run)

    work = stack.work
    port = free_port()
    status = work / "status.json"
    folders = [work / device_name(m) for m in range(config.devices)]
    for folder in folders:
        folder.mkdir(mode=0o700)
    creds = credentials.make(work, folders, net.link_hosts())
    states = [devicestate.in_run(out, m) for m in range(config.devices)]
    base = {
        **os.environ,
        "FLWR_HOME": str(work / "home"),
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2",
        "PYTHONUNBUFFERED": "1",  # Flower starts flower-superexec, flwr-serverapp etc. from PATH
        "PATH": os.pathsep.join([str(_shims(work / "bin")), os.environ.get("PATH", "")]),
        control.ENV: str(creds.control),
    }
    server_env = {
        **base,
        "PRIVZV_FLOWER_OUT": str(out),
        "PRIVZV_FLOWER_STATUS": str(status),
        "PRIVZV_FLOWER_OVERWRITE": "1" if overwrite else "0",
        "PRIVZV_FLOWER_TIMEOUT": str(timeout),
        "PRIVZV_FLOWER_KEYS": str(work / "reply-keys"),
        # a resumed run's server reads the secret seed from its own run folder
        **({apps.RESUME_ENV: "1"} if resume else secret_environment(work, secret, mode)),
    }
    if every is not None:
        server_env["PRIVZV_FLOWER_CHECKPOINT_EVERY"] = str(every)
    if owners:  # the ServerApp readies each device's state folder in the run folder for it
        server_env[users.ENV] = str(owners.base)
    keys = [secrets.token_bytes(32) for _ in range(config.devices)]  # per run, per device
    credentials.private_file(work / "reply-keys", "\n".join(key.hex() for key in keys).encode())
    for m, folder in enumerate(folders):
        credentials.private_file(folder / apps.NOISE_KEY, seeds.key(secret, "device", m).hex().encode())
        credentials.private_file(folder / apps.REPLY_KEY, keys[m].hex().encode())
    if owners:  # device m reaches its own folder only: the work folder is searchable, not listable
        owners.share(work)
        for m, folder in enumerate(folders):
            owners.own(folder, m)
            owners.check_reach(m, _needs(config, folder, out))
    link = [
        "--host",
        net.bind,
        "--port",
        str(port),
        "--disable-runtime-dependency-installation",
        *creds.superlink.flags(creds.ca),
    ]
    if mode == "simulation":  # the ClientApps run in Ray workers started from the SuperLink's tree
        stack.start(
            "superlink",
            [*net.server, sys.executable, "-m", CONTROL, "superlink", *link, "--simulation"],
            {**server_env, apps.DEVICES_ENV: str(work), "RAY_TMPDIR": str(work)},
        )  # Ray's files go too
    else:  # the ServerApp in the SuperLink's process (serverlink), devices authenticated
        stack.start(
            "superlink",
            [
                *net.server,
                sys.executable,
                "-m",
                SERVERLINK,
                *link,
                "--isolation",
                "process",
                "--enable-supernode-auth",
            ],
            server_env,
        )
    home = work / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
        f'address = "127.0.0.1:{port}"\nroot-certificates = "{creds.ca}"\n'
    )
    deadline = time.monotonic() + timeout
    if mode != "simulation":
        for m in range(config.devices):  # the SuperLink accepts these nodes' keys only
            _flwr(
                stack,
                net,
                ["supernode", "register", str(creds.node_public[m]), "local"],
                "registered",
                base,
                deadline,
                timeout,
            )
            _start_device(stack, m, port, creds, device_env(base, folders[m], owners), net, states[m], owners)
    app = app_folder(work / "app", config)
    _flwr(
        stack,
        net,
        [
            "run",
            str(app),
            "local",
            *(["--federation-config", f"num-supernodes={config.devices}"] if mode == "simulation" else []),
        ],
        "Successfully started run",
        base,
        deadline,
        timeout,
    )
    submitted = time.monotonic()
    while not status.exists():
        try:
            stack.check_alive(submitted)
        except Failed:
            if status.exists():  # the ServerApp wrote its result and exited meanwhile
                break
            raise
        if time.monotonic() > deadline:
            raise Failed(f"flower: the run did not finish within {timeout:g} s (--flower-timeout)")
        time.sleep(0.2)
    result = json.loads(status.read_text())
    if "error" in result or "failed" in result:
        error = result.get("error", result.get("failed"))
        if "\n" in error:  # an unexpected failure: its traceback, then one line
            sys.stderr.write(error)
        raise (PrivzvError if "error" in result else Failed)(error.strip().splitlines()[-1])
    if config.transcripts:
        for m in range(config.devices):
            for path in (work / device_name(m)).glob(f"{device_name(m)}.*"):  # public: umask's mode
                shutil.copyfile(path, out / "transcripts" / path.name)
    return result


def _flwr(
    stack: Stack, net: Network, args: list[str], success: str, env: dict, deadline: float, timeout: float
) -> None:
    """``flwr ARGS`` against the run's SuperLink, tried again until its output says ``success``
    (the SuperLink takes a few seconds to listen) or ``deadline``."""
    while True:
        stack.check_alive()
        try:
            done = subprocess.run(
                [*net.server, sys.executable, "-m", CONTROL, "flwr", *args],
                env=env,
                cwd=stack.work,
                capture_output=True,
                text=True,
                timeout=max(0.0, deadline - time.monotonic()),
            )
        except subprocess.TimeoutExpired:
            raise Failed(f"flower: the run was not started within {timeout:g} s (--flower-timeout)") from None
        if done.returncode == 0 and success in done.stdout:
            return
        if time.monotonic() > deadline:
            raise Failed(f"flower: flwr {args[0]} failed: {(done.stdout + done.stderr).strip()[-400:]}")
        time.sleep(0.5)


def device_env(base: dict, folder: Path, owners: users.Users) -> dict:
    """Device processes' environment: the launcher's without the Control API secret's path;
    with party users, its home, Flower's home and temporary files in its own folder."""
    env = {k: v for k, v in base.items() if k != control.ENV}
    if owners:
        env.update(HOME=str(folder), FLWR_HOME=str(folder / "home"), TMPDIR=str(folder))
    return env


def _needs(config: TrainConfig, folder: Path, out: Path) -> list[tuple[str, Path]]:
    """What a device's user must reach (``users.Users.check_reach``): its folder, the folder the
    run folder is in (its state folder is made below it), this Python and privzv, and the
    dataset's files the config names."""
    import privzv

    above = next(p for p in out.parents if p.exists())
    data = [getattr(config, name) for name in ("data_dir", "data_file", "test_file", "model_weights")]
    return [
        ("rx", folder),
        ("x", above),
        ("x", Path(sys.executable)),
        ("rx", Path(privzv.__file__).parent),
        *(("r", Path(p).resolve()) for p in data if p),
    ]


def secret_environment(work: Path, secret: int, mode: str) -> dict:
    """The ServerApp's secret input: the path of a 0600 file with the root secret seed (never the
    seed itself: an environment is readable in /proc), except in mode ``simulation``, where the
    devices' ClientApps run in Ray workers beside the SuperLink (that mode trains only runs
    without noise, whose server then draws its own secret seed)."""
    if mode == "simulation":
        return {}
    return {SECRET_FILE: str(credentials.private_file(work / "secret-seed", str(secret).encode()))}


def resumed(out: Path, given: TrainConfig | None) -> tuple[TrainConfig, int]:
    """The config (``given`` must be the run's) and secret seed of the Flower run in ``out``,
    checked before anything starts: one line (exit 2) for a folder that cannot resume here."""
    from privzv.training import run as runs

    with RunFolder.open(out) as folder:
        saved = folder.read_config()
        runs.check_engine(folder.path, saved, runs.FLOWER)
        folder.check_not_diverged("--resume")
        config = runs.resumed_config(TrainConfig.from_dict(saved["config"]).validate(), given, False)
        folder.load_checkpoint()  # the manifest that secrets.json is checked against
        return config, folder.read_secrets()["secret_seed"]


def _start_device(
    stack: Stack,
    m: int,
    port: int,
    creds: credentials.Credentials,
    env: dict,
    net: Network = LOCAL,
    state: Path | None = None,
    owners: users.Users = users.OFF,
) -> None:
    """Device m's SuperNode (TLS to the SuperLink, authenticated by its node key; its Runtime API
    on TLS with SuperExec authentication; node config: its partition id, folder and state folder
    (``state``; default: in its folder), ``--isolation process``), which answers the device's
    ClientApp tasks in its own process (``executor.in_node``), as device m's user (``owners``) and
    verifying the run's CA from the copy in its folder."""
    folder = stack.work / device_name(m)
    node_config = f"partition-id={m} folder={json.dumps(str(folder))}"
    if state is not None:
        node_config += f" state={json.dumps(str(state))}"
    runtime = free_port()
    node = creds.supernodes[m]
    ca = folder / credentials.CA
    stack.start(
        device_name(m),
        [
            *net.device(m),
            *owners.prefix(m),
            sys.executable,
            "-m",
            "privzv.training.engines.flower.supernode",
            "--superlink",
            f"{net.link(m)}:{port}",
            "--root-certificates",
            str(ca),
            "--auth-supernode-private-key",
            str(creds.node_keys[m]),
            *node.flags(ca),
            "--isolation",
            "process",
            "--host",
            "127.0.0.1",
            "--port",
            str(runtime),
            "--node-config",
            node_config,
        ],
        env,
    )
