"""PrivacyLedger: spending grows, the budget is enforced, state survives, totals match account()."""

import json

import numpy as np
import pytest

from privzv.accounting import account
from privzv.errors import PrivzvError
from privzv.ledger import BudgetExceeded, PrivacyLedger
from privzv.release import HeadUpdate, Release, Schedule

D, B = 100, 10
RELEASE = Release(clip=1.0, batch_size=B, sigma=1.0)  # noise multiplier 5


def run_epochs(ledger, devices, epochs, batch=B, seed=0):
    """Each device draws epoch-shuffled batches, as the trainer does; returns epsilons seen."""
    rng = np.random.default_rng(seed)
    spent = []
    for _ in range(epochs):
        for device in range(devices):
            order = rng.permutation(D)
            for start in range(0, D, batch):
                ledger.record(device, order[start : start + batch])
                spent.append(ledger.epsilon_spent())
    return spent


@pytest.mark.parametrize(
    "threat, super_batch, accountant",
    [
        ("device", None, "pld"),
        ("device", None, "rdp"),
        ("eavesdropper", None, "pld"),
        ("eavesdropper", None, "best"),
    ],
)
def test_full_run_matches_account(threat, super_batch, accountant):
    schedule = Schedule(
        steps=2 * 2 * D // B, dataset_size=D, devices=2, threat=threat, super_batch=super_batch
    )
    ledger = PrivacyLedger(
        release=RELEASE, schedule=schedule, delta=1e-5, epsilon_budget=1e3, accountant=accountant
    )
    spent = run_epochs(ledger, devices=2, epochs=2)
    assert ledger.releases == schedule.steps
    assert np.all(np.diff(spent) >= 0) and spent[-1] > spent[0]
    assert ledger.epsilon_spent() == pytest.approx(
        account(RELEASE, schedule, 1e-5, accountant).epsilon, rel=1e-12
    )


@pytest.mark.parametrize("accountant", ["seed", "gdp-clt"])
def test_a_ledger_refuses_an_accountant_that_is_not_a_rigorous_bound(accountant):
    """seed (Theorem VI.5) and gdp-clt (a central-limit value) give no upper bound: a budget
    enforced with them (issue 19: "epsilon spent 1" for a run whose pld epsilon is 15.5) is none."""
    schedule = Schedule(steps=20, dataset_size=D)
    with pytest.raises(PrivzvError, match=f"accountant '{accountant}': not a rigorous upper bound"):
        PrivacyLedger(
            release=RELEASE, schedule=schedule, delta=1e-5, epsilon_budget=1.0, accountant=accountant
        )


def test_secret_subsampling_counts_super_batches():
    schedule = Schedule(steps=2 * D // B, dataset_size=D, threat="secret-subsampling", super_batch=2 * B)
    ledger = PrivacyLedger(
        release=RELEASE, schedule=schedule, delta=1e-5, epsilon_budget=1e3, accountant="pld"
    )
    run_epochs(ledger, devices=1, epochs=4, batch=2 * B)  # 20 super-batches, 4 per record
    assert ledger.releases == schedule.steps
    assert ledger.epsilon_spent() == pytest.approx(account(RELEASE, schedule, 1e-5).epsilon)


def test_device_epsilon_counts_the_worst_record_over_all_devices():
    schedule = Schedule(steps=100, dataset_size=D, devices=2)
    ledger = PrivacyLedger(
        release=RELEASE, schedule=schedule, delta=1e-5, epsilon_budget=1e3, accountant="pld"
    )
    assert ledger.epsilon_spent() == 0.0
    ledger.record(0, np.arange(B))
    one = ledger.epsilon_spent()
    ledger.record(0, np.arange(B, 2 * B))  # other records: still one release per record
    assert ledger.epsilon_spent() == one
    # another device's release of the same records counts too: device 0's later deltas use
    # device 1's embeddings, whose model was trained on that release (privzv.threats)
    ledger.record(1, np.arange(B))
    two = ledger.epsilon_spent()
    assert two > one
    assert two == pytest.approx(
        account(RELEASE, Schedule(steps=2 * D // B, dataset_size=D), 1e-5, "pld").epsilon
    )


def test_refuses_a_release_over_budget_and_records_nothing():
    schedule = Schedule(steps=100, dataset_size=D)
    budget = account(RELEASE, Schedule(steps=2 * D // B, dataset_size=D), 1e-5).epsilon
    ledger = PrivacyLedger(
        release=RELEASE, schedule=schedule, delta=1e-5, epsilon_budget=budget * (1 + 1e-9), accountant="pld"
    )
    run_epochs(ledger, devices=1, epochs=2)  # exactly two compositions per record: allowed
    batch = np.arange(B)
    assert ledger.would_exceed(0, batch)
    before = ledger.state_dict()
    with pytest.raises(BudgetExceeded, match="epsilon budget"):
        ledger.record(0, batch)
    assert ledger.state_dict() == before


def test_budget_too_small_for_one_release():
    ledger = PrivacyLedger(
        release=RELEASE, schedule=Schedule(steps=10, dataset_size=D), delta=1e-5, epsilon_budget=0.01
    )
    assert ledger.would_exceed(0, np.arange(B))
    with pytest.raises(BudgetExceeded):
        ledger.record(0, np.arange(B))
    assert ledger.releases == 0


def test_state_dict_roundtrip_through_json_continues_identically():
    schedule = Schedule(steps=40, dataset_size=D, devices=2, threat="eavesdropper")
    ledger = PrivacyLedger(
        release=RELEASE, schedule=schedule, delta=1e-5, epsilon_budget=5.0, accountant="pld"
    )
    run_epochs(ledger, devices=2, epochs=1)
    restored = PrivacyLedger.from_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert restored.releases == ledger.releases == 20
    assert restored.epsilon_spent() == ledger.epsilon_spent()
    for led in (ledger, restored):
        led.record(1, np.arange(B))
    assert restored.state_dict() == ledger.state_dict()
    assert restored.epsilon_spent() == ledger.epsilon_spent()


@pytest.mark.parametrize(
    "device, ids, bad",
    [
        (2, np.arange(B), "device=2"),
        (0, np.array([0, 0, 1]), "appears twice"),
        (0, np.array([D]), "indices"),
        (0, np.array([], dtype=int), "non-empty"),
        (0, np.array([0.5]), "record indices"),
    ],
)
def test_bad_records_are_refused(device, ids, bad):
    ledger = PrivacyLedger(
        release=RELEASE,
        schedule=Schedule(steps=10, dataset_size=D, devices=2),
        delta=1e-5,
        epsilon_budget=10.0,
    )
    with pytest.raises(PrivzvError, match=bad):
        ledger.record(device, ids)
    assert ledger.releases == 0


def test_bad_construction_is_refused():
    with pytest.raises(PrivzvError, match="epsilon_budget"):
        PrivacyLedger(
            release=RELEASE, schedule=Schedule(steps=10, dataset_size=D), delta=1e-5, epsilon_budget=0.0
        )
    with pytest.raises(PrivzvError, match="sigma"):
        PrivacyLedger(
            release=Release(1.0, B),
            schedule=Schedule(steps=10, dataset_size=D),
            delta=1e-5,
            epsilon_budget=1.0,
        )
    with pytest.raises(PrivzvError, match="version"):
        PrivacyLedger.from_state_dict({"version": 99})


HEADED = Release(
    clip=1.0, batch_size=B, head=HeadUpdate(clip=0.5, batch_size=B), head_share=0.8
).with_noise_multiplier(3.0)


def test_mechanisms_list_the_downlink_and_the_head_with_count_and_sigma():
    ledger = PrivacyLedger(
        release=HEADED, schedule=Schedule(steps=40, dataset_size=D, devices=2), delta=1e-5, epsilon_budget=1e3
    )
    run_epochs(ledger, devices=2, epochs=1)
    down, head = ledger.mechanisms()
    assert (down["mechanism"], head["mechanism"]) == ("downlink", "head")
    assert down["count"] == head["count"] == 2  # the worst record: once per device's epoch
    assert down["sigma"] == HEADED.sigma and head["sigma"] == HEADED.head.sigma
    assert head["sensitivity"] == 2 * 0.5 / B and down["sensitivity"] == 2 * 1.0 / B
    # the two noise multipliers combine into the round's: z^-2 = z_d^-2 + z_h^-2
    combined = (down["noise_multiplier"] ** -2 + head["noise_multiplier"] ** -2) ** -0.5
    assert combined == pytest.approx(3.0, rel=1e-12)
    summary = ledger.summary()
    assert summary["mechanisms"] == ledger.state_dict()["mechanisms"] == ledger.mechanisms()
    assert summary["epsilon_spent"] == ledger.epsilon_spent() and summary["compositions"] == 2
    assert (
        len(
            PrivacyLedger(
                release=RELEASE, schedule=Schedule(steps=4, dataset_size=D), delta=1e-5, epsilon_budget=1e3
            ).mechanisms()
        )
        == 1
    )


def _state(**changes):
    ledger = PrivacyLedger(
        release=HEADED, schedule=Schedule(steps=40, dataset_size=D, devices=2), delta=1e-5, epsilon_budget=1e3
    )
    ledger.record(0, np.arange(B))
    state = json.loads(json.dumps(ledger.state_dict()))
    state.update(changes)
    return state


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"releases": "x"}, "releases='x'"),
        ({"releases": -1}, "releases=-1"),
        ({"releases": True}, "releases=True"),
        ({"releases": 0}, "more than releases=0"),
        ({"counts": "x"}, "counts"),
        ({"counts": [[0] * D]}, "counts"),
        ({"counts": [[0] * D, [-1] + [0] * (D - 1)]}, "counts"),
        ({"counts": [[0] * D, [0.5] + [0] * (D - 1)]}, "counts"),
        ({"counts": [[0] * D, [0] * (D - 1)]}, "counts"),
        ({"release": {"clip": 1.0, "batch_size": B, "colour": 1}}, "release/schedule"),
        ({"release": {"clip": "x", "batch_size": B}}, "clip='x'"),
        (
            {"schedule": {"steps": 40, "dataset_size": D, "devices": 2, "device_steps": "ab"}},
            "release/schedule|device_steps",
        ),
        ({"delta": "x"}, "delta='x'"),
        ({"version": "1"}, "version"),
    ],
)
def test_a_corrupt_state_is_a_privzv_error(changes, named):
    with pytest.raises(PrivzvError, match=named.replace("(", r"\(")):
        PrivacyLedger.from_state_dict(_state(**changes))


def test_a_state_missing_a_field_or_not_an_object_is_a_privzv_error():
    state = _state()
    del state["counts"]
    with pytest.raises(PrivzvError, match="missing counts"):
        PrivacyLedger.from_state_dict(state)
    with pytest.raises(PrivzvError, match="JSON object"):
        PrivacyLedger.from_state_dict([1, 2])
    restored = PrivacyLedger.from_state_dict(_state())
    assert restored.mechanisms()[1]["sigma"] == HEADED.head.sigma


def test_would_exceed_after_answers_as_if_the_earlier_releases_were_recorded_and_records_nothing():
    """What a scheduler that starts rounds ahead asks: the answer of ``would_exceed`` after the
    releases still in flight, with the ledger left as it was (answers and state)."""
    schedule = Schedule(steps=100, dataset_size=D)
    budget = account(RELEASE, Schedule(steps=2 * D // B, dataset_size=D), 1e-5).epsilon
    ledger = PrivacyLedger(
        release=RELEASE, schedule=schedule, delta=1e-5, epsilon_budget=budget * (1 + 1e-9), accountant="pld"
    )
    run_epochs(ledger, devices=1, epochs=1)  # one composition per record: a second one fits
    first, second = np.arange(B), np.arange(B, 2 * B)
    before = ledger.state_dict()
    assert not ledger.would_exceed(0, first)  # alone it fits ...
    assert ledger.would_exceed_after([(0, first)], 0, first)  # ... not after itself (a third)
    assert not ledger.would_exceed_after([(0, first)], 0, second)  # other records: still fits
    assert ledger.would_exceed_after([(0, first), (0, first)], 0, second)  # over the budget on the way
    assert ledger.state_dict() == before and not ledger.would_exceed(0, first)
    copy = PrivacyLedger.from_state_dict(before)  # the same answer by recording for real
    copy.record(0, first)
    assert copy.would_exceed(0, first) and not copy.would_exceed(0, second)
