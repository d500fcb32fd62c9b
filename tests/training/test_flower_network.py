"""Several hosts (issue 23 item 3), made on this machine: the SuperLink (with the ServerApp) and each
device's SuperNode (which runs its ClientApp) in network namespaces of their own, made by the test and joined by
veth pairs carrying link-local 169.254.x.y addresses the test assigns; TLS and node
authentication as always. The run equals the in-process run. No namespace has a route to any
address but its own link-local /30s and loopback, so nothing leaves the namespaces the test made.
Skipped with the reason where namespaces cannot be made (not root, no iproute2, no CAP_NET_ADMIN)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from privzv.training import run  # noqa: E402
from privzv.training.config import TrainConfig  # noqa: E402
from privzv.training.engines.flower import launcher  # noqa: E402
from privzv.training.engines.flower.network import Network  # noqa: E402


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30).stdout


@pytest.fixture
def namespaces():
    """A Network of 3 fresh namespaces: the server's and 2 devices', device m joined to the
    server's by a veth pair 169.254.(m+1).1/30 (server side) - 169.254.(m+1).2/30."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (ip netns)")
    tag = secrets.token_hex(3)
    server, devices = f"pzs{tag}", [f"pzd{m}{tag}" for m in range(2)]
    made: list[str] = []
    try:
        for ns in (server, *devices):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        for m, ns in enumerate(devices):
            here, there = f"pza{m}{tag}", f"pzb{m}{tag}"  # created inside the namespaces, never in ours
            _ip("link", "add", here, "netns", server, "type", "veth", "peer", "name", there, "netns", ns)
            _ip("-n", server, "addr", "add", f"169.254.{m + 1}.1/30", "dev", here)
            _ip("-n", ns, "addr", "add", f"169.254.{m + 1}.2/30", "dev", there)
            _ip("-n", server, "link", "set", here, "up")
            _ip("-n", ns, "link", "set", there, "up")
    except (subprocess.CalledProcessError, OSError) as exc:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        pytest.skip(f"network namespaces cannot be made here: {getattr(exc, 'stderr', '') or exc}")
    try:
        yield (
            Network(
                server=("ip", "netns", "exec", server),
                devices=tuple(("ip", "netns", "exec", ns) for ns in devices),
                bind="0.0.0.0",
                links=tuple(f"169.254.{m + 1}.1" for m in range(2)),
            ),
            made,
        )
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@pytest.mark.slow
def test_a_run_across_network_namespaces_equals_the_in_process_run(namespaces, tmp_path):
    net, names = namespaces
    for ns in names:  # no default route, nothing but the test's link-local subnets
        routes = _ip("-n", ns, "-4", "route").splitlines()
        assert routes and all(line.startswith("169.254.") for line in routes), (ns, routes)
    config = TrainConfig(dataset="digits", devices=2, epochs=2 / 90, epsilon=8.0)
    ref = run.train(config, tmp_path / "inprocess", secret_seed=5)
    got = launcher.run(config, tmp_path / "flower", secret_seed=5, net=net, timeout=300)["summary"]
    assert got["rounds"] == ref["rounds"] == 2
    assert got["test_accuracy"] == pytest.approx(ref["test_accuracy"], abs=1e-9)
    assert got["test_loss"] == pytest.approx(ref["test_loss"], rel=1e-6)
    assert got["epsilon_spent"] == ref["epsilon_spent"] > 0
    assert (got["bytes_up"], got["bytes_down"]) == (ref["bytes_up"], ref["bytes_down"])
