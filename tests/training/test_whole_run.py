"""The whole run is the mechanism (issue 7): exact counts, samplers that match the accountant,
malicious uplinks refused, and the printed epsilon covering every release including the head."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch

from privzv import accounting, threats
from privzv.errors import PrivzvError
from privzv.ledger import PrivacyLedger
from privzv.release import Schedule
from privzv.training import privacy, run, sampling, transcript
from privzv.training.config import TrainConfig
from privzv.training.messages import SERVER, Message
from privzv.training.scheduler import Scheduler

DIGITS = TrainConfig(
    dataset="digits", epochs=2.0, batch_size=64, evals=1, seed=5, epsilon=1.0, transcripts=False
)


# ------------------------------------------------------------------ exact counts
@pytest.mark.parametrize(
    "devices, activation, head_sampling",
    [(1, None, None), (4, [0.4, 0.3, 0.2, 0.1], None), (8, None, None), (8, None, "batch")],
)
def test_a_calibrated_run_completes_and_its_account_equals_its_ledger(
    tmp_path, devices, activation, head_sampling
):
    config = dataclasses.replace(DIGITS, devices=devices, activation=activation, head_sampling=head_sampling)
    summary = run.train(config, tmp_path, secret_seed=9)
    assert summary["stopped"] is None and summary["rounds"] == summary["rounds_planned"]
    state = json.loads((tmp_path / "private" / "ledger.json").read_text())
    records = len(state["counts"][0])
    steps = sampling.Activation(devices, activation, config.seed).steps(summary["rounds"])
    given = None if activation is None else steps  # round-robin: no device steps given
    schedule = Schedule(steps=summary["rounds"], dataset_size=records, devices=devices, device_steps=given)
    assert state["schedule"]["device_steps"] == (None if given is None else list(steps))
    assert schedule.steps_per_device() == steps
    if activation is not None:  # a skewed order: not round-robin
        assert max(steps) - min(steps) > 1
    ledger = PrivacyLedger.from_state_dict(state)
    assert ledger.release.head is not None and ledger.release.head.sigma > 0  # the head is in it
    table = head_sampling is None  # the default: a head on a secret sample of the table
    assert ledger.release.head.sampled == table
    if table:
        assert ledger.release.head.sampling_rate == 64 / records and not ledger.release.head.window
    else:  # the batch head pools windows under round-robin, steps every round otherwise
        assert (ledger.release.head.window > 0) == (activation is None)
    accounted = accounting.account(ledger.release, schedule, config.delta)
    assert summary["epsilon_spent"] == pytest.approx(accounted.epsilon, rel=1e-9)
    assert accounted.epsilon <= 1.0
    k = threats.releases_per_record(ledger.release, schedule)
    assert ledger.compositions() == pytest.approx(accounted.compositions, rel=1e-12)
    assert ledger.rounds() == k
    down, head = summary["mechanisms"]
    assert (down["mechanism"], head["mechanism"]) == ("downlink", "head")
    assert down["count"] == k
    if table:  # every round is a head step (each on a sample the accountant amplifies)
        assert head["count"] == summary["rounds"] and accounted.head_steps == summary["rounds"]
    else:
        assert head["count"] == (k if activation else -(-k // devices))  # one window per epoch
    assert head["sigma"] == pytest.approx(ledger.release.head.sigma)


def test_the_activation_order_is_fixed_by_the_public_seed_and_prefix_stable():
    a = sampling.Activation(3, [0.5, 0.25, 0.25], seed=1)
    b = sampling.Activation(3, [0.5, 0.25, 0.25], seed=1)
    assert np.array_equal(a.order(5000)[:300], b.order(300))
    assert a.steps(4000) == tuple(np.bincount(b.order(4000), minlength=3))
    assert np.abs(np.array(a.steps(4000)) / 4000 - [0.5, 0.25, 0.25]).max() < 0.03
    assert list(sampling.Activation(3).order(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert sampling.Activation(3).steps(7) == Schedule(steps=7, dataset_size=1, devices=3).steps_per_device()


def test_every_device_walks_the_same_permutations(tiny_scheduler):
    sched = tiny_scheduler(devices=3)
    seen = {m: [] for m in range(3)}
    for _ in range(3 * 30):
        m = sched.activation.device(sched.round)
        seen[m].append(sched.sampler.draw(sched.devices[m], sched.server))
        assert sched.step()
    assert all(torch.equal(a, b) for a, b in zip(seen[0], seen[1]))
    assert all(torch.equal(a, b) for a, b in zip(seen[0], seen[2]))


# ------------------------------------------------------------------ sampling that matches the accountant
def test_an_eavesdropper_run_uses_poisson_batches_drawn_by_the_server(tmp_path):
    config = dataclasses.replace(
        DIGITS, devices=2, epochs=1.0, batch_size=32, threat="eavesdropper", transcripts=True
    )
    summary = run.train(config, tmp_path, secret_seed=9)
    assert summary["rounds"] == summary["rounds_planned"] and summary["epsilon_spent"] <= 1.0
    # the default accountant is best (as for calibrate/account), and the ledger keeps it: its
    # epsilon is account()'s under best for the same Poisson-amplified schedule
    state = json.loads((tmp_path / "private" / "ledger.json").read_text())
    assert config.accountant == state["accountant"] == "best"
    ledger = PrivacyLedger.from_state_dict(state)
    schedule = Schedule(steps=summary["rounds"], dataset_size=1437, devices=2, threat="eavesdropper")
    accounted = accounting.account(ledger.release, schedule, config.delta)
    assert accounted.requested == "best" and accounted.sampling_rate == pytest.approx(32 / 1437)
    assert summary["epsilon_spent"] == pytest.approx(accounted.epsilon, rel=1e-9)

    def batches(run_dir, m):  # the secret Poisson batches, in the private area
        return transcript.load(run_dir / "private", f"device{m}").select("local", "batch")

    sizes = np.array([len(e.fields["ids"]) for m in range(2) for e in batches(tmp_path, m)])
    records = 1437
    q = 32 / records
    assert len(sizes) == summary["rounds"] and len(set(sizes.tolist())) > 5  # sizes vary
    assert abs(sizes.mean() - 32) <= 5 * np.sqrt(records * q * (1 - q) / len(sizes))
    # the draw is the server's secret: another secret seed, other batches (same public seed)
    other = tmp_path / "other"
    other.mkdir()
    run.train(config, other, secret_seed=10)
    first = [e.fields["ids"] for e in batches(tmp_path, 0)]
    second = [e.fields["ids"] for e in batches(other, 0)]
    assert any(len(a) != len(b) or not np.array_equal(a, b) for a, b in zip(first, second))


def test_an_empty_poisson_batch_still_releases_noise(tiny_scheduler, tiny_config):
    config = tiny_config(threat="eavesdropper", batch_size=1, epsilon=50.0)
    p = privacy.plan(config, run.methods.get("dpzv"), records=96, rounds=60)
    ledger = privacy.ledger(config, p)
    sched = tiny_scheduler(
        threat="eavesdropper", batch_size=1, epsilon=50.0, ledger=ledger, release=p.release
    )
    empty = 0
    for _ in range(60):
        m = sched.activation.device(sched.round)
        head = [q.clone() for q in sched.server.head.parameters()]
        assert sched.step()
        if len(sched.recorder.transcripts[f"device{m}"].select("local", "batch")[-1].fields["ids"]) == 0:
            empty += 1
            delta = sched.recorder.transcripts[SERVER].select("sent")[-1].fields["delta"]
            assert delta.shape == (1,) and delta[0] != 0  # pure noise, sent
            assert any(not torch.equal(a, b) for a, b in zip(head, sched.server.head.parameters()))
    assert empty >= 5 and ledger.releases == 60


def test_a_sampler_other_than_the_threats_is_refused(tiny_scheduler):
    sched = tiny_scheduler()
    walk = sampling.SharedWalk(96, 8, seed=3)
    with pytest.raises(PrivzvError, match="Poisson"):
        Scheduler(
            sched.method, sched.devices, sched.server, batch=8, seed=3, threat="eavesdropper", sampler=walk
        )
    with pytest.raises(PrivzvError, match="shared epoch walk"):
        Scheduler(
            sched.method,
            sched.devices,
            sched.server,
            batch=8,
            seed=3,
            threat="device",
            sampler=sampling.PoissonSampler(96, 8),
        )


# ------------------------------------------------------------------ malicious uplinks
def _duplicate(t):
    t["ids"] = t["ids"].clone()
    t["ids"][1:] = t["ids"][0]  # the target repeated B times: sensitivity 2C instead of 2C/B


def _out_of_range(t):
    t["ids"] = t["ids"].clone()
    t["ids"][0] = 96


def _short(t):
    for k in t:
        t[k] = t[k][:-1]


def _other_batch(t):
    t["ids"] = (t["ids"] + 1) % 96


def _wide(t):
    for k in t:
        if k != "ids":
            t[k] = torch.cat([t[k], t[k][..., :1]], dim=-1)


def _double(t):
    for k in t:
        if k != "ids":
            t[k] = t[k].double()


def _extra(t):
    t["extra"] = torch.zeros(len(t["ids"]), 4)


@pytest.mark.parametrize("method", ["dpzv", "fo-vector"])
@pytest.mark.parametrize(
    "tamper, reason",
    [
        (_duplicate, "repeated"),
        (_out_of_range, "outside"),
        (_short, "expected"),
        (_other_batch, "differ"),
        # issue 19: a wrong width crashed the server after
        # the ledger had recorded the round
        (_wide, "expected float32"),
        (_double, "expected float32"),
        (_extra, "expected"),
    ],
)
def test_a_malicious_uplink_is_refused_before_anything_is_computed(
    tiny_scheduler, tiny_config, method, tamper, reason
):
    config = tiny_config(method=method, epsilon=20.0)
    p = privacy.plan(config, run.methods.get(method), records=96, rounds=24)
    ledger = privacy.ledger(config, p)
    sched = tiny_scheduler(method=method, epsilon=20.0, ledger=ledger, release=p.release)
    for _ in range(3):
        assert sched.step()
    honest = sched.method.device_send

    def malicious(device, ids):
        up = honest(device, ids)
        fields = dict(up.tensors)
        tamper(fields)
        return Message(up.round, up.sender, up.receiver, up.kind, fields)

    sched.method.device_send = malicious
    m = sched.activation.device(sched.round)
    device, server = sched.devices[m], sched.server
    before = (
        copy.deepcopy(ledger.state_dict()),
        device.flat.clone(),
        device.step,
        copy.deepcopy(server.head.state_dict()),
        copy.deepcopy(server.noise.state_dict()),
        server.table.data.clone(),
    )
    sent = len(sched.recorder.transcripts[SERVER].select("sent"))
    assert sched.step() and sched.refused == 1
    assert ledger.state_dict() == before[0]  # ledger unchanged
    # the device moved back by the opposite perturbation: equal up to float32 rounding (no copy kept)
    assert torch.allclose(device.flat, before[1], rtol=0, atol=1e-6) and device.step == before[2]
    assert all(torch.equal(a, b) for a, b in zip(server.head.state_dict().values(), before[3].values()))
    assert server.noise.state_dict() == before[4]  # no noise drawn
    assert torch.equal(server.table.data, before[5])
    server_t = sched.recorder.transcripts[SERVER]
    assert len(server_t.select("sent")) == sent  # no downlink
    assert all(
        e.round != sched.round - 1 for e in sched.recorder.transcripts[f"device{m}"].select("received")
    )
    (note,) = server_t.select("local", "refused")
    assert reason in bytes(note.fields["reason"].astype(np.uint8)).decode()
    sched.method.device_send = honest
    assert sched.step() and sched.refused == 1  # honest rounds go on


def test_a_budget_stop_sends_nothing_and_undoes_the_device_step(tiny_scheduler, tiny_config):
    kw = dict(epsilon=3.0, sigma=0.5, clip=1.0, head_share=0.5)  # z_h = z_d
    config = tiny_config(**kw)
    p = privacy.plan(config, run.methods.get("dpzv"), records=96, rounds=24)
    ledger = privacy.ledger(config, p)
    sched = tiny_scheduler(**kw, ledger=ledger, release=p.release)
    while True:
        m = sched.activation.device(sched.round)
        flat, state = sched.devices[m].flat.clone(), copy.deepcopy(ledger.state_dict())
        if not sched.step():
            break
    assert sched.stopped == "budget" and ledger.state_dict() == state
    assert torch.equal(sched.devices[m].flat, flat) and 0 < ledger.epsilon_spent() <= 3.0


def test_a_huge_budget_runs_the_whole_plan(tmp_path, capsys):
    """Issue 25 item 6: ``--epsilon 1e300`` calibrates to the smallest noise the search allows and
    runs every planned round (it used to stop for budget after 1 of 4 rounds, exit 0)."""
    from privzv.training.cli import main

    assert (
        main(
            [
                "--dataset",
                "digits",
                "--devices",
                "4",
                "--epochs",
                "0.02",
                "--epsilon",
                "1e300",
                "--out",
                str(tmp_path / "run"),
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["stopped"] is None and summary["rounds"] == summary["rounds_planned"] == 4
    assert 0 < summary["epsilon_spent"] <= 1e300
