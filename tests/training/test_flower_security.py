"""A Flower run is secure by default (issue 23 item 2, issue 25 item 1): TLS on every connection
with a per-run CA, SuperNode authentication with per-run node keys, SuperExec authentication on
every Runtime API; no secret in any process's command line or environment; an outside local
process without the run's credentials can neither connect as a SuperNode, nor take a device's or
the ServerApp's task, nor push a reply, nor use the Control API (each attempt bounded in time)."""

from __future__ import annotations

import os
import secrets
import signal
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_ssh_private_key  # noqa: E402

from privzv.training.engines.flower import credentials  # noqa: E402

SECRET_SEED = 48151623  # long enough to be looked for in every process's arguments and environment


def test_a_runs_credentials_are_its_own_and_private(tmp_path):
    """A CA per run; the SuperLink's certificate signed by it, valid for its address only; every
    private key and SuperExec secret in a 0600 file; node keys that Flower's SuperNode loads."""
    folders = [tmp_path / "device0", tmp_path / "device1"]
    for folder in folders:
        folder.mkdir()
    one = credentials.make(tmp_path, folders)
    ca = x509.load_pem_x509_certificate(one.ca.read_bytes())
    link = x509.load_pem_x509_certificate(one.superlink.cert.read_bytes())
    link.verify_directly_issued_by(ca)
    sans = link.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert not link.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(load_pem_private_key(one.superlink.key.read_bytes(), None), ec.EllipticCurvePrivateKey)
    for m, folder in enumerate(folders):
        x509.load_pem_x509_certificate(one.supernodes[m].cert.read_bytes()).verify_directly_issued_by(ca)
        assert one.node_keys[m].parent == folder and one.supernodes[m].secret.parent == folder
        key = load_ssh_private_key(one.node_keys[m].read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
    private = [
        one.superlink.key,
        one.superlink.secret,
        *one.node_keys,
        *(p for s in one.supernodes for p in (s.key, s.secret)),
    ]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in private)
    assert (tmp_path / "tls").stat().st_mode & 0o777 == 0o700
    other = tmp_path / "other"
    other.mkdir()
    two = credentials.make(
        other, [], hosts=["127.0.0.1", "169.254.1.1"]
    )  # a SuperLink reached at two addresses
    sans = (
        x509.load_pem_x509_certificate(two.superlink.cert.read_bytes())
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert sorted(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)) == ["127.0.0.1", "169.254.1.1"]
    assert (
        two.ca.read_bytes() != one.ca.read_bytes()
        and two.superlink.secret.read_bytes() != one.superlink.secret.read_bytes()
    )
    with pytest.raises(Exception):  # another run's CA did not sign this run's SuperLink
        link.verify_directly_issued_by(x509.load_pem_x509_certificate(two.ca.read_bytes()))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _secrets_of(work: Path) -> list[bytes]:
    """Every secret the run wrote (keys, SuperExec secrets, task tokens, the seed), raw and hex."""
    found = [str(SECRET_SEED).encode()]
    for path in work.rglob("*"):
        if path.is_file() and (path.stat().st_mode & 0o077) == 0:  # the run's private files
            data = _read(path).strip()
            found += [data, data.hex().encode(), *(line for line in data.splitlines() if len(line) >= 16)]
    return [s for s in found if len(s) >= 8]


def _runtime_client(address: str, ca: str | None, *interceptors):
    from flwr.supercore.runtime import RuntimeHttpClient

    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=ca is None,
        root_certificates=ca,
        interceptors=list(interceptors),
        retry_invoker=None,
    )


def _acquire(address: str, ca: str | None, secret: bytes | None, clientapp: bool = True):
    """AcquireTask on a Runtime API as a SuperExec: the response (or the exception raised).
    ``clientapp=False``: for a ServerApp task only (a device's task is never taken)."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.interceptors.http.superexec_auth import SuperExecAuthHttpInterceptor

    interceptors = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
    if secret is not None:
        interceptors.append(
            SuperExecAuthHttpInterceptor(
                master_secret=secret, protected_methods=["/flwr.proto.Runtime/AcquireTask"]
            )
        )
    client = _runtime_client(address, ca, *interceptors)
    try:
        return client.AcquireTask(
            AcquireTaskRequest(
                supported_task_types=[TaskType.CLIENT_APP, TaskType.SERVER_APP][0 if clientapp else 1 :]
            )
        )
    except Exception as exc:  # pylint: disable=broad-exception-caught
        return exc
    finally:
        client.close()


def _arg(pid: int, flag: str) -> str:
    args = _read(Path(f"/proc/{pid}/cmdline")).decode().split("\0")
    return args[args.index(flag) + 1]


@pytest.mark.slow
def test_an_outside_process_without_the_runs_credentials_gets_nothing(tmp_path, procs):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "privzv",
            "train",
            "--dataset",
            "digits",
            "--devices",
            "2",
            "--epsilon",
            "8",
            "--epochs",
            "20",
            "--secret-seed",
            str(SECRET_SEED),
            "--engine",
            "flower",
            "--flower-timeout",
            "300",
            "--out",
            str(tmp_path / "run"),
        ],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def supernodes():  # Runtime API port -> pid
            found = {
                int(_arg(pid, "--port")): pid
                for pid in procs.inside(tmp)
                if b"flower.supernode" in _read(Path(f"/proc/{pid}/cmdline"))
            }
            return found if len(found) == 2 else None

        procs.until(supernodes, 180, "both devices' SuperNodes")
        procs.until(
            lambda: (tmp_path / "run" / "metrics.jsonl").exists(), 180, "the ServerApp's first evaluation"
        )
        (work,) = tmp.glob("privzv-flower-*")
        ca = str(work / "tls" / "ca.pem")
        # 1. no secret in any process's command line or environment (readable by other processes)
        needles = _secrets_of(work)
        running = [procs.cmdline(pid) for pid in procs.inside(tmp)]
        assert len(needles) > 20 and len(running) >= 3  # the SuperLink (with the ServerApp), 2 SuperNodes
        # the ServerApp runs in the SuperLink's process: its task token is in no file and no other process
        assert not list(work.rglob("*.token")) and not [c for c in running if "flwr-serverapp" in c]
        for pid in procs.inside(tmp):
            for part in ("cmdline", "environ"):
                text = _read(Path(f"/proc/{pid}/{part}"))
                assert not [n for n in needles if n in text], (pid, part, text[:300])
        # 2. no process asks device 0's SuperNode for a task without its SuperExec secret, over
        # TLS or plain HTTP; nor the SuperLink for its task
        ((port0, _),) = [
            (port, pid)
            for port, pid in supernodes().items()
            if "device0" in _arg(pid, "--superexec-auth-secret-file")
        ]
        node0 = f"127.0.0.1:{port0}"
        link_port = int(
            _arg(
                next(
                    p for p in procs.inside(tmp) if b"flower.serverlink" in _read(Path(f"/proc/{p}/cmdline"))
                ),
                "--port",
            )
        )
        link = f"127.0.0.1:{link_port}"
        for address in (node0, link):
            for secret in (None, secrets.token_bytes(32)):
                refused = _acquire(address, ca, secret)
                assert isinstance(refused, Exception), (address, refused)
            assert isinstance(_acquire(address, None, None), Exception)  # plain HTTP: no answer
        # 3. without a task's token, no task's input is served and no reply or output accepted
        from flwr.common.constant import SubStatus
        from flwr.proto.runtime_pb2 import PullTaskInputRequest, PushTaskOutputRequest  # pylint: disable=E0611
        from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor

        forged = _runtime_client(node0, ca, RuntimeTokenHttpInterceptor(secrets.token_hex(32)))
        with pytest.raises(Exception):
            forged.PullTaskInput(PullTaskInputRequest())
        with pytest.raises(Exception):
            forged.PushTaskOutput(PushTaskOutputRequest(sub_status=SubStatus.COMPLETED))
        forged.close()
        # 4. a SuperNode whose key the run did not register is not let in
        rogue_key = tmp_path / "rogue-key"
        rogue_key.write_bytes(ec.generate_private_key(ec.SECP384R1()).private_bytes(*_openssh()))
        rogue = subprocess.run(
            [
                sys.executable,
                "-m",
                "privzv.training.engines.flower.supernode",
                "--superlink",
                link,
                "--root-certificates",
                ca,
                "--auth-supernode-private-key",
                str(rogue_key),
                "--max-retries",
                "1",
                "--max-wait-time",
                "5",
                "--isolation",
                "process",
                "--port",
                str(_free_port()),
                "--node-config",
                "partition-id=0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = rogue.stdout + rogue.stderr
        assert (
            rogue.returncode != 0 and "SuperNode ID" not in said and "Failed to activate SuperNode" in said
        ), said[-800:]
        # 5. its Control API answers no outside flwr CLI (Flower's own, with this run's CA)
        home = tmp_path / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "run"\n\n[superlink.run]\n'
            f'address = "{link}"\nroot-certificates = "{ca}"\n'
        )
        public = next(work.glob("tls/device0.pub"))
        env = {**os.environ, "FLWR_HOME": str(home), "COLUMNS": "400"}
        for args in (["ls"], ["stop", "1"], ["supernode", "register", str(public)]):
            outside = subprocess.run(
                [str(Path(sys.executable).with_name("flwr")), *args],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
            assert outside.returncode != 0 and "privzv" not in outside.stdout, (args, outside.stderr[-2000:])
        # the probe is sound: the same flwr ls with the run's control secret lists the run
        from privzv.training.engines.flower import control

        inside = subprocess.run(
            [sys.executable, "-m", control.__name__, "flwr", "ls"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, control.ENV: str(work / "tls" / "control.secret")},
        )
        assert inside.returncode == 0 and "privzv" in inside.stdout, inside
        assert proc.poll() is None  # the run goes on
        # 6. the SuperLink speaks TLS only, with this run's certificate
        context = ssl.create_default_context(cafile=ca)
        with urllib.request.urlopen(f"https://{link}/health", context=context, timeout=10) as res:
            assert res.status == 200
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://{link}/health", timeout=10)
        # 7. the probe of 2. is sound: with the SuperNode's own secret the same request is answered
        # (the SuperNode has taken device 0's tasks as they came, in its own process; a process
        # that got one with that secret could not answer it either: the server accepts only
        # replies signed with device 0's key, test_flower_engine.py's forged-uplink test)
        own = (work / "device0" / "supernode.secret").read_bytes()
        answered = _acquire(node0, ca, own, clientapp=False)
        assert not isinstance(answered, Exception), answered
        assert proc.poll() is None  # the run goes on
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    procs.until(lambda: procs.inside(tmp) == [] and not list(tmp.glob("privzv-flower-*")), 60, "nothing left")


def _free_port() -> int:
    from privzv.training.engines.flower.launcher import free_port

    return free_port()


def _openssh():
    from cryptography.hazmat.primitives import serialization

    return serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
