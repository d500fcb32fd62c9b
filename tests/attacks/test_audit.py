import math

import numpy as np
import pytest
from scipy import stats

from privzv import gdp
from privzv.attacks import audit, clopper_pearson, likelihood_ratio, releases
from privzv.errors import PrivzvError
from privzv.release import Release


def single_gaussian(mu, trials, seed):
    """One per-sample release with sensitivity/sigma = mu (replace-one: sensitivity 2C)."""
    return likelihood_ratio.simulate(
        Release(clip=0.5, batch_size=1, sigma=1.0 / mu, aggregate="per-sample"), 1, trials, seed
    )


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (57, 1000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="exact")
    assert clopper_pearson.lower(k, n, 0.05) == pytest.approx(ci.low, abs=1e-12)
    assert clopper_pearson.upper(k, n, 0.05) == pytest.approx(ci.high, abs=1e-12)


def test_clopper_pearson_upper_covers():
    rng = np.random.default_rng(0)
    p, n = 0.03, 200
    k = rng.binomial(n, p, size=4000)
    miss = np.mean(clopper_pearson.upper(k, n, 0.05) < p)
    assert miss <= 0.05


def test_counts_and_bounds_on_a_perfect_split():
    s_in, s_out = np.full(1000, 1.0), np.full(1000, -1.0)
    eps, mu = audit.bounds_at(s_in, s_out, [0.0], 0.0, 0.025)
    fpr_ub = 1 - 0.025 ** (1 / 1000)  # CP upper bound for 0 of 1000
    assert eps[0] == pytest.approx(math.log((1 - fpr_ub) / fpr_ub))
    assert mu[0] == pytest.approx(2 * stats.norm.isf(fpr_ub))


def test_single_gaussian_mu_lb_approaches_and_respects_truth():
    mu = 1.0
    t = single_gaussian(mu, 100_000, seed=1)
    assert t.mu == pytest.approx(mu)
    b = audit.audit_scores(t.scores_in, t.scores_out, 1e-5, alpha=0.05)
    assert 0.9 <= b.mu_lb <= mu
    assert 0 < b.eps_lb <= gdp.epsilon_from_delta(mu, 1e-5)


def test_mu_lb_exceeds_truth_no_more_often_than_alpha():
    rng = np.random.default_rng(2)
    mu, n, runs, alpha = 1.0, 3000, 60, 0.1
    over_mu = over_eps = 0
    eps_true = gdp.epsilon_from_delta(mu, 1e-3)
    for r in range(runs):
        s_out, s_in = rng.normal(0, 1, n), rng.normal(mu, 1, n)
        b = audit.audit_scores(s_in, s_out, 1e-3, alpha=alpha, seed=r)
        over_mu += b.mu_lb > mu
        over_eps += b.eps_lb > eps_true
    # P(Binomial(60, 0.1) >= 13) < 0.01
    assert over_mu < 13 and over_eps < 13


def test_bound_falls_to_zero_on_pure_noise():
    rel = Release(clip=1.0, batch_size=64, sigma=1e4)
    t = likelihood_ratio.simulate(rel, 5, 20_000, seed=3)
    b = audit.audit_scores(t.scores_in, t.scores_out, 1e-3)
    assert b.mu_lb < 0.05 and b.eps_lb < 0.1


def test_scalar_and_vector_release_same_attacker_power():
    scalar = Release(clip=1.0, batch_size=64, sigma=2 / 64 / 0.4)  # mean, dim 1
    vector = Release(clip=1.0, batch_size=8, sigma=2 / 0.4, aggregate="per-sample", dim=16)
    ts, tv = (likelihood_ratio.simulate(r, 9, 20_000, seed=4) for r in (scalar, vector))
    assert ts.mu == pytest.approx(1.2) and tv.mu == pytest.approx(1.2)
    for t in (ts, tv):  # both z statistics are N(0,1) out and N(mu,1) in
        assert abs(t.scores_out.mean()) < 0.03 and abs(t.scores_in.mean() - 1.2) < 0.03
        assert abs(t.scores_in.std() - 1) < 0.03
    bs, bv = (audit.audit_scores(t.scores_in, t.scores_out, 1e-3) for t in (ts, tv))
    assert abs(bs.mu_lb - bv.mu_lb) < 0.1


def test_clip_and_sensitivity_of_simulated_release():
    x = np.array([[3.0, 4.0], [0.3, 0.4], [np.nan, 1.0], [np.inf, 0.0]])
    c = releases.clip(x, 1.0)
    np.testing.assert_allclose(np.linalg.norm(c, axis=1), [1.0, 0.5, 1.0, 1.0])
    rel = Release(clip=1.0, batch_size=4, sigma=0.0)
    rng = np.random.default_rng(5)
    batch = rng.normal(0, 5, size=(4, 1))
    a, b = batch.copy(), batch.copy()
    a[0], b[0] = 1e6, -1e6
    gap = abs(releases.noiseless(rel, a) - releases.noiseless(rel, b))[0]
    assert gap == pytest.approx(rel.sensitivity)
    noisy = releases.sample(rel.with_sigma(0.3), np.broadcast_to(batch, (20_000, 4, 1)), rng)
    assert noisy.std() == pytest.approx(0.3, rel=0.03)
    assert noisy.mean() == pytest.approx(releases.noiseless(rel, batch)[0], abs=0.01)


def test_bad_input():
    with pytest.raises(PrivzvError):
        audit.audit_scores([1, 2], [0, 1], 1e-3, method="bonferroni")
    with pytest.raises(PrivzvError):
        audit.audit_scores([1, 2], [0, 1], 1e-3, method="magic")
    with pytest.raises(PrivzvError):
        likelihood_ratio.simulate(Release(clip=1.0, batch_size=2, sigma=1.0), 0, 10)


@pytest.mark.parametrize("noise", ["scalar", "vector"])
def test_rigorous_sigma_keeps_lower_bound_below_upper_bound(noise):
    from privzv import accounting
    from privzv.attacks.release_audit import audit_release
    from privzv.release import Schedule

    vector = noise == "vector"
    release = Release(
        clip=10.0, batch_size=64, aggregate="per-sample" if vector else "mean", dim=8 if vector else 1
    )
    schedule = Schedule(steps=9375, dataset_size=60000, threat="device")  # 10 epochs, k = 10
    cal = accounting.calibrate(1.0, 1e-3, release, schedule, "pld")
    out = audit_release(release.with_sigma(cal.sigma), schedule, 1e-3, trials=20_000, seed=6)
    assert out["releases_per_record"] == 10
    assert out["mu_exact"] == pytest.approx(math.sqrt(10) / cal.noise_multiplier)
    assert 0.3 < out["lower"]["eps_lb"] < out["upper"]["epsilon"] <= 1.0 + 1e-6


def test_seed_formula_sigma_is_refuted_under_device_threat():
    from privzv import accounting
    from privzv.attacks.release_audit import audit_release
    from privzv.release import Schedule

    release = Release(clip=10.0, batch_size=64)
    schedule = Schedule(steps=93750, dataset_size=60000, threat="device")  # MNIST, 100 epochs
    cal = accounting.calibrate(1.0, 1e-3, release, schedule, "seed")
    out = audit_release(release.with_sigma(cal.sigma), schedule, 1e-3, accountant="seed", trials=5000, seed=7)
    assert out["upper"]["epsilon"] == pytest.approx(1.0) and not out["upper"]["rigorous"]
    assert out["lower"]["eps_lb"] > 1.0


def test_refuted_by_mu_where_eps_lb_saturates():
    """The paper's formula at a claimed epsilon 8: eps_lb caps below 8 (no false positive left
    to count at 5,000 trials) but mu_lb exceeds the claimed mu, so the claim is refuted."""
    from privzv import accounting
    from privzv.attacks.release_audit import audit_release, refutation
    from privzv.release import Schedule

    release = Release(clip=10.0, batch_size=64)
    schedule = Schedule(steps=93750, dataset_size=60000, threat="device")
    cal = accounting.calibrate(8.0, 1e-3, release, schedule, "seed")
    out = audit_release(release.with_sigma(cal.sigma), schedule, 1e-3, accountant="seed", trials=5000, seed=7)
    decision = refutation(out["lower"], out["upper"], 1e-3)
    assert out["lower"]["eps_lb"] < 8 < out["lower"]["eps_lb"] + 8
    assert decision["refuted"] and decision["refuted_by"] == ["mu"]
    assert decision["claimed_mu"] == pytest.approx(cal.mu)
    assert decision["decision_confidence"] == pytest.approx(0.95)


def test_claimed_mu_converts_epsilon_exactly_under_the_device_threat():
    """Without an accountant's mu the claim becomes the GDP mu through (eps, delta); under the
    device threat (k composed Gaussians, exactly GDP) that is the release's exact mu."""
    from privzv import accounting
    from privzv.attacks.release_audit import claimed_mu, refutation
    from privzv.release import Schedule

    release = Release(clip=10.0, batch_size=64)
    schedule = Schedule(steps=9375, dataset_size=60000, threat="device")
    cal = accounting.calibrate(1.0, 1e-3, release, schedule, "pld")
    exact = math.sqrt(10) / cal.noise_multiplier
    assert claimed_mu({"epsilon": 1.0, "mu": None}, 1e-3) == pytest.approx(exact, rel=1e-3)
    lower = {"eps_lb": 0.5, "mu_lb": exact * 1.01, "alpha": 0.05, "method": "split"}
    decision = refutation(lower, {"epsilon": 1.0, "mu": None}, 1e-3)
    assert decision["refuted_by"] == ["mu"] and decision["decision_confidence"] == pytest.approx(0.9)
    lower["mu_lb"] = exact * 0.99
    assert not refutation(lower, {"epsilon": 1.0, "mu": None}, 1e-3)["refuted"]


@pytest.mark.parametrize("threat,extra", [("eavesdropper", {}), ("secret-subsampling", {"super_batch": 256})])
def test_subsampled_threats_lower_bound_below_rigorous_upper_and_refutes_a_small_sigma(threat, extra):
    """Poisson-subsampled releases: the exact-LR attacker's bound is not vacuous (> 0.3 at 5,000
    trials) and stays below pld's; at a third of that sigma it proves more than the claimed 2."""
    from privzv import accounting
    from privzv.attacks.release_audit import audit_release, refutation
    from privzv.release import Schedule

    release = Release(clip=10.0, batch_size=64)
    schedule = Schedule(steps=937, dataset_size=6000, threat=threat, **extra)
    cal = accounting.calibrate(2.0, 1e-3, release, schedule, "pld")
    out = audit_release(release.with_sigma(cal.sigma), schedule, 1e-3, trials=5000, seed=3)
    assert out["sampling_rate"] == pytest.approx(64 / extra.get("super_batch", 6000))
    assert out["mu_exact"] is None and out["lower"]["method"] == "split"
    assert 0.3 < out["lower"]["eps_lb"] < out["upper"]["epsilon"] <= 2 + 1e-6
    small = audit_release(release.with_sigma(cal.sigma / 3), schedule, 1e-3, trials=5000, seed=3)
    assert small["lower"]["eps_lb"] > 2.0
    assert small["lower"]["eps_lb"] < small["upper"]["epsilon"]
    decision = refutation(out["lower"], out["upper"], 1e-3, threat)
    assert decision["claimed_mu"] is None and not decision["refuted"]


def test_subsampled_llr_is_the_exact_mixture_ratio():
    """With q = 1 the subsampled statistic is the Gaussian LLR, affine in z: same ordering."""
    release = Release(clip=1.0, batch_size=4, sigma=0.3)
    full = likelihood_ratio.simulate_subsampled(release, 5, 1.0, 200, seed=0)
    s, sigma = release.sensitivity, 0.3
    # replace-one: in shift +s/2, out -s/2, LLR per release = s y / sigma^2; sum ~ N(+-k s^2 / 2 sigma^2, k s^2 / sigma^2)
    k = 5
    mean_in, var = k * s**2 / (2 * sigma**2), k * s**2 / sigma**2
    big = likelihood_ratio.simulate_subsampled(release, k, 1.0, 20000, seed=1)
    assert big.scores_in.mean() == pytest.approx(mean_in, abs=0.05 * np.sqrt(var))
    assert big.scores_out.mean() == pytest.approx(-mean_in, abs=0.05 * np.sqrt(var))
    assert big.scores_in.var() == pytest.approx(var, rel=0.05)
    assert full.scores_in.shape == (200,)


def test_the_release_audit_refuses_a_pooled_head_instead_of_rounding_its_count():
    """A pooled DP head's effective count K is fractional (unequal releases); rounding it down
    would simulate a weaker attacker than the run's, so the audit refuses it."""
    from privzv.attacks.release_audit import audit_release
    from privzv.release import HeadUpdate, Schedule

    head = HeadUpdate(clip=0.1, batch_size=2 * 2 * 2, window=2)
    release = Release(clip=1.0, batch_size=2, head=head, head_share=0.8).with_noise_multiplier(3.0)
    schedule = Schedule(steps=8, dataset_size=8, devices=2)
    with pytest.raises(PrivzvError, match="effective count .*head window 0"):
        audit_release(release, schedule, 1e-5, trials=100)
    unpooled = Release(
        clip=1.0, batch_size=2, head=HeadUpdate(clip=0.1, batch_size=2), head_share=0.8
    ).with_noise_multiplier(3.0)
    assert audit_release(unpooled, schedule, 1e-5, trials=100)["releases_per_record"] == 2  # 1 per device
