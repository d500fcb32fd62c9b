"""privzv.gaussian_pmf: one release's connect-the-dots PMF must be the exact one (40-digit mpmath
integrals) within its stated errors; it must be dp-accounting's PMF up to
dp-accounting's own round-off; its hockey-stick curve must lie above the exact one. And the
epsilon walk (privzv.tilted_pld.walk_epsilon) must be dp-accounting's."""

import importlib.util
import math
import sys
from pathlib import Path

import dp_accounting as dpa
import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

from privzv import gaussian_pmf, tilted_pld

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_pmf_masses.py"
_spec = importlib.util.spec_from_file_location("bench_pmf_masses", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)
_exact_mass = bench.exact_mass  # 40-digit mpmath mass of one grid point

Q = 256 / 60000
# (noise std, sampling rate, direction, discretisation)
SETTINGS = [
    (1.0, 0.01, "remove", 1e-3),
    (1.0, 0.01, "add", 1e-3),
    (1.2, Q, "replace", 1e-4),
    (0.6, Q, "remove", 1e-4),
    (0.6, Q, "add", 1e-4),
    (3.0, 0.5, "replace", 1e-3),
    (2.0, 1.0, "remove", 1e-3),
    (2.0, 1.0, "replace", 1e-3),
    (0.1, 0.01, "add", 1e-2),
    (0.1, 0.01, "remove", 1e-2),
    (50.0, Q, "remove", 1e-6),
    (50.0, Q, "add", 1e-6),
]


def _ours(sd, q, kind, disc, truncation=-50.0):
    return gaussian_pmf.release_pmf(
        sd, sampling_prob=q, kind=kind, discretization=disc, log_truncation=truncation
    )


@pytest.mark.parametrize("sd, q, kind, disc", SETTINGS)
def test_masses_are_the_exact_ones_within_their_stated_errors(sd, q, kind, disc):
    """Each mass is the exact one times (1 + r), r <= 1e-12, up to the displacement of atoms by
    at most ``loss_shift`` (which moves a mass by at most about 2 loss_shift / disc of itself
    and its neighbours)."""
    ours = _ours(sd, q, kind, disc)
    probs = ours.probs
    rng = np.random.default_rng(0)
    inner = np.arange(1, len(probs) - 1)
    heavy = inner[probs[inner] > 1e-9 * probs.max()]
    assert 0.0 <= ours.loss_shift < 1e-11
    tolerance = 1e-12 + 4.0 * ours.loss_shift / disc
    for i in {int(np.argmax(probs)), *rng.choice(heavy, size=3).tolist()}:
        grid_loss = mpmath.mpf(ours.lower + i) * mpmath.mpf(disc)
        exact = float(_exact_mass(sd, q, kind, disc, grid_loss))
        assert abs(probs[i] / exact - 1.0) <= tolerance, (i, probs[i], exact)


@pytest.mark.parametrize("sd, q, kind, disc", SETTINGS)
def test_the_pmf_is_dp_accountings_up_to_its_round_off(sd, q, kind, disc):
    """Same grid; masses within dp-accounting's own error (second differences of hockey-stick
    values: about 1e-16 / disc each); the infinity mass is the truncated tail, which
    dp-accounting splits further (it keeps only delta at the top grid point), so ours is
    larger but at most the tail e^-50 / 2."""
    relation = (
        dpa.NeighboringRelation.REPLACE_ONE
        if kind == "replace"
        else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    theirs = pld.from_gaussian_mechanism(
        sd,
        value_discretization_interval=disc,
        sampling_prob=q,
        neighboring_relation=relation,
        log_mass_truncation_bound=-50.0,
    )
    theirs = (theirs._pmf_add if kind == "add" else theirs._pmf_remove).to_dense_pmf()
    ours = _ours(sd, q, kind, disc)
    assert (ours.lower, len(ours.probs)) == (theirs._lower_loss, len(theirs._probs))
    np.testing.assert_allclose(ours.probs, theirs._probs, rtol=1e-9, atol=3e-15 / disc)
    assert theirs._infinity_mass <= ours.infinity_mass <= 0.5 * math.exp(-50) * (1 + 1e-9)


@pytest.mark.parametrize("sd", [0.5, 2.0, 30.0])
def test_hockey_stick_curve_lies_above_the_exact_gaussian_one(sd):
    """q = 1: the pair is N(-a, 1) against N(0, 1) (a = 1/sd), whose hockey-stick divergence is
    Phi(-eps/a + a/2) - e^eps Phi(-eps/a - a/2) (Balle & Wang 2018); the connect-the-dots PMF
    matches it at the grid points (from above, within 1e-12 relative) and lies above between."""
    mpmath.mp.dps = 40
    disc = 1e-3 / sd
    ours = _ours(sd, 1.0, "remove", disc)
    losses = (ours.lower + np.arange(len(ours.probs))) * disc
    a = mpmath.mpf(1) / sd
    for eps in np.quantile(losses[losses > 0], [0.01, 0.2, 0.5, 0.9]).tolist() + [0.0]:
        for at in (round(eps / disc) * disc, (round(eps / disc) + 0.5) * disc):
            ours_delta = float(
                np.sum(np.where(losses > at, -np.expm1(at - losses), 0.0) * ours.probs) + ours.infinity_mass
            )
            e = mpmath.mpf(at)
            exact = float(mpmath.ncdf(-e / a + a / 2) - mpmath.e**e * mpmath.ncdf(-e / a - a / 2))
            assert exact <= ours_delta <= exact * (1 + 1e-9) + 1e-20 or (
                at != round(eps / disc) * disc and exact <= ours_delta
            )


def test_too_many_pieces_is_refused():
    with pytest.raises(gaussian_pmf.TooManyPieces):
        _ours(1e-7, 0.01, "remove", 1.0)


@pytest.mark.parametrize(
    "sd, q, replace_one, disc",
    [(1.0, 0.01, False, 1e-3), (1.2, Q, True, 1e-4), (2.0, 1.0, False, 1e-3), (0.1, 0.01, False, 1e-2)],
)
def test_the_epsilon_walk_is_dp_accountings(sd, q, replace_one, disc):
    """tilted_pld.walk_epsilon over a dense PMF's arrays is dp-accounting's epsilon walk; corner
    cases included: delta 0.9 (epsilon 0), deltas below the infinity mass (inf)."""
    relation = (
        dpa.NeighboringRelation.REPLACE_ONE if replace_one else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    single = pld.from_gaussian_mechanism(
        sd, value_discretization_interval=disc, sampling_prob=q, neighboring_relation=relation
    )
    pmfs = [single._pmf_remove] + ([] if single._symmetric else [single._pmf_add])
    composed = pld.PrivacyLossDistribution(*(p.to_dense_pmf().self_compose(50) for p in pmfs))
    for distribution in (single, composed):
        pmfs = [distribution._pmf_remove] + ([] if distribution._symmetric else [distribution._pmf_add])
        for delta in (0.9, 0.1, 1e-5, 1e-10, 1e-14, 1e-30):
            theirs = distribution.get_epsilon_for_delta(delta)
            got = max(_walk(p.to_dense_pmf(), delta) for p in pmfs)
            assert got == theirs or got == pytest.approx(theirs, rel=1e-9)


def _walk(pmf, delta):
    losses = (pmf._lower_loss + np.arange(len(pmf._probs))) * pmf._discretization
    return tilted_pld.walk_epsilon(np.flip(losses), np.flip(pmf._probs), pmf._infinity_mass, delta)


def test_the_unsampled_mixture_log_is_exact_far_below_zero():
    """log((1-q) + q e^x) at q = 1 is x: log1p(expm1(x)) gave -inf below x = -37 (expm1 rounds to
    -1), so a tiny noise multiplier's loss span was infinite (0 * inf and inf - inf downstream)."""
    x = np.array([-1000.0, -40.0, 0.0, 50.0, 800.0])
    np.testing.assert_array_equal(gaussian_pmf._log1p_mix(1.0, x), x)
    span = gaussian_pmf.loss_span(1e-6, sampling_prob=1.0, kind="remove", log_truncation=-50.0)
    assert np.isfinite(span) and span > 0
