"""Every public function of ``privzv``, driven with arbitrary values of every argument: a result
or a PrivzvError, never anything else (issue 24 item 5)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import privzv
from privzv import gdp
from privzv.errors import PrivzvError

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.sampled_from(["device", "eavesdropper", "replace-one", "pld", "seed"]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([5e-324, 1e-300, 1e308]),
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=-(10**80), max_value=10**80),
    st.builds(np.int64, st.integers(-5, 10**6)),
    st.builds(np.float32, st.floats(-1e3, 1e3)),
    st.lists(st.integers(-2, 5), max_size=3),
    st.dictionaries(st.text(max_size=2), st.none(), max_size=2),
)
# plausible values, so that a good share of the calls gets past the first check
SMALL_INT = st.one_of(st.integers(1, 2000), ANY)
UNIT = st.one_of(st.floats(1e-9, 0.5), ANY)
POSITIVE = st.one_of(st.floats(0.05, 50), ANY)
RELEASE = st.builds(
    lambda clip, b, sigma, neighbors: (clip, b, sigma, neighbors),
    POSITIVE,
    SMALL_INT,
    st.one_of(st.none(), POSITIVE),
    ANY,
)
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def outcome(call) -> None:
    """Run ``call``; anything but a result or a PrivzvError fails the test."""
    try:
        call()
    except PrivzvError:
        pass


def one_call_kwargs(draw) -> dict:
    return {
        name: draw(strategy)
        for name, strategy in dict(
            delta=UNIT,
            steps=SMALL_INT,
            epochs=st.one_of(st.none(), POSITIVE),
            sample_rate=st.one_of(st.none(), UNIT),
            threat=st.one_of(st.sampled_from(["device", "eavesdropper"]), ANY),
            neighbors=st.one_of(st.sampled_from(["replace-one", "add-remove"]), ANY),
            accountant=st.one_of(st.sampled_from(["best", "pld", "rdp", "gdp-clt", "seed"]), ANY),
            dataset_size=st.one_of(st.none(), SMALL_INT),
            batch_size=st.one_of(st.none(), SMALL_INT),
            devices=st.one_of(st.just(1), SMALL_INT),
            device_steps=st.one_of(st.none(), ANY),
            head_clip=st.one_of(st.none(), POSITIVE),
            head_share=st.one_of(st.just(0.5), ANY),
        ).items()
        if draw(st.booleans())
    }


@SETTINGS
@given(st.data(), POSITIVE)
def test_noise_multiplier(data, eps):
    kwargs = one_call_kwargs(data.draw)
    outcome(lambda: privzv.noise_multiplier(epsilon=eps, **kwargs))


@SETTINGS
@given(st.data(), POSITIVE)
def test_epsilon(data, z):
    kwargs = one_call_kwargs(data.draw)
    outcome(lambda: privzv.epsilon(noise_multiplier=z, **kwargs))


def build(release, schedule):
    clip, b, sigma, neighbors = release
    steps, d, devices, threat = schedule
    return (
        privzv.Release(clip=clip, batch_size=b, sigma=sigma, neighbors=neighbors),
        privzv.Schedule(steps=steps, dataset_size=d, devices=devices, threat=threat),
    )


SCHEDULE = st.tuples(
    SMALL_INT,
    SMALL_INT,
    st.one_of(st.just(1), SMALL_INT),
    st.one_of(st.sampled_from(["device", "eavesdropper"]), ANY),
)


@SETTINGS
@given(RELEASE, SCHEDULE, POSITIVE, UNIT, ANY)
def test_calibrate_account_and_their_all_variants(release, schedule, eps, delta, accountant):
    def run():
        r, s = build(release, schedule)
        privzv.calibrate(epsilon=eps, delta=delta, release=r, schedule=s)
        privzv.account(release=r, schedule=s, delta=delta, accountant=accountant)
        privzv.calibrate_all(epsilon=eps, delta=delta, release=r, schedule=s)
        privzv.account_all(release=r, schedule=s, delta=delta)

    outcome(run)


@SETTINGS
@given(RELEASE, SCHEDULE, UNIT, POSITIVE, ANY, ANY)
def test_ledger_and_dp_event(release, schedule, delta, budget, device, ids):
    def ledger():
        r, s = build(release, schedule)
        book = privzv.PrivacyLedger(release=r, schedule=s, delta=delta, epsilon_budget=budget)
        book.record(device, ids)
        book.epsilon_spent()

    outcome(ledger)
    outcome(lambda: privzv.to_dp_event(*build(release, schedule)))


@SETTINGS
@given(ANY, ANY, ANY, ANY)
def test_constructors_and_conversions_with_anything(a, b, c, d):
    outcome(lambda: privzv.Release(clip=a, batch_size=b, sigma=c, head=d))
    outcome(lambda: privzv.Schedule(steps=a, dataset_size=b, devices=c, device_steps=d))
    outcome(lambda: privzv.to_dp_event(a, b))
    outcome(lambda: gdp.mu_from_epsilon(a, b))
    outcome(lambda: gdp.epsilon_from_delta(a, b))
    outcome(lambda: gdp.delta_from_epsilon(a, b))
