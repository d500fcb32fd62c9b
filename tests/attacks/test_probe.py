import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from privzv.attacks import probe
from privzv.errors import PrivzvError

LABELS = load_digits().target
# Noisy probes fix the server's secret seed (by default it comes from OS entropy) so that each
# test sees the same draws on every run.


def test_reply_is_clipped_mean_of_target_alone():
    setup = probe.simulated_server(LABELS, 10, clip=2.0, batch_size=8)
    ids = torch.arange(8)
    c = torch.zeros(8, 10)
    u = torch.zeros(8, 10)
    u[0, int(LABELS[0])] = 1.0  # move the target's true-class logit only
    got = probe._reply(setup, ids, c, u)
    z = setup.server.table.data[1, 0]  # logits = attacker row (c) + benign row
    p = torch.softmax(z, 0)[int(LABELS[0])]
    assert got == pytest.approx(2 * float(p - 1) / 8, rel=1e-3)  # d CE / d z_y = p_y - 1
    u[0] *= 1e4  # huge loss difference: clipped to -C
    assert probe._reply(setup, ids, c, u) == pytest.approx(-2.0 / 8)


def test_reply_noise_has_the_release_sigma():
    setup = probe.simulated_server(LABELS, 10, sigma=0.3, batch_size=4, secret_seed=0)
    ids, zero = torch.arange(4), torch.zeros(4, 10)
    draws = np.array([probe._reply(setup, ids, zero, zero) for _ in range(2000)])
    assert abs(draws.mean()) < 0.03 and draws.std() == pytest.approx(0.3, rel=0.06)


def test_malicious_probe_beats_prior_without_noise():
    r = probe.label_inference(LABELS, 10, variant="malicious", repeats=10, targets=80)
    assert r["accuracy"] > 0.8 and r["advantage"] > 0.6


def test_malicious_probe_falls_to_prior_under_pure_noise():
    r = probe.label_inference(
        LABELS, 10, variant="malicious", repeats=10, targets=120, sigma=100.0, secret_seed=0
    )
    assert r["accuracy"] < r["prior"] + 0.1


def test_curious_one_query_per_batch_stays_near_prior():
    r = probe.label_inference(LABELS, 10, variant="curious", targets=320)
    assert r["accuracy"] < r["prior"] + 0.12


def test_mlp_head_needs_aux_and_bad_variant():
    setup = probe.simulated_server(LABELS, 10, head="mlp")
    with pytest.raises(PrivzvError):
        probe.predict(setup, np.zeros((3, 16)))
    with pytest.raises(PrivzvError):
        probe.label_inference(LABELS, 10, variant="nosy")


# ---- the paper's per-sample protocol ---------------------------------------------------------


def test_per_sample_protocol_one_query_reads_labels_batch_scalar_does_not():
    """arXiv:2306.16077's own protocol (per-record loss differences, one query per record) lets the
    curious client read ~20% of digits' labels; DPZV's batch scalar keeps it near the prior."""
    per_sample = probe.label_inference(
        LABELS, 10, variant="curious", protocol="per-sample", targets=len(LABELS), batch_size=64
    )
    batch = probe.label_inference(LABELS, 10, variant="curious", targets=len(LABELS), batch_size=64)
    assert per_sample["protocol"] == "per-sample" and per_sample["advantage"] > 0.06
    assert batch["advantage"] < 0.035


def test_per_sample_reply_is_the_records_loss_difference():
    setup = probe.simulated_server(LABELS, 10, protocol="per-sample", batch_size=4)
    ids, c, v = torch.arange(4), torch.zeros(4, 10), torch.zeros(4, 10)
    v[2, int(LABELS[2])] = 1e-3
    d = probe._feedback(setup, ids, c, v)
    p = torch.softmax(setup.server.table.data[1, 2], 0)[int(LABELS[2])]
    assert d[2] == pytest.approx(float(p - 1), rel=1e-2) and float(d.abs().sum() - d[2].abs()) == 0
    with pytest.raises(PrivzvError, match="per-sample protocol"):
        probe.simulated_server(LABELS, 10, protocol="per-sample", sigma=1.0)


# ---- saturating and duplicate-id probes -----------------------------------------------------


def test_saturating_reply_is_the_clip_bound():
    setup = probe.simulated_server(LABELS, 10, clip=2.0, batch_size=8)
    batch = torch.cat([torch.tensor([5]), probe._fillers(setup, 5)])
    grad = torch.softmax(setup.server.table.data[1, 5], 0) - torch.eye(10)[int(LABELS[5])]
    t = probe.saturation_step(2.0, 1e-3)
    for _ in range(20):
        u = torch.randn(10)
        u /= u.norm()
        v = torch.zeros(8, 10)
        v[0] = t * u
        got = float(probe._feedback(setup, batch, torch.zeros(8, 10), v)[0])
        if abs(float(grad @ u)) > 0.02:
            assert got == pytest.approx(2.0 / 8 * float(torch.sign(grad @ u)))


def test_saturating_probe_beats_the_plain_malicious_probe_under_noise():
    kw = dict(repeats=40, targets=40, sigma=0.6, clip=10.0, batch_size=32, secret_seed=0)
    plain = probe.label_inference(LABELS, 10, variant="malicious", **kw)
    saturated = probe.label_inference(LABELS, 10, variant="saturating", **kw)
    assert saturated["accuracy"] > plain["accuracy"] + 0.2 and saturated["advantage"] > 0.4


def test_saturating_probe_falls_to_prior_under_pure_noise():
    r = probe.label_inference(
        LABELS,
        10,
        variant="saturating",
        repeats=20,
        targets=60,
        sigma=100.0,
        clip=10.0,
        batch_size=32,
        secret_seed=0,
    )
    assert r["accuracy"] < r["prior"] + 0.1


class _Server:
    """Wraps the real DPZV method; ``accept``: a server that takes every listed row as a record
    of its own (repeated ids become distinct copies, computed by the real server step);
    otherwise one that refuses repeated ids with a PrivzvError."""

    def __init__(self, method, accept: bool):
        self.inner, self.accept = method, accept

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def server_reply(self, server, up):
        from privzv.training.parties import EmbeddingTable, Server

        ids = up["ids"]
        if len(torch.unique(ids)) == len(ids):
            return self.inner.server_reply(server, up)
        if not self.accept:
            raise PrivzvError(f"uplink ids: {len(ids) - len(torch.unique(ids))} repeated")
        table = EmbeddingTable(2, len(ids), server.table.data.shape[2])
        table.data[:] = server.table.data[:, ids]
        copies = Server(head=server.head, labels=server.labels[ids], table=table, noise=server.noise)
        fields = {**up.tensors, "ids": torch.arange(len(ids))}
        return self.inner.server_reply(copies, self.inner.message(up.sender, up.receiver, up.kind, **fields))


def _duplicate_probe(accept: bool | None, sigma=10.0):
    setup = probe.simulated_server(LABELS, 10, sigma=sigma, clip=10.0, batch_size=32, secret_seed=0)
    if accept is not None:  # a simulated server with its own policy instead of the real check
        setup.method, setup.checks_uplinks = _Server(setup.method, accept), False
    return probe.label_inference(LABELS, 10, variant="duplicate-id", repeats=20, targets=40, setup=setup)


def test_duplicate_id_probe_reads_labels_from_an_accepting_server():
    """Repeating the target's id B times multiplies its weight in Delta by B: at sigma 10 the
    single-copy saturating probe reads nothing, the duplicate-id probe nearly every label."""
    single = probe.label_inference(
        LABELS,
        10,
        variant="saturating",
        repeats=20,
        targets=40,
        sigma=10.0,
        clip=10.0,
        batch_size=32,
        secret_seed=0,
    )
    dup = _duplicate_probe(accept=True)
    assert single["accuracy"] < single["prior"] + 0.12
    # 0.80, 0.95, 0.825, 0.825 at secret seeds 0-3 (prior 0.1): far above the single copy's
    assert dup["refused"] == 0 and dup["accuracy"] > 0.7


def test_duplicate_id_probe_falls_to_prior_against_a_refusing_server():
    r = _duplicate_probe(accept=False)
    assert r["refused"] == 40 * 20 and r["accuracy"] < r["prior"] + 0.12


def test_duplicate_id_probe_falls_to_prior_against_the_real_server():
    r = _duplicate_probe(accept=None)
    assert r["refused"] == 40 * 20 and r["accuracy"] < r["prior"] + 0.12
