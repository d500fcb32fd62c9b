"""Regression tests of the privacy review: each fails without its fix."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from privzv import accounting
from privzv.errors import PrivzvError
from privzv.ledger import PrivacyLedger
from privzv.release import Release, Schedule
from privzv.training import methods, privacy, run
from privzv.training.config import TrainConfig

C, B = 1e-3, 8


@pytest.mark.parametrize("method", ["dpzv", "zoo-vfl"])
def test_a_smaller_last_batch_keeps_the_sensitivity_2c_over_b(method, tiny_scheduler):
    """Replace-one on the labels of an epoch's last, smaller batch (3 < B records): Delta moves by
    at most 2C/B (the release's sensitivity), and some label change attains it (C tiny, so every
    clipped delta_i is +-C). A mean over the 3 records would move by 2C/3."""
    sched = tiny_scheduler(method=method, clip=C, batch_size=B, epsilon=1.0, freeze="server")
    m = sched.method
    assert m.release(sched.method.config).sensitivity == pytest.approx(2 * C / B)
    ids = torch.arange(3)
    up = m.device_send(sched.devices[0], ids)
    base = float(m.server_reply(copy.deepcopy(sched.server), up)["delta"])
    moves = []
    for i in ids.tolist():
        for label in range(3):
            server = copy.deepcopy(sched.server)
            server.labels = server.labels.clone()
            server.labels[i] = label
            moves.append(abs(float(m.server_reply(server, up)["delta"]) - base))
    assert max(moves) <= 2 * C / B * (1 + 1e-4)
    assert max(moves) == pytest.approx(2 * C / B, rel=1e-3)


@pytest.mark.parametrize("threat", ["eavesdropper", "secret-subsampling"])
def test_a_per_sample_release_is_not_amplified(threat):
    """Subsampling amplification is derived for a batch mean; a per-sample release shows each
    sampled record's own row, so privzv refuses to amplify it (it would understate epsilon)."""
    release = Release(clip=1.0, batch_size=10, sigma=5.0, aggregate="per-sample", dim=4)
    schedule = Schedule(steps=100, dataset_size=1000, threat=threat, super_batch=40)
    with pytest.raises(PrivzvError, match="per-sample"):
        accounting.account(release, schedule, 1e-5)
    with pytest.raises(PrivzvError, match="per-sample"):
        accounting.calibrate(1.0, 1e-5, release, schedule)
    with pytest.raises(PrivzvError, match="per-sample"):
        PrivacyLedger(release=release, schedule=schedule, delta=1e-5, epsilon_budget=1.0)
    device = dataclasses.replace(schedule, threat="device")
    assert accounting.account(release, device, 1e-5).sampling_rate is None


@pytest.mark.parametrize("method", ["vafl", "fo-vector", "czofo"])
@pytest.mark.parametrize("threat", ["eavesdropper", "secret-subsampling"])
def test_vector_methods_refuse_threats_they_do_not_implement(method, threat, tiny_config):
    """vafl/fo-vector have no secret subsampling (and VAFL's observer, the server, sees the ids):
    calibrating them under an amplifying threat would claim noise they do not get."""
    config = tiny_config(method=method, threat=threat, super_batch=32, epsilon=2.0)
    with pytest.raises(PrivzvError, match="threat"):
        privacy.plan(config, methods.get(method), records=96, rounds=24)


def test_sigma_zero_under_a_finite_epsilon_is_refused(tiny_config):
    """Otherwise the run adds no noise, keeps no ledger, and its summary shows the epsilon."""
    with pytest.raises(PrivzvError, match="--sigma 0"):
        privacy.plan(tiny_config(sigma=0.0, epsilon=1.0), methods.get("dpzv"), records=96, rounds=24)


def test_resuming_a_private_run_without_its_ledger_is_refused(tmp_path):
    config = TrainConfig(
        dataset="digits",
        devices=2,
        epochs=0.1,
        batch_size=64,
        evals=1,
        seed=5,
        sigma=2.0,
        epsilon=50.0,
        transcripts=False,
    )
    out = tmp_path / "run"
    out.mkdir()
    first = run.train(config, out)
    assert json.loads((out / "private" / "ledger.json").read_text())["releases"] == first["rounds"]
    (out / "private" / "ledger.json").unlink()
    with pytest.raises(PrivzvError, match="ledger.json"):
        run.train(dataclasses.replace(config, epochs=0.2), out, resume=True, extend=True)
