"""The neighbour relation each method's epsilon covers, checked on the releases themselves.

Two neighbouring digits datasets differ in one training record's raw pixels (the change goes
through ``data.load``'s preprocessing). Each method runs on both, 4 devices, ``--freeze
server``, with the same public and secret seeds, so every noise draw is the same, and the second
run is conditioned on equal earlier releases: in the rounds whose batch holds the record it
receives the first run's release (adaptive composition accounts for what follows from a
release). A release whose batch does not contain the record must then be bit-identical wherever
the method claims record-level neighbours (``PROTECTS = "record"``): otherwise the record reaches
it outside any noise and the ledger, which charges only the record's own batches, under-counts. DPZV's
device update depends only on Delta and the public u; first-order device updates J(x)^T g carry
the record's features into later releases (docs/accounting.md, "Threat model contract").
"""

from __future__ import annotations

import dataclasses

import pytest
import sklearn.datasets
import torch

from privzv.release import PROTECTS
from privzv.training import data, methods, run
from privzv.training.config import TrainConfig

ROUNDS = 12  # three rounds of each device; the changed record is in round 0's batch


def _digits(monkeypatch, changed: int | None = None):
    """Digits over 4 devices; training record ``changed``'s pixels inverted (None: unchanged)."""
    bunch = sklearn.datasets.load_digits()
    if changed is not None:
        train, _ = data._stratified_split(bunch.target, 0)
        images = bunch.images.copy()
        images[train[changed]] = 16.0 - images[train[changed]]
        bunch["images"] = images
    monkeypatch.setattr(sklearn.datasets, "load_digits", lambda: bunch)
    return data.load("digits", 4)


def _releases(config: TrainConfig, dataset, replay=None, changed=None) -> list[tuple[torch.Tensor, dict]]:
    """(batch ids, released tensors) of each round: the downlink, or the uplink where the device
    draws the release's noise (VAFL). With ``replay`` (another run's), a round whose batch holds
    record ``changed`` releases ``replay``'s tensors of that round instead of its own."""
    sched = run.build(config, dataset, sigma=config.sigma, secret_seed=7)
    released_by = type(sched.method).RELEASED_BY
    rounds, record = {}, sched.recorder.message

    def replayed(msg, ids):
        if replay is None or changed not in ids.tolist():
            return msg
        return dataclasses.replace(msg, tensors={**msg.tensors, **replay[msg.round][1]})

    if released_by == "server":
        reply = sched.method.server_reply
        sched.method.server_reply = lambda server, up: replayed(reply(server, up), up["ids"])
    else:
        send = sched.engine.send
        sched.engine.send = lambda m, r, ids: replayed(send(m, r, ids), ids)

    def capture(msg):
        record(msg)
        entry = rounds.setdefault(msg.round, [None, None])
        if msg.receiver == "server":
            entry[0] = msg["ids"].clone()
        if (msg.sender == "server") == (released_by == "server"):
            entry[1] = {k: v.clone() for k, v in msg.tensors.items() if k != "ids"}

    sched.recorder.message = capture
    for _ in range(ROUNDS):
        assert sched.step()
    return [tuple(rounds[r]) for r in range(ROUNDS)]


def _moved_without_the_record(method: str, monkeypatch) -> bool:
    """Whether a release whose batch lacks the changed record differs between the neighbours."""
    config = TrainConfig(
        dataset="digits",
        method=method,
        devices=4,
        batch_size=32,
        epochs=1,
        freeze="server",
        sigma=0.05,
        seed=1,
        evals=1,
        transcripts=False,
    )
    first = _releases(config, _digits(monkeypatch))
    changed = int(first[0][0][0])  # a record of round 0's batch
    second = _releases(config, _digits(monkeypatch, changed), replay=first, changed=changed)
    moved = False
    for (ids, a), (ids2, b) in zip(first, second):
        assert torch.equal(ids, ids2)  # the same (public) batches
        if changed not in ids.tolist():
            moved |= any(not torch.equal(a[k], b[k]) for k in a)
    return moved


# what each method's releases do: the record-level methods must not move, the others do
MOVES = {"dpzv": False, "zoo-vfl": False, "fo-vector": True, "czofo": True, "vafl": True, "rr-prior": True}


@pytest.mark.parametrize("method", methods.METHODS)
def test_a_record_level_claim_holds_on_the_releases(method, monkeypatch):
    """Releases without the record move  =>  the method does not claim record-level neighbours."""
    cls = methods.get(method)
    assert cls.PROTECTS in PROTECTS
    config = TrainConfig(dataset="digits", method=method, devices=4, clip=0.1)
    release = cls.release(config)
    assert release is None or release.protects == cls.PROTECTS
    moved = _moved_without_the_record(method, monkeypatch)
    assert moved == MOVES[method]
    if moved:
        assert cls.PROTECTS != "record"
    assert cls.PROTECTS == (
        "record" if method in ("dpzv", "zoo-vfl") else "none" if method == "vafl" else "label"
    )


def test_the_unit_reaches_every_epsilon_of_a_run(tmp_path, capsys):
    """summary.json, the ledger summary and ``privzv train``'s stdout name what epsilon covers."""
    from privzv.training import cli

    out = tmp_path / "run"
    assert (
        cli.main(
            [
                "--dataset",
                "digits",
                "--method",
                "fo-vector",
                "--devices",
                "2",
                "--epochs",
                "0.05",
                "--epsilon",
                "50",
                "--out",
                str(out),
                "--no-transcripts",
            ]
        )
        == 0
    )
    std = capsys.readouterr()
    assert "covers labels only" in std.out and "covers labels only" in std.err
    summary = __import__("json").loads((out / "summary.json").read_text())
    assert summary["protects"] == "label"
