import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from privzv.attacks import probe
from privzv.errors import PrivzvError

LABELS = load_digits().target


def test_reply_is_clipped_mean_of_target_alone():
    setup = probe.simulated_server(LABELS, 10, clip=2.0, batch_size=8)
    ids = torch.arange(8)
    c = torch.zeros(8, 10)
    u = torch.zeros(8, 10)
    u[0, int(LABELS[0])] = 1.0                  # move the target's true-class logit only
    got = probe._reply(setup, ids, c, u)
    z = setup.server.table.data[1, 0]           # logits = attacker row (c) + benign row
    p = torch.softmax(z, 0)[int(LABELS[0])]
    assert got == pytest.approx(2 * float(p - 1) / 8, rel=1e-3)   # d CE / d z_y = p_y - 1
    u[0] *= 1e4                                  # huge loss difference: clipped to -C
    assert probe._reply(setup, ids, c, u) == pytest.approx(-2.0 / 8)


def test_reply_noise_has_the_release_sigma():
    setup = probe.simulated_server(LABELS, 10, sigma=0.3, batch_size=4)
    ids, zero = torch.arange(4), torch.zeros(4, 10)
    draws = np.array([probe._reply(setup, ids, zero, zero) for _ in range(2000)])
    assert abs(draws.mean()) < 0.03 and draws.std() == pytest.approx(0.3, rel=0.06)


def test_malicious_probe_beats_prior_without_noise():
    r = probe.label_inference(LABELS, 10, variant="malicious", repeats=10, targets=80)
    assert r["accuracy"] > 0.8 and r["advantage"] > 0.6


def test_malicious_probe_falls_to_prior_under_pure_noise():
    r = probe.label_inference(LABELS, 10, variant="malicious", repeats=10, targets=120, sigma=100.0)
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
