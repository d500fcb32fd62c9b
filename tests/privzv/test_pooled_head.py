"""A DP head pooled over windows of the shared walk (HeadUpdate.window >= 1): its accounting per
record (sum over windows of (1 - w) c + w c^2), the ledger's count of the same, and refusals
where it is not accounted."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from privzv import accountants, accounting, threats
from privzv.errors import PrivzvError
from privzv.gdp import mu_from_epsilon
from privzv.ledger import PrivacyLedger
from privzv.release import HeadUpdate, Release, Schedule

DELTA = 1e-5


def _release(batch: int, devices: int, q: int, share: float = 0.8, z: float = 3.0) -> Release:
    head = HeadUpdate(clip=0.1, batch_size=batch * devices * q, window=q)
    return Release(clip=1.0, batch_size=batch, head=head, head_share=share).with_noise_multiplier(z)


def _by_hand(release: Release, k: int, windows: list[int]) -> float:
    """epsilon of k downlink rounds and head windows with c_w of the record's batches each:
    mu^2 = k / z_d^2 + sum c_w^2 / z_h^2, from the two sigmas."""
    z_d = release.sigma / release.sensitivity
    z_h = release.head.sigma / release.head.sensitivity
    mu = math.sqrt(k / z_d**2 + sum(c * c for c in windows) / z_h**2)
    return accountants.gdp_epsilon(mu, DELTA)


def test_a_record_in_several_batches_of_one_window_costs_c_squared():
    """M=2, s=4 batches per epoch, q=2: a window is walk indices {0,1} of both devices (4
    releases). Record 0 in both devices' batch 0 is in 2 batches of window 1; a record that
    (maliciously, or after refusals) is in all 4 batches of it costs 4^2 for the head."""
    release = _release(batch=2, devices=2, q=2)
    schedule = Schedule(steps=8, dataset_size=8, devices=2)
    ledger = PrivacyLedger(release=release, schedule=schedule, delta=DELTA, epsilon_budget=1e9)
    for m, ids in [(0, [0, 1]), (1, [0, 1]), (0, [2, 3]), (1, [2, 3])]:
        ledger.record(m, ids)
    assert ledger.epsilon_spent() == pytest.approx(_by_hand(release, 2, [2]), rel=1e-12)
    repeated = PrivacyLedger(release=release, schedule=schedule, delta=DELTA, epsilon_budget=1e9)
    for m, ids in [(0, [0, 1]), (1, [0, 1]), (0, [0, 3]), (1, [0, 3])]:
        repeated.record(m, ids)
    assert repeated.epsilon_spent() == pytest.approx(_by_hand(release, 4, [4]), rel=1e-12)
    # the next window starts afresh: record 0 again in 2 batches -> windows [4, 2]
    for m, ids in [(0, [0, 5]), (1, [0, 5])]:
        repeated.record(m, ids)
    assert repeated.epsilon_spent() == pytest.approx(_by_hand(release, 6, [4, 2]), rel=1e-12)
    assert repeated.head_steps() == 2 and repeated.rounds() == 6
    # a per-round head would cost 6 rounds of each mechanism, the pooled one more for a repeat
    assert repeated.epsilon_spent() > _by_hand(release, 6, [1] * 6)


def test_the_open_window_counts_as_released_and_the_state_round_trips():
    release = _release(batch=2, devices=2, q=2)
    ledger = PrivacyLedger(
        release=release,
        schedule=Schedule(steps=8, dataset_size=8, devices=2),
        delta=DELTA,
        epsilon_budget=1e9,
    )
    ledger.record(0, [0, 1])
    assert ledger.epsilon_spent() == pytest.approx(_by_hand(release, 1, [1]), rel=1e-12)
    ledger.record(1, [0, 1])
    state = ledger.state_dict()
    back = PrivacyLedger.from_state_dict(state)
    assert back.epsilon_spent() == ledger.epsilon_spent()
    for led in (ledger, back):  # the window is still open after the restore: c goes 2 -> 3
        led.record(0, [0, 2])
        assert led.epsilon_spent() == pytest.approx(_by_hand(release, 3, [3]), rel=1e-12)
    bad = dict(state, window_counts=[9] * 8)
    with pytest.raises(PrivzvError, match="more head windows"):
        PrivacyLedger.from_state_dict(bad)
    with pytest.raises(PrivzvError, match="window_squares"):
        PrivacyLedger.from_state_dict({k: v for k, v in state.items() if k != "window_squares"})


def _walk_ledger(release: Release, schedule: Schedule, seed: int) -> PrivacyLedger:
    """The ledger of a round-robin run in which every device walks the same permutations."""
    d, b, m = schedule.dataset_size, release.batch_size, schedule.devices
    per_epoch = -(-d // b)
    perms = {}
    rng = np.random.default_rng(seed)
    ledger = PrivacyLedger(release=release, schedule=schedule, delta=DELTA, epsilon_budget=1e9)
    for t in range(schedule.steps):
        j = t // m
        epoch, pos = divmod(j, per_epoch)
        if epoch not in perms:
            perms[epoch] = rng.permutation(d)
        ledger.record(t % m, perms[epoch][pos * b : (pos + 1) * b])
    return ledger


@pytest.mark.parametrize(
    "d, b, m, t, q",
    [
        (20, 4, 2, 50, 2),  # s = 5: the epoch's last window is one walk index
        (21, 4, 3, 61, 4),  # a partial last batch and a partial last walk index
        (16, 4, 4, 64, 1),  # a window per walk index
        (30, 3, 1, 47, 3),  # one device
        (12, 5, 2, 19, 10),  # q > s: one window per epoch
    ],
)
def test_the_accountant_equals_the_ledger_of_the_walk(d, b, m, t, q):
    release = _release(batch=b, devices=m, q=q, share=0.7)
    schedule = Schedule(steps=t, dataset_size=d, devices=m)
    for seed in range(3):
        ledger = _walk_ledger(release, schedule, seed)
        want = threats.pooled_compositions(release, schedule)
        assert ledger.compositions() == pytest.approx(want, rel=1e-12)
        result = accounting.account(release, schedule, DELTA, "pld")
        assert ledger.epsilon_spent() == pytest.approx(result.epsilon, rel=1e-9)
        assert ledger.rounds() == threats.releases_per_record(release, schedule)


def test_the_calibrated_pooled_release_meets_the_target_for_every_accountant():
    release = _release(batch=32, devices=4, q=4, share=0.8)
    schedule = Schedule(steps=1800, dataset_size=1437, devices=4)
    for name in ("pld", "rdp", "best", "gdp-clt"):
        result = accounting.calibrate(1.0, DELTA, release, schedule, name)
        assert result.epsilon <= 1.0
        noised = release.with_noise_multiplier(result.noise_multiplier)
        assert accounting.account(noised, schedule, DELTA, name).epsilon == pytest.approx(
            result.epsilon, rel=1e-9
        )
    exact = accounting.calibrate(1.0, DELTA, release, schedule, "pld")
    k = threats.pooled_compositions(release, schedule)
    assert math.sqrt(k) / exact.noise_multiplier == pytest.approx(mu_from_epsilon(1.0, DELTA), rel=1e-6)


def test_rdp_of_an_effective_count_is_one_gaussian_at_z_over_sqrt_k():
    exp = threats.Exposure(10.5, None)
    one = threats.Exposure(1, None)
    got = accountants.rdp_epsilon(3.0, exp, "replace-one", DELTA)
    assert got == pytest.approx(
        accountants.rdp_epsilon(3.0 / math.sqrt(10.5), one, "replace-one", DELTA), rel=1e-12
    )
    assert accountants.rdp_epsilon(3.0, threats.Exposure(10, None), "replace-one", DELTA) < got


def test_pooled_counts_are_the_worst_record_of_the_formula():
    """K = sum_e f(#{m : e s < n_m}); with a window per round (q = 0) the exposure is k."""
    release = _release(batch=4, devices=3, q=2, share=0.5)
    schedule = Schedule(steps=31, dataset_size=20, devices=3)  # n = (11, 10, 10), s = 5
    f = threats.window_load
    assert threats.pooled_compositions(release, schedule) == pytest.approx(f(3, 0.5) + f(3, 0.5) + f(1, 0.5))
    flat = dataclasses.replace(release, head=dataclasses.replace(release.head, window=0))
    assert threats.exposure(flat, schedule).compositions == 7


@pytest.mark.parametrize(
    "change",
    [
        dict(threat="eavesdropper"),
        dict(threat="secret-subsampling", super_batch=8),
        dict(device_steps=(5, 3)),
    ],
)
def test_a_pooled_head_is_refused_where_it_is_not_accounted(change):
    release = _release(batch=4, devices=2, q=2)
    schedule = Schedule(steps=8, dataset_size=20, devices=2, **change)
    with pytest.raises(PrivzvError, match="pooled DP head"):
        accounting.account(release, schedule, DELTA)
    with pytest.raises(PrivzvError, match="pooled DP head"):
        accounting.calibrate(1.0, DELTA, release, schedule)


def test_window_closes_at_device_m_minus_1_at_each_block_end_and_epoch_end():
    # M = 2, s = 5, q = 2: walk blocks {0,1}, {2,3}, {4} per epoch
    ends = [n for n in range(20) if threats.window_closes(n, 2, 5, 2)]
    assert ends == [3, 7, 9, 13, 17, 19]
    with pytest.raises(PrivzvError, match="head window"):
        HeadUpdate(clip=1.0, batch_size=4, window=-1)


def test_calibrate_and_account_take_the_head_window(capsys):
    import json

    from privzv.cli import main

    common = [
        "--delta",
        "1e-5",
        "--steps",
        "1800",
        "--dataset-size",
        "1437",
        "--batch-size",
        "32",
        "--clip",
        "0.1",
        "--head-clip",
        "1",
        "--devices",
        "4",
        "--head-window",
        "4",
    ]
    assert main(["calibrate", "--epsilon", "1", *common, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    release = Release(clip=0.1, batch_size=32, head=HeadUpdate(clip=1.0, batch_size=32 * 4 * 4, window=4))
    schedule = Schedule(steps=1800, dataset_size=1437, devices=4)
    want = accounting.calibrate(1.0, DELTA, release, schedule)
    assert got["sigma"] == pytest.approx(want.sigma) and got["head_sigma"] == pytest.approx(want.head_sigma)
    assert got["compositions"] == threats.pooled_compositions(release, schedule)
    assert main(["account", "--sigma", repr(got["sigma"]), *common, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["epsilon"] == pytest.approx(1.0, rel=1e-9)
    assert main(["calibrate", "--epsilon", "1", *common, "--threat", "eavesdropper"]) == 2
    assert "pooled DP head" in capsys.readouterr().err
