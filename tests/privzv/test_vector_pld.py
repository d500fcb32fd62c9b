"""privzv.vector_pld: dp-accounting's PLD built, composed and read over arrays must be
dp-accounting's PLD (same grid, same masses, same epsilon). The composition: test_tilted_pld.py."""

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

from privzv import tilted_pld, vector_pld

Q = 256 / 60000
# (noise std, sampling rate, replace-one, discretisation)
SETTINGS = [(1.0, 0.01, False, 1e-3), (1.2, Q, True, 1e-4), (0.6, Q, False, 1e-4),
            (3.0, 0.5, True, 1e-3), (2.0, 1.0, False, 1e-3), (0.1, 0.01, False, 1e-2),
            (50.0, Q, False, 1e-5)]


def _both(sd, q, replace_one, disc, truncation=-50.0):
    relation = (dpa.NeighboringRelation.REPLACE_ONE if replace_one
                else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    theirs = pld.from_gaussian_mechanism(sd, value_discretization_interval=disc,
                                         sampling_prob=q, neighboring_relation=relation,
                                         log_mass_truncation_bound=truncation)
    ours = vector_pld.gaussian_pld(sd, sampling_prob=q, replace_one=replace_one,
                                   discretization=disc, log_mass_truncation_bound=truncation)
    return theirs, ours


def _pmfs(distribution):
    return [distribution._pmf_remove, distribution._pmf_add]


@pytest.mark.parametrize("sd, q, replace_one, disc", SETTINGS)
def test_the_array_built_pld_is_dp_accountings(sd, q, replace_one, disc):
    theirs, ours = _both(sd, q, replace_one, disc)
    for a, b in zip(_pmfs(theirs), _pmfs(ours)):
        a, b = a.to_dense_pmf(), b.to_dense_pmf()
        assert (a._lower_loss, len(a._probs)) == (b._lower_loss, len(b._probs))
        # connect-the-dots masses are second differences of deltas over (e^disc - 1): a
        # rounding difference of 1e-16 in a delta moves a mass by about 1e-16 / disc
        np.testing.assert_allclose(b._probs, a._probs, rtol=0, atol=1e-15 / disc)
        assert b._infinity_mass == pytest.approx(a._infinity_mass, rel=1e-9)
    for delta in (1e-3, 1e-5, 1e-10):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(
            theirs.get_epsilon_for_delta(delta), rel=1e-10, abs=1e-15)


@pytest.mark.parametrize("sd, q, replace_one, disc", SETTINGS)
def test_the_epsilon_walk_is_dp_accountings(sd, q, replace_one, disc):
    """tilted_pld.walk_epsilon over a dense PMF's arrays is dp-accounting's epsilon walk; corner
    cases included: delta 0.9 (epsilon 0), deltas below the infinity mass (inf)."""
    _, ours = _both(sd, q, replace_one, disc)
    composed = pld.PrivacyLossDistribution(*(p.to_dense_pmf().self_compose(50) for p in
                                             _pmfs(ours)))
    for distribution in (ours, composed):
        pmfs = [distribution._pmf_remove] + ([] if distribution._symmetric
                                             else [distribution._pmf_add])
        for delta in (0.9, 0.1, 1e-5, 1e-10, 1e-14, 1e-30):
            theirs = distribution.get_epsilon_for_delta(delta)
            got = max(_walk(p.to_dense_pmf(), delta) for p in pmfs)
            assert got == theirs or got == pytest.approx(theirs, rel=1e-9)


def _walk(pmf, delta):
    losses = (pmf._lower_loss + np.arange(len(pmf._probs))) * pmf._discretization
    return tilted_pld.walk_epsilon(np.flip(losses), np.flip(pmf._probs), pmf._infinity_mass, delta)


@pytest.mark.parametrize("adjacency", ["REMOVE", "ADD", "REPLACE"])
def test_hockey_stick_values_keep_their_precision_at_small_q(adjacency):
    """delta(eps) against a 40-digit mpmath evaluation at the same cut x(eps): the
    cancellation-free form is within 3e-17 (dp-accounting's subtraction of whole CDFs: up to
    1.5e-16 here), which is what a grid step of 1e-6 needs (masses are second differences of
    these values over the step)."""
    import mpmath
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

    mpmath.mp.dps = 40
    adj, sd = AdjacencyType[adjacency], 50.0
    ours = vector_pld.ArrayGaussianPrivacyLoss(sd, sampling_prob=Q, adjacency_type=adj)
    theirs = GaussianPrivacyLoss(sd, sampling_prob=Q, adjacency_type=adj)
    eps = np.array([-2e-5, 1e-6, 1e-5, 3e-5, 1e-4, 4e-4])
    cuts = ours.inverse_privacy_losses(eps)
    np.testing.assert_allclose(cuts, [theirs.inverse_privacy_loss(e) for e in eps], rtol=1e-12)

    def cdf(t):
        return mpmath.ncdf(mpmath.mpf(t) / sd)

    def exact(e, x):
        x = mpmath.mpf(x)
        upper = cdf(x) if adj == AdjacencyType.ADD else (1 - Q) * cdf(x) + Q * cdf(x + 1)
        lower = cdf(x) if adj == AdjacencyType.REMOVE else (1 - Q) * cdf(x) + Q * cdf(x - 1)
        return float(upper - mpmath.e ** mpmath.mpf(e) * lower)

    truth = np.array([exact(e, x) for e, x in zip(eps, cuts)])
    ours_error = np.max(np.abs(ours.get_delta_for_epsilon(eps) - truth))
    theirs_error = np.max(np.abs(theirs.get_delta_for_epsilon(eps) - truth))
    assert ours_error <= 3e-17 and ours_error < theirs_error / 3
