"""Accounting and calibration: threats, accountants, the seed formula, dp-accounting mappings."""

import dataclasses
import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian
from dp_accounting.pld import pld_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st

from privzv import gdp
from privzv.accounting import ACCOUNTANTS, account, account_all, calibrate, calibrate_all, releases_per_record
from privzv.errors import PrivzvError
from privzv.release import HeadUpdate, Release, Schedule

# The worked example of docs/accounting.md: MNIST, D=60000, B=64, C=10, 100 epochs.
MNIST = dict(dataset_size=60000)
MNIST_STEPS = 100 * 60000 // 64  # 93750 releases


def small(threat="device", neighbors="replace-one", sigma=None, super_batch=None, steps=100):
    """A cheap setting: D=1000, B=100, C=1 (device: k=10; eavesdropper: q=0.1, k=100)."""
    return (
        Release(clip=1.0, batch_size=100, sigma=sigma, neighbors=neighbors),
        Schedule(steps=steps, dataset_size=1000, threat=threat, super_batch=super_batch),
    )


# ------------------------------------------------------------------------------ threats
def _simulated_worst(steps_per_device, d, b, seed):
    """Worst per-record count when every device walks the same epoch permutations in batches of
    b (last batch of an epoch smaller), as privzv.training's sampler does."""
    rng = np.random.default_rng(seed)
    per_epoch = -(-d // b)
    perms = [rng.permutation(d) for _ in range(max(steps_per_device) // per_epoch + 1)]
    counts = np.zeros(d, dtype=int)
    for n in steps_per_device:
        for j in range(n):
            e, pos = divmod(j, per_epoch)
            counts[perms[e][pos * b : (pos + 1) * b]] += 1
    return counts.max()


@pytest.mark.parametrize(
    "t, d, b, m",
    [
        (740, 8725, 7326, 8),  # partial last batches: the old M*ceil((T/M)B/D) gave 624
        (1, 100, 10, 8),  # T < M: one round contains a record once (old formula: 8)
        (4, 4, 3, 3),
        (40, 1024, 32, 4),
        (320, 1024, 32, 8),
        (7, 10, 10, 3),
        (97, 50, 7, 5),
    ],
)
def test_device_count_is_the_simulated_worst_record(t, d, b, m):
    release = Release(clip=1.0, batch_size=b)
    schedule = Schedule(steps=t, dataset_size=d, devices=m)
    k = releases_per_record(release, schedule)
    for seed in range(3):
        assert k == _simulated_worst(schedule.steps_per_device(), d, b, seed)
    if (t, d, b, m) == (740, 8725, 7326, 8):
        assert k == 372
    if t == 1:
        assert k == 1


def test_device_steps_from_a_fixed_activation_order():
    release = Release(clip=1.0, batch_size=10)
    skewed = Schedule(steps=100, dataset_size=100, devices=2, device_steps=(70, 30))
    assert releases_per_record(release, skewed) == 7 + 3
    assert Schedule(steps=5, dataset_size=10, devices=3).steps_per_device() == (2, 2, 1)
    with pytest.raises(PrivzvError, match="device_steps"):
        Schedule(steps=100, dataset_size=100, devices=2, device_steps=(70, 31))


def test_head_update_composes_into_the_round_noise_multiplier():
    head = HeadUpdate(clip=1.0, batch_size=10)
    release = Release(clip=10.0, batch_size=10, head=head).with_noise_multiplier(2.0)
    assert release.sigma == pytest.approx(2.0 * math.sqrt(2) * release.sensitivity)
    assert release.head.sigma == pytest.approx(2.0 * math.sqrt(2) * head.sensitivity)
    assert release.noise_multiplier == pytest.approx(2.0)
    # the same round as one Gaussian: mu of k rounds is sqrt(k)/z, i.e. 2k mechanisms at sqrt(2) z
    sched = Schedule(steps=10, dataset_size=10, devices=1)
    res = account(release, sched, 1e-5, "gdp-clt")
    assert res.mu == pytest.approx(math.sqrt(2 * 10) / (2.0 * math.sqrt(2)))
    skew = Release(clip=10.0, batch_size=10, head=head, head_share=0.8).with_noise_multiplier(1.0)
    z_d, z_h = skew.sigma / skew.sensitivity, skew.head.sigma / head.sensitivity
    assert z_d**-2 == pytest.approx(0.2) and z_h**-2 == pytest.approx(0.8)
    assert Release(clip=10.0, batch_size=10, head=head).with_sigma(release.sigma) == release


def test_releases_per_record_per_threat():
    release = Release(clip=1.0, batch_size=10)
    device = Schedule(steps=100, dataset_size=100, devices=2)
    # every device's releases count (a device's view depends on the others' through the
    # server's embedding table): sum_m ceil(n_m / ceil(D/B)), round-robin n_m
    assert releases_per_record(release, device) == 10  # 2 * ceil(50 / 10)
    assert releases_per_record(release, Schedule(steps=101, dataset_size=100, devices=2)) == 11
    eaves = Schedule(steps=100, dataset_size=100, devices=2, threat="eavesdropper")
    assert releases_per_record(release, eaves) == 100
    secret = Schedule(steps=100, dataset_size=100, devices=2, threat="secret-subsampling", super_batch=20)
    assert releases_per_record(release, secret) == 20  # 2 * ceil(50 / 5)
    r = account(release.with_sigma(5.0), secret, 1e-5, "gdp-clt")
    assert r.sampling_rate == pytest.approx(0.5) and r.compositions == 20
    assert account(release.with_sigma(5.0), eaves, 1e-5, "gdp-clt").sampling_rate == 0.1
    assert account(release.with_sigma(5.0), device, 1e-5, "gdp-clt").sampling_rate is None


@pytest.mark.parametrize(
    "kwargs, bad",
    [
        (dict(batch_size=11, dataset_size=10), "batch_size=11"),
        (dict(batch_size=10, dataset_size=100, threat="secret-subsampling", super_batch=5), "super_batch=5"),
        (
            dict(batch_size=10, dataset_size=100, threat="secret-subsampling", super_batch=101),
            "super_batch=101",
        ),
    ],
)
def test_bad_batch_sizes_are_refused(kwargs, bad):
    release = Release(clip=1.0, batch_size=kwargs.pop("batch_size"), sigma=1.0)
    with pytest.raises(PrivzvError, match=bad):
        account(release, Schedule(steps=10, **kwargs), 1e-5)


@pytest.mark.parametrize(
    "call, bad",
    [
        (lambda r, s: account(r, s, 0.0), "delta=0.0"),
        (lambda r, s: account(r, s, 1.0), "delta=1.0"),
        (lambda r, s: account(r, s, 1e-5, "moments"), "accountant='moments'"),
        (lambda r, s: calibrate(-1.0, 1e-5, r, s), "epsilon=-1.0"),
        (lambda r, s: calibrate(0.0, 1e-5, r, s), "epsilon=0.0"),
        (lambda r, s: account(r.with_sigma(0.0), s, 1e-5), "sigma=0.0"),
    ],
)
def test_bad_arguments_name_the_value(call, bad):
    release, schedule = small(sigma=1.0)
    with pytest.raises(PrivzvError, match=bad):
        call(release, schedule)


# ------------------------------------------------------------------------------ one Gaussian
@pytest.mark.parametrize("neighbors", ["replace-one", "add-remove"])
def test_single_unsubsampled_release_matches_analytic_gaussian(neighbors):
    """T=1, device threat: the analytic Gaussian mechanism (Balle & Wang 2018) at sigma/sensitivity."""
    release = Release(clip=1.0, batch_size=10, sigma=0.3, neighbors=neighbors)
    schedule = Schedule(steps=1, dataset_size=1000)
    z = release.sigma / release.sensitivity
    exact = get_epsilon_gaussian(z, 1e-5)
    pld = account(release, schedule, 1e-5, "pld").epsilon
    assert exact <= pld <= exact + 2e-3  # pessimistic discretisation: a bit above
    assert account(release, schedule, 1e-5, "gdp-clt").epsilon == pytest.approx(exact, rel=1e-7)
    assert account(release, schedule, 1e-5, "rdp").epsilon >= exact


def test_replace_one_maps_to_dp_accounting_replace_one_at_twice_the_multiplier():
    """Without sampling, our replace-one (sensitivity 2C/B) equals dp-accounting's REPLACE_ONE
    with multiplier sigma/(C/B), and add-remove with sensitivity 2C/B."""
    release, schedule = small(sigma=0.05, steps=30)  # k = 3
    z = release.noise_multiplier
    acc = pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.GaussianDpEvent(2 * z), 3)
    ours = account(release, schedule, 1e-5, "pld").epsilon
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    as_add_remove = Release(clip=2.0, batch_size=100, sigma=0.05, neighbors="add-remove")
    assert account(as_add_remove, schedule, 1e-5, "pld").epsilon == pytest.approx(ours, rel=1e-9)


def test_poisson_replace_one_tends_to_the_plain_gaussian_when_q_is_near_one():
    """q = 0.999: the sampled replace-one PLD must be (almost) the unsampled Gaussian of
    sensitivity 2C/B; a wrong multiplier mapping (z or 4z instead of 2z) fails this by far."""
    release = Release(clip=1.0, batch_size=999, sigma=0.01, neighbors="replace-one")
    schedule = Schedule(steps=1, dataset_size=1000, threat="eavesdropper")
    exact = get_epsilon_gaussian(release.noise_multiplier, 1e-5)
    assert account(release, schedule, 1e-5, "pld").epsilon == pytest.approx(exact, rel=0.02)
    assert account(release, schedule, 1e-5, "rdp").epsilon >= exact


@pytest.mark.parametrize("threat, super_batch", [("eavesdropper", None), ("secret-subsampling", 400)])
def test_sampled_replace_one_bounds_are_consistent(threat, super_batch):
    sigma = 0.03
    rep, schedule = small(threat, "replace-one", sigma, super_batch)
    add, _ = small(threat, "add-remove", sigma, super_batch)
    pld_rep = account(rep, schedule, 1e-5, "pld").epsilon
    rdp_rep = account(rep, schedule, 1e-5, "rdp").epsilon
    # replace-one at the same sigma and clip is weaker privacy than add-remove
    assert pld_rep > account(add, schedule, 1e-5, "pld").epsilon
    assert rdp_rep > account(add, schedule, 1e-5, "rdp").epsilon
    # the weak-triangle RDP bound is valid, so it cannot undercut the tight PLD
    assert rdp_rep >= pld_rep


# ------------------------------------------------------------------------------ published values
def test_bu_et_al_clt_example():
    """Bu, Dong, Long & Su 2020, Fig. 4: p=256/60000, 20 epochs, CLT noise 1.06 -> mu_CLT=0.35,
    (1.34, 1e-5)-DP, the same epsilon as the moments accountant at sigma=1.3."""
    schedule = Schedule(steps=round(20 * 60000 / 256), dataset_size=60000, threat="eavesdropper")
    clt = account(Release(1.0, 256, sigma=1.06 / 256, neighbors="add-remove"), schedule, 1e-5, "gdp-clt")
    assert clt.mu == pytest.approx(0.35, abs=0.002)
    assert clt.epsilon == pytest.approx(1.34, abs=0.01)
    assert not clt.rigorous and "APPROXIMATE" in clt.note
    at13 = Release(1.0, 256, sigma=1.3 / 256, neighbors="add-remove")
    # dp-accounting's RDP conversion is tighter than the 2016 moments accountant's 1.34
    assert 1.0 < account(at13, schedule, 1e-5, "rdp").epsilon <= 1.34
    # the CLT is not a bound: at its own noise the rigorous PLD epsilon is larger
    assert (
        account(Release(1.0, 256, sigma=1.06 / 256, neighbors="add-remove"), schedule, 1e-5, "pld").epsilon
        > clt.epsilon
    )


def test_seed_formula_on_the_worked_example():
    """Theorem VI.5: sigma = 2C sqrt(T) / (D mu), mu the GDP parameter of (1, 1e-3)."""
    release = Release(clip=10.0, batch_size=64)
    schedule = Schedule(steps=MNIST_STEPS, **MNIST)
    result = calibrate(1.0, 1e-3, release, schedule, "seed")
    mu = gdp.mu_from_epsilon(1.0, 1e-3)
    assert result.sigma == pytest.approx(2 * 10.0 * math.sqrt(MNIST_STEPS) / (60000 * mu), rel=1e-9)
    assert result.mu == pytest.approx(mu, rel=1e-9) and result.epsilon <= 1.0
    assert not result.rigorous and "NOT a rigorous" in result.note
    back = account(release.with_sigma(result.sigma), schedule, 1e-3, "seed")
    assert back.epsilon == pytest.approx(1.0, rel=1e-9)
    # the seed ignores the threat
    for threat in ("eavesdropper", "device"):
        other = Schedule(steps=MNIST_STEPS, threat=threat, devices=3, **MNIST)
        assert calibrate(1.0, 1e-3, release, other, "seed").sigma == result.sigma


def test_seed_sigma_buys_far_more_epsilon_against_the_device():
    """docs/accounting.md's worked example: the seed's sigma gives a device-view mu ~30x the claim."""
    release = Release(clip=10.0, batch_size=64)
    schedule = Schedule(steps=MNIST_STEPS, **MNIST)
    seed = calibrate(1.0, 1e-3, release, schedule, "seed")
    device = account(release.with_sigma(seed.sigma), schedule, 1e-3, "gdp-clt")
    assert device.rigorous and device.compositions == 100  # exact: no sampling
    assert 29 < device.mu / seed.mu < 32
    assert account(release.with_sigma(seed.sigma), schedule, 1e-3, "pld").epsilon > 20


# ------------------------------------------------------------------------------ calibration
@pytest.mark.parametrize("accountant", ACCOUNTANTS)
@pytest.mark.parametrize(
    "threat, super_batch", [("device", None), ("eavesdropper", None), ("secret-subsampling", 400)]
)
def test_calibrate_is_one_sided_and_minimal(accountant, threat, super_batch):
    release, schedule = small(threat, super_batch=super_batch)
    result = calibrate(2.0, 1e-5, release, schedule, accountant)
    assert result.epsilon <= 2.0
    back = account(release.with_sigma(result.sigma), schedule, 1e-5, accountant)
    assert back.epsilon <= 2.0 and back.epsilon == pytest.approx(result.epsilon, rel=1e-8)
    assert back.epsilon >= 2.0 * (1 - 1e-3)
    lower = account(release.with_sigma(result.sigma * (1 - 3e-3)), schedule, 1e-5, accountant)
    assert lower.epsilon > 2.0
    assert result.sigma == pytest.approx(result.noise_multiplier * release.sensitivity)


def test_unreachable_target_is_a_clear_error():
    # the numerical solver (sampled pld, rdp) searches noise multipliers up to 1e15: epsilon
    # 1e-14 at delta 1e-300 needs about 4e16 (the unamplified closed form, exact, is the
    # smallest bound there; rdp and pld floor above it)
    release, schedule = small("eavesdropper")
    for accountant in ("best", "pld", "rdp"):
        with pytest.raises(PrivzvError, match="unreachable"):
            calibrate(1e-14, 1e-300, release, schedule, accountant)


def test_small_targets_below_the_old_search_range_are_answered():
    """The search used to stop at noise multiplier 1e6: epsilon 1e-9 at delta 1e-12 (noise
    multiplier 8e8 here) was refused as unreachable."""
    release, schedule = small("eavesdropper")
    for accountant in ("best", "pld", "rdp"):
        result = calibrate(1e-9, 1e-12, release, schedule, accountant)
        assert result.rigorous and result.noise_multiplier > 1e6 and result.epsilon <= 1e-9


def test_a_target_one_accountant_cannot_reach_is_answered_by_the_smallest_bound():
    """Without sampling rdp's finite orders floor its epsilon (0.175 at delta 5.6e-82 here even
    at noise multiplier 1e15): the exact closed form answers, and the answer says so."""
    release, schedule = small("eavesdropper", steps=70_756_845)
    schedule = dataclasses.replace(schedule, dataset_size=100)
    release = dataclasses.replace(release, batch_size=100)
    result = calibrate(0.015, 5.6e-82, release, schedule, "rdp")
    assert result.requested == "rdp" and result.accountant == "pld" and result.epsilon <= 0.015
    assert "rdp: epsilon 0.015: unreachable" in result.fallback and "pld answered" in result.note


def test_tiny_targets_without_sampling_have_exact_closed_form_answers():
    release, schedule = small()  # device threat: k = 10 unsampled releases
    result = calibrate(1e-9, 1e-12, release, schedule, "pld")
    assert result.epsilon <= 1e-9
    assert result.noise_multiplier == pytest.approx(
        math.sqrt(10) / gdp.mu_from_epsilon(1e-9, 1e-12), rel=1e-9
    )


def test_side_by_side_lists_seed_once_and_every_threat():
    release, schedule = small(sigma=0.05)
    rows = account_all(release, schedule, 1e-5)
    assert [r.accountant for r in rows].count("seed") == 1
    assert {(r.threat, r.accountant) for r in rows if r.accountant != "seed"} == {
        (t, a) for t in ("device", "eavesdropper") for a in ("pld", "rdp", "gdp-clt")
    }
    with_super = Schedule(steps=100, dataset_size=1000, super_batch=400)
    rows = calibrate_all(1.0, 1e-5, Release(1.0, 100), with_super)
    assert {r.threat for r in rows} == {"device", "eavesdropper", "secret-subsampling"}
    assert all(r.epsilon <= 1.0 for r in rows)


# ------------------------------------------------------------------------------ properties
@settings(max_examples=15, deadline=None)
@given(
    sigma=st.floats(0.01, 10.0),
    steps=st.integers(1, 10**6),
    accountant=st.sampled_from(["seed", "gdp-clt"]),
    threat=st.sampled_from(["device", "eavesdropper"]),
)
def test_gdp_accountants_roundtrip_and_monotone(sigma, steps, accountant, threat):
    release, schedule = small(threat, sigma=sigma, steps=steps)
    result = account(release, schedule, 1e-5, accountant)
    assert not math.isnan(result.epsilon)
    if 1e-6 < result.epsilon < 1e6 and math.isfinite(result.epsilon):
        back = calibrate(result.epsilon, 1e-5, release, schedule, accountant)
        assert back.sigma == pytest.approx(sigma, rel=1e-6)
        assert account(release.with_sigma(sigma * 1.1), schedule, 1e-5, accountant).epsilon <= result.epsilon


@settings(max_examples=6, deadline=None)
@given(
    sigma=st.floats(0.02, 0.5),
    accountant=st.sampled_from(["pld", "rdp"]),
    threat=st.sampled_from(["device", "eavesdropper"]),
)
def test_rigorous_accountants_are_monotone(sigma, accountant, threat):
    release, schedule = small(threat, sigma=sigma)
    eps = account(release, schedule, 1e-5, accountant).epsilon
    assert math.isfinite(eps) and eps > 0
    assert account(release.with_sigma(sigma * 1.2), schedule, 1e-5, accountant).epsilon < eps
    longer = Schedule(steps=400, dataset_size=1000, threat=threat)
    assert account(release, longer, 1e-5, accountant).epsilon > eps


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
def test_extreme_noise_gives_finite_answers(accountant):
    release, schedule = small("eavesdropper", sigma=1e4, steps=10**6)
    eps = account(release, schedule, 1e-5, accountant).epsilon
    assert math.isfinite(eps) and 0 <= eps < 1e-2
    tiny = account(release.with_sigma(1e-3), Schedule(steps=1, dataset_size=1000), 1e-5, accountant).epsilon
    assert math.isfinite(tiny) and tiny > 5


def test_vanishing_seed_mu_is_epsilon_zero_not_an_error():
    from privzv.accountants import gdp_epsilon

    release, _ = small(sigma=1e300)
    result = account(release, Schedule(steps=1, dataset_size=10**9), 1e-5, "seed")
    assert result.mu < 1e-300 and result.epsilon == 0.0
    assert gdp_epsilon(0.0, 1e-5) == 0.0


@pytest.mark.parametrize("threat", ["device", "eavesdropper"])
def test_tiny_noise_multiplier_gives_huge_finite_epsilon_not_overflow(threat):
    # z = 0.0016 with ~21 compositions overflowed dp-accounting's PLD grid (found via training).
    release = Release(clip=10.0, batch_size=32, sigma=0.001)
    schedule = Schedule(steps=100, dataset_size=1000, threat=threat)
    eps = account(release, schedule, 1e-5, "pld").epsilon
    assert math.isfinite(eps) and eps > 1e5


def test_unsampled_pld_is_the_exact_gaussian_composition():
    release, schedule = small(sigma=0.05)  # device threat: k = 10 releases, z = 2.5
    exact = gdp.epsilon_from_delta(math.sqrt(10) / 2.5, 1e-5)
    assert account(release, schedule, 1e-5, "pld").epsilon == pytest.approx(exact, rel=1e-12)
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dpa.GaussianDpEvent(2.5), 10)
    assert exact <= accountant.get_epsilon(1e-5) <= exact * 1.01


def _mironov_replace_one_rdp(q, z, orders):
    """Mironov 2017 (arXiv:1702.07476), Prop. 11 with p = q = 2, through the add-remove
    neighbour: eps_rep(a) <= (a - 1/2)/(a - 1) eps_ar(2a) + eps_ar(2a - 1), eps_ar from
    dp-accounting's private _compute_rdp_poisson_subsampled_gaussian (pinned in pyproject)."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    def sampled(o):
        return rdp._compute_rdp_poisson_subsampled_gaussian(q, 2.0 * z, o)

    return (orders - 0.5) / (orders - 1.0) * sampled(2.0 * orders) + sampled(2.0 * orders - 1.0)


@pytest.mark.parametrize("q, z", [(256 / 60000, 1.0), (0.01, 0.5), (0.5, 2.0), (1e-3, 5.0)])
def test_exact_replace_one_rdp_is_below_mironovs_bound_and_matches_mpmath(q, z):
    """The quadrature (accountants.replace_one_rdp) against Mironov's upper bound at every
    default order, and against an mpmath integral of the same Renyi divergence at three."""
    import mpmath
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    from privzv.accountants import replace_one_rdp

    orders = np.asarray(rdp.DEFAULT_RDP_ORDERS, dtype=float)
    exact = replace_one_rdp(q, z, orders)
    bound = _mironov_replace_one_rdp(q, z, orders)
    finite = np.isfinite(bound)
    assert np.all(exact[finite] <= bound[finite])
    a = 0.5 / z
    for alpha in (1.5, 4.0, 20.0):

        def integrand(x, alpha=mpmath.mpf(alpha)):
            phi = mpmath.npdf(x)
            p = phi * ((1 - q) + q * mpmath.exp(-a * x - a * a / 2))
            r = phi * ((1 - q) + q * mpmath.exp(a * x - a * a / 2))
            return p**alpha * r ** (1 - alpha)

        ref = float(
            mpmath.log(mpmath.quad(integrand, [-mpmath.inf, -alpha * a, 0, mpmath.inf])) / (alpha - 1)
        )
        got = replace_one_rdp(q, z, [alpha])[0]
        assert ref <= got <= ref * (1 + 1e-8) + 1e-15


def test_dp_event_export_reproduces_privzvs_epsilon_in_dp_accounting():
    """to_dp_event: the exported event, given to dp-accounting's PLDAccountant with the exported
    relation, gives privzv's pld epsilon (same discretisation); with a DP head the round is a
    composition inside one Poisson sampling, and combined=True is its single-Gaussian equal."""
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant

    from privzv import to_dp_event
    from privzv.release import HeadUpdate

    def dpa_epsilon(event, relation, delta=1e-5):
        accountant = pld_privacy_accountant.PLDAccountant(relation)
        accountant.compose(event)
        return accountant.get_epsilon(delta)

    for neighbors, threat in (
        ("replace-one", "eavesdropper"),
        ("add-remove", "eavesdropper"),
        ("replace-one", "device"),
    ):
        release = Release(clip=1.0, batch_size=100, neighbors=neighbors).with_noise_multiplier(1.5)
        schedule = Schedule(steps=20, dataset_size=1000, threat=threat)
        event, relation = to_dp_event(release, schedule)
        ours = account(release, schedule, 1e-5, "pld").epsilon
        assert dpa_epsilon(event, relation) == pytest.approx(ours, rel=2e-3)
    head = Release(clip=1.0, batch_size=100, head=HeadUpdate(2.0, 100), head_share=0.3)
    head = head.with_noise_multiplier(1.5)
    schedule = Schedule(steps=50, dataset_size=1000, threat="eavesdropper")
    event, relation = to_dp_event(head, schedule)
    z_down, z_head = head.split(1.5)
    assert event.count == 50 and relation == dpa.NeighboringRelation.REPLACE_ONE
    assert event.event.sampling_probability == 0.1
    assert [e.noise_multiplier for e in event.event.event.events] == [2 * z_down, 2 * z_head]
    combined, _ = to_dp_event(head, schedule, combined=True)
    assert combined.event.event.noise_multiplier == pytest.approx(2 * 1.5, rel=1e-12)
    assert dpa_epsilon(combined, relation) == pytest.approx(
        account(head, schedule, 1e-5, "pld").epsilon, rel=2e-3
    )
