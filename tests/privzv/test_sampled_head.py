"""A head trained on a secret Poisson sample of the table (HeadUpdate.sampling_rate): its
accounting is the downlink releases composed with T_h Poisson-sampled head steps, which must
equal dp-accounting's own composition of the same events; the ledger and ``account`` agree."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from privzv import accountants, accounting, mixture
from privzv.dpevent import to_dp_event
from privzv.ledger import PrivacyLedger
from privzv.release import HeadUpdate, Release, Schedule
from privzv.threats import Exposure

DELTA = 1e-5


def _release(neighbors="add-remove", share=0.9, rate=0.02, batch=20) -> Release:
    head = HeadUpdate(clip=1.0, batch_size=batch, neighbors=neighbors, sampling_rate=rate)
    return Release(clip=1.0, batch_size=batch, neighbors=neighbors, head=head, head_share=share)


def _reference(m: mixture.Mixture, neighbors: str):
    """dp-accounting's PLD (fine grid) and RDP of the ComposedDpEvent of the same mechanisms,
    built here independently of privzv.dpevent."""
    import dp_accounting as dpa

    replace = neighbors == "replace-one"
    scale = 2.0 if replace else 1.0
    relation = dpa.NeighboringRelation.REPLACE_ONE if replace else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    events = [
        dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(m.head_rate, dpa.GaussianDpEvent(scale * m.z_head)), m.head_steps
        )
    ]
    if m.downlink is not None:
        down = dpa.GaussianDpEvent(scale * m.z_down)
        if m.downlink.sampling_rate is not None:
            down = dpa.PoissonSampledDpEvent(m.downlink.sampling_rate, down)
        events.append(dpa.SelfComposedDpEvent(down, m.downlink.compositions))
    event = dpa.ComposedDpEvent(events)
    pld = dpa.pld.PLDAccountant(neighboring_relation=relation, value_discretization_interval=1e-4)
    pld.compose(event)
    rdp = None
    if not replace:  # dp-accounting's RDP refuses a sampled replace-one event
        acc = dpa.rdp.RdpAccountant(neighboring_relation=relation)
        acc.compose(event)
        rdp = acc.get_epsilon(DELTA)
    return pld.get_epsilon(DELTA), rdp


SETTINGS = [  # (downlink exposure or None, z_d, T_h, q_h, z_h, neighbors)
    (Exposure(80, None), 40.0, 4000, 0.005, 1.5, "add-remove"),
    (Exposure(80, None), 40.0, 4000, 0.005, 1.5, "replace-one"),
    (None, 1.0, 2000, 0.02, 1.2, "add-remove"),  # withheld downlink: the head alone
    (Exposure(500, 0.02), 3.0, 500, 0.02, 2.0, "add-remove"),  # eavesdropper: both sampled
    (Exposure(40, None), 20.0, 12000, 0.005, 1.0, "replace-one"),  # staged head composition
]


@pytest.mark.parametrize("down, z_d, steps, rate, z_h, neighbors", SETTINGS)
def test_the_mixture_equals_dp_accountings_composition(down, z_d, steps, rate, z_h, neighbors):
    m = mixture.Mixture(down, z_d, steps, rate, z_h)
    ref_pld, ref_rdp = _reference(m, neighbors)
    pld = mixture.pld_epsilon(m, neighbors, DELTA, ref_pld)
    # both pessimistic: ours at a finer step than the reference's 1e-4 (never far below it)
    assert pld == pytest.approx(ref_pld, rel=2e-3) and pld >= ref_pld * (1 - 5e-4)
    if ref_rdp is not None:
        assert mixture.rdp_epsilon(m, neighbors, DELTA) == pytest.approx(ref_rdp, rel=1e-5)
    best = mixture.epsilon(m, neighbors, DELTA, "best")
    assert best[0] == pytest.approx(min(pld, mixture.rdp_epsilon(m, neighbors, DELTA)), rel=1e-4)


def test_adding_the_downlink_costs_privacy():
    """The composition is never below either part (a bug that put a staged head's coarse grid
    beside the downlink's fine one made it smaller)."""
    head = mixture.Mixture(None, 1.0, 12000, 0.005, 1.0)
    both = dataclasses.replace(head, downlink=Exposure(40, None), z_down=20.0)
    for neighbors in ("add-remove", "replace-one"):
        alone = mixture.pld_epsilon(head, neighbors, DELTA, 3.0)
        assert mixture.pld_epsilon(both, neighbors, DELTA, 3.0) > alone


@pytest.mark.parametrize("threat", ["device", "eavesdropper"])
@pytest.mark.parametrize("neighbors", ["add-remove", "replace-one"])
def test_calibrate_meets_the_target_and_the_export_agrees(threat, neighbors):
    import dp_accounting as dpa

    release, schedule = _release(neighbors), Schedule(steps=400, dataset_size=1000, devices=4, threat=threat)
    result = accounting.calibrate(2.0, DELTA, release, schedule, "best")
    assert result.epsilon <= 2.0 and result.epsilon == pytest.approx(2.0, rel=1e-3)
    assert result.head_steps == 400 and result.head_sampling_rate == 0.02
    noised = release.with_noise_multiplier(result.noise_multiplier)
    event, relation = to_dp_event(noised, schedule)
    pld = dpa.pld.PLDAccountant(neighboring_relation=relation, value_discretization_interval=1e-4)
    pld.compose(event)
    assert pld.get_epsilon(DELTA) == pytest.approx(result.epsilon, rel=3e-3)


def test_the_head_share_moves_noise_between_the_mechanisms():
    schedule = Schedule(steps=400, dataset_size=1000, devices=4)
    low, high = (accounting.calibrate(2.0, DELTA, _release(share=s), schedule) for s in (0.5, 0.99))
    z = [_release(share=s).split(r.noise_multiplier) for s, r in ((0.5, low), (0.99, high))]
    assert z[0][0] < z[1][0] and z[0][1] > z[1][1]  # more of the budget to the head: z_h drops


def test_a_withheld_downlink_is_the_head_alone():
    schedule = Schedule(steps=400, dataset_size=1000, devices=4)
    result = accounting.calibrate(1.0, DELTA, _release(share=1.0), schedule, "pld")
    alone = accountants.pld_epsilon(
        result.noise_multiplier, Exposure(400, 0.02), "add-remove", DELTA, 1e-4
    )  # privzv's accountant of one sampled mechanism
    assert alone == pytest.approx(result.epsilon, rel=2e-4)


@pytest.mark.parametrize("threat", ["device", "eavesdropper"])
def test_the_ledger_of_the_walk_equals_account(threat):
    """Every device walks the same epoch permutations; the ledger's epsilon after the whole
    schedule is ``account``'s, and its state round-trips through JSON."""
    d, b, m, t = 100, 20, 2, 40
    release = _release(rate=b / d, batch=b).with_noise_multiplier(4.0)
    schedule = Schedule(steps=t, dataset_size=d, devices=m, threat=threat)
    ledger = PrivacyLedger(
        release=release, schedule=schedule, delta=DELTA, epsilon_budget=1e9, accountant="best"
    )
    rng = np.random.default_rng(0)
    perm, per_epoch = rng.permutation(d), d // b
    for r in range(t):
        j = r // m
        if j % per_epoch == 0 and r % m == 0:
            perm = rng.permutation(d)
        ledger.record(r % m, perm[(j % per_epoch) * b : (j % per_epoch + 1) * b])
    expected = accounting.account(release, schedule, DELTA, "best").epsilon
    assert ledger.epsilon_spent() == pytest.approx(expected, rel=1e-12)
    assert ledger.head_steps() == t
    restored = PrivacyLedger.from_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert restored.epsilon_spent() == pytest.approx(expected, rel=1e-12)


def test_the_ledger_stops_when_head_steps_alone_exceed_the_budget():
    """A schedule longer than the calibrated one: the head's steps count even where the
    downlink's worst record does not grow."""
    release = _release(rate=0.2, batch=20, share=1.0)
    schedule = Schedule(steps=10, dataset_size=100, devices=1)
    z = accounting.calibrate(1.0, DELTA, release, schedule).noise_multiplier
    ledger = PrivacyLedger(
        release=release.with_noise_multiplier(z),
        schedule=schedule,
        delta=DELTA,
        epsilon_budget=1.0,
        accountant="best",
    )
    recorded = 0
    while not ledger.would_exceed(0, [0]) and recorded < 100:
        ledger.record(0, [0])  # the downlink is withheld: only the head steps count
        recorded += 1
    assert recorded == 10
