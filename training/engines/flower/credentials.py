"""Per-run TLS certificates and keys of a Flower run, made by privzv (``cryptography``).

:func:`make` writes into a run's 0700 work folder, every private part in a 0600 file (a path on a
command line, never the secret):

* ``tls/ca.pem``: a CA made for this run (ECDSA P-256, its key used once and never written),
  and a copy in each device's folder (:data:`CA`: a device needs nothing outside its folder);
* ``tls/superlink.pem``, ``tls/superlink-key.pem``: the SuperLink's server certificate (Fleet,
  Control and Runtime APIs), signed by that CA, valid for its address only (an IP SAN); and in
  device m's own folder ``supernode.pem``, ``supernode-key.pem`` for its SuperNode's Runtime API;
* ``<device folder>/node-key`` (OpenSSH, ECDSA P-384) and ``tls/device<m>.pub``: the SuperNode's
  authentication key pair; the SuperLink accepts only nodes whose public key privzv registered;
* ``tls/superlink.secret``, ``<device folder>/supernode.secret``: 32 random bytes that a SuperExec
  signs its task requests with (Flower's ``--superexec-auth-secret-file``); privzv's SuperLink
  and SuperNodes take their tasks in process (``serverlink``, ``executor``), so no other process
  can take the ServerApp's or a device's task;
* ``tls/control.secret``: 32 random bytes that the run's Control API asks of every caller
  (``control``): only the launcher's ``flwr`` calls carry them.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CA = "ca.pem"  # the run's CA certificate, in ``tls/`` and in each device's folder
VALID = datetime.timedelta(days=2)  # a run's certificates expire soon after any run could end


def private_file(path: Path, data: bytes) -> Path:
    """``path`` created with mode 0600 (never wider, not even for a moment), holding ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


@dataclasses.dataclass(frozen=True)
class Server:
    """A TLS server's files and its SuperExec secret."""

    cert: Path
    key: Path
    secret: Path

    def flags(self, ca: Path) -> list[str]:
        return [
            "--ssl-ca-certfile",
            str(ca),
            "--ssl-certfile",
            str(self.cert),
            "--ssl-keyfile",
            str(self.key),
            "--superexec-auth-secret-file",
            str(self.secret),
        ]


@dataclasses.dataclass(frozen=True)
class Credentials:
    ca: Path
    superlink: Server
    supernodes: list[Server]
    node_keys: list[Path]  # device m's private authentication key (OpenSSH), in its own folder
    node_public: list[Path]  # ... and its public key, registered with the SuperLink
    control: Path  # the Control API's secret (``control``)


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _certificate(subject: str, public, issuer: str, key, hosts: list[str], ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host)) for host in hosts]),
            critical=False,
        )
    return builder.sign(key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _server(folder: Path, name: str, hosts: list[str], ca_key, ca_name: str) -> Server:
    key = ec.generate_private_key(ec.SECP256R1())
    (folder / f"{name}.pem").write_bytes(
        _pem(_certificate(name, key.public_key(), ca_name, ca_key, hosts, ca=False))
    )
    private_file(
        folder / f"{name}-key.pem",
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return Server(
        folder / f"{name}.pem",
        folder / f"{name}-key.pem",
        private_file(folder / f"{name}.secret", secrets.token_bytes(32)),
    )


def make(work: Path, device_folders: list[Path], hosts: list[str] = ("127.0.0.1",)) -> Credentials:
    """A run's credentials in ``work/tls`` (mode 0700) and the devices' folders: the SuperLink's
    certificate for its addresses ``hosts``, each SuperNode's Runtime API certificate for
    127.0.0.1 (its executor runs beside it), and each device's node key."""
    tls = work / "tls"
    tls.mkdir(mode=0o700)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = f"privzv run CA {secrets.token_hex(4)}"
    ca = _pem(_certificate(ca_name, ca_key.public_key(), ca_name, ca_key, [], ca=True))
    keys, public = [], []
    for folder in [tls, *device_folders]:
        (folder / CA).write_bytes(ca)
    for m, folder in enumerate(device_folders):
        node = ec.generate_private_key(ec.SECP384R1())
        keys.append(
            private_file(
                folder / "node-key",
                node.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.OpenSSH,
                    serialization.NoEncryption(),
                ),
            )
        )
        public.append(tls / f"device{m}.pub")
        public[-1].write_bytes(
            node.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        )
    return Credentials(
        tls / CA,
        _server(tls, "superlink", list(hosts), ca_key, ca_name),
        [_server(folder, "supernode", ["127.0.0.1"], ca_key, ca_name) for folder in device_folders],
        keys,
        public,
        private_file(tls / "control.secret", secrets.token_bytes(32)),
    )
