"""privzv.gdp against high-precision (mpmath) references, dp-accounting and GDP identities."""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings
from pathlib import Path

import dp_accounting
import mpmath as mp
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_mechanism as plm
from hypothesis import given, settings
from hypothesis import strategies as st

from privzv import gdp
from privzv.errors import PrivzvError

# ------------------------------------------------------------------ mpmath references
_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gdp_accuracy.py"
_spec = importlib.util.spec_from_file_location("bench_gdp_accuracy", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)
ref_delta, ref_log_delta = bench.ref_delta, bench.ref_log_delta
eps_rel_error, mu_rel_error = bench.eps_rel_error, bench.mu_rel_error
LOG_1E_300 = bench.LOG_1E_300


# ------------------------------------------------------------------ delta(eps; mu)


def test_log_delta_matches_mpmath_on_dense_grid():
    eps, mu = bench.grid_points()
    ours = gdp.log_delta_from_epsilon(eps, mu)
    ref = np.array([ref_log_delta(e, m) for e, m in zip(eps, mu)])
    assert np.all(np.isfinite(ours))
    representable = ref >= LOG_1E_300
    assert representable.sum() > 250
    # |log delta - log delta*| <= 1e-9  <=>  relative error of delta <= ~1e-9
    assert np.max(np.abs(ours - ref)[representable]) <= 1e-9
    # below 1e-300 the log is still accurate, relative to its size
    tiny = ~representable
    assert np.max(np.abs(ours - ref)[tiny] / np.abs(ref[tiny])) <= 1e-12


def test_delta_matches_mpmath_at_random_points_and_switch_regions():
    eps, mu = bench.random_points()  # t = eps/mu - mu/2 near 0 and 10 among them
    ours = gdp.delta_from_epsilon(eps, mu)
    ref = np.array([float(ref_delta(e, m)) for e, m in zip(eps, mu)])
    keep = ref >= 1e-300
    assert np.max(np.abs(ours[keep] / ref[keep] - 1)) <= 1e-9


def test_delta_known_values():
    # mu = 1, eps = 1: Phi(-1/2) - e Phi(-3/2)
    assert gdp.delta_from_epsilon(1.0, 1.0) == pytest.approx(0.126936737507, rel=1e-11)
    # eps = 0: delta = 2 Phi(mu/2) - 1 = erf(mu / (2 sqrt 2))
    for mu in (1e-6, 0.3, 2.0, 9.0):
        assert gdp.delta_from_epsilon(0.0, mu) == pytest.approx(math.erf(mu / (2 * math.sqrt(2))), rel=1e-12)


def test_delta_underflow_is_graceful():
    log_d = gdp.log_delta_from_epsilon(1e4, 1e-6)
    assert np.isfinite(log_d) and log_d < -1e19
    assert gdp.delta_from_epsilon(1e4, 1e-6) == 0.0
    assert gdp.delta_from_epsilon(1e4, 1e3) == pytest.approx(1.0, abs=1e-15)


# ------------------------------------------------------------------ inverses
def test_epsilon_from_delta_matches_mpmath():
    mu, delta = bench.inverse_points(5, 0)
    eps = gdp.epsilon_from_delta(mu, delta)
    for e, m, d in zip(eps, mu, delta):
        if e == 0.0:  # answer 0 exactly when delta >= delta(0; mu)
            assert float(ref_delta(0.0, m)) <= d * (1 + 1e-12)
        else:
            assert eps_rel_error(e, m, d) <= 1e-10


def test_mu_from_epsilon_matches_mpmath():
    eps, delta = bench.inverse_points(6, 10)
    mu = gdp.mu_from_epsilon(eps, delta)
    for m, e, d in zip(mu, eps, delta):
        assert mu_rel_error(m, e, d) <= 1e-10


def test_epsilon_zero_when_delta_at_least_delta_at_zero():
    mu = 0.5
    d0 = gdp.delta_from_epsilon(0.0, mu)
    assert gdp.epsilon_from_delta(mu, d0 * (1 + 1e-9)) == 0.0
    assert gdp.epsilon_from_delta(mu, 0.99) == 0.0
    assert 0.0 < gdp.epsilon_from_delta(mu, d0 * (1 - 1e-6)) < 1e-4


def test_extremes_are_finite():
    assert np.isfinite(gdp.epsilon_from_delta(1e3, 1e-300))
    assert gdp.epsilon_from_delta(1e3, 1e-300) == pytest.approx(
        1e3 * (500 + 37.0471), rel=1e-3
    )  # ~ mu^2/2 - mu Phi^-1(delta)
    assert np.isfinite(gdp.epsilon_from_delta(1e-6, 1e-300))
    for eps, delta in [(1e4, 1e-300), (0.0, 1e-300), (1e-12, 0.999), (1e4, 0.999), (0.0, 1e-5)]:
        mu = gdp.mu_from_epsilon(eps, delta)
        assert np.isfinite(mu) and mu > 0
        assert mu_rel_error(mu, eps, delta) <= 1e-10


def test_dense_extreme_grid_has_no_nan_or_overflow():
    eps, mu = np.meshgrid(np.concatenate([[0.0], np.logspace(-12, 4, 40)]), np.logspace(-6, 3, 40))
    assert np.all(np.isfinite(gdp.log_delta_from_epsilon(eps, mu)))
    d = np.exp(np.linspace(LOG_1E_300, math.log(0.999), 40))
    m, dd = np.meshgrid(np.logspace(-6, 3, 40), d)
    assert np.all(np.isfinite(gdp.epsilon_from_delta(m, dd)))
    e, dd = np.meshgrid(np.concatenate([[0.0], np.logspace(-12, 4, 39)]), d)
    out = gdp.mu_from_epsilon(e, dd)
    assert np.all(np.isfinite(out) & (out > 0))


# ------------------------------------------------------------------ roundtrips, monotonicity
mus = st.floats(1e-4, 1e2)
epsilons = st.floats(1e-3, 1e3)
deltas = st.floats(1e-250, 0.5)


@settings(max_examples=100, deadline=None)
@given(eps=epsilons, mu=mus)
def test_roundtrip_eps_mu_delta(eps, mu):
    log_d = gdp.log_delta_from_epsilon(eps, mu)
    if not LOG_1E_300 <= log_d <= math.log(0.5):
        return
    delta = math.exp(log_d)
    assert gdp.epsilon_from_delta(mu, delta) == pytest.approx(eps, rel=1e-8)
    assert gdp.mu_from_epsilon(eps, delta) == pytest.approx(mu, rel=1e-8)


@settings(max_examples=100, deadline=None)
@given(mu=mus, delta=deltas)
def test_roundtrip_mu_delta_eps(mu, delta):
    eps = gdp.epsilon_from_delta(mu, delta)
    if eps == 0.0:
        assert gdp.delta_from_epsilon(0.0, mu) <= delta
        return
    assert gdp.log_delta_from_epsilon(eps, mu) == pytest.approx(math.log(delta), abs=1e-9)
    if eps > 1e-3:
        assert gdp.mu_from_epsilon(eps, delta) == pytest.approx(mu, rel=1e-7)


@settings(max_examples=100, deadline=None)
@given(eps=epsilons, delta=deltas)
def test_roundtrip_eps_delta_mu(eps, delta):
    mu = gdp.mu_from_epsilon(eps, delta)
    assert gdp.log_delta_from_epsilon(eps, mu) == pytest.approx(math.log(delta), abs=1e-9)
    assert gdp.epsilon_from_delta(mu, delta) == pytest.approx(eps, rel=1e-8)


@settings(max_examples=100, deadline=None)
@given(eps=st.lists(st.floats(0, 1e3), min_size=2, max_size=20), mu=mus)
def test_delta_decreases_in_epsilon(eps, mu):
    eps = np.sort(eps)
    d = gdp.log_delta_from_epsilon(eps, mu)
    assert np.all(np.diff(d) <= 1e-12 * np.abs(d[1:]))


@settings(max_examples=100, deadline=None)
@given(mu=st.lists(mus, min_size=2, max_size=20), eps=epsilons)
def test_delta_increases_in_mu(mu, eps):
    mu = np.sort(mu)
    d = gdp.log_delta_from_epsilon(eps, mu)
    assert np.all(np.diff(d) >= -1e-12 * np.abs(d[:-1]))


@settings(max_examples=100, deadline=None)
@given(delta=st.lists(deltas, min_size=2, max_size=20), mu=mus, eps=epsilons)
def test_inverses_are_monotone_in_delta(delta, mu, eps):
    delta = np.sort(delta)
    assert np.all(np.diff(gdp.epsilon_from_delta(mu, delta)) <= 0)
    mu_out = gdp.mu_from_epsilon(eps, delta)
    assert np.all(np.diff(mu_out) >= -1e-12 * mu_out[1:])


def test_delta_is_the_hockey_stick_of_the_tradeoff_curve():
    # A trade-off function f is (eps, delta)-DP iff f(alpha) >= 1 - delta - e^eps alpha
    # (Dong et al., Prop. 2.5); the tight delta is sup_alpha 1 - e^eps alpha - G_mu(alpha).
    alpha = np.concatenate([np.logspace(-12, -1, 20000), np.linspace(0.1, 1, 20000)])
    for eps, mu in [(0.0, 0.7), (0.5, 1.0), (2.0, 1.5), (1.0, 3.0)]:
        sup = np.max(1 - math.exp(eps) * alpha - gdp.tradeoff(alpha, mu))
        delta = gdp.delta_from_epsilon(eps, mu)
        assert sup <= delta * (1 + 1e-12)
        assert sup == pytest.approx(delta, rel=1e-6)


# ------------------------------------------------------------------ dp-accounting agreement
SIGMAS_DELTAS = [(0.5, 1e-5), (1.0, 1e-5), (2.0, 1e-3), (5.0, 1e-8), (0.8, 1e-12), (20.0, 1e-6)]


@pytest.mark.parametrize("sigma,delta", SIGMAS_DELTAS)
def test_epsilon_matches_dp_accounting_analytic_gaussian(sigma, delta):
    # Sensitivity 1, noise sigma: mu = 1/sigma (Thm 2.7); dp-accounting's analytic Gaussian
    # (Balle & Wang 2018) is exact for a single Gaussian mechanism.
    mu = gdp.gaussian_mu(1.0, sigma)
    ours = gdp.epsilon_from_delta(mu, delta)
    ref = dp_accounting.get_epsilon_gaussian(sigma, delta)
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-11)
    assert 1.0 / gdp.mu_from_epsilon(ours, delta) == pytest.approx(
        dp_accounting.get_sigma_gaussian(ours, delta), rel=1e-9
    )


@pytest.mark.parametrize("sensitivity,sigma", [(1.0, 0.7), (2.0, 3.0), (0.25, 0.4)])
def test_delta_matches_dp_accounting_gaussian_privacy_loss(sensitivity, sigma):
    eps = np.array([0.0, 0.1, 0.5, 1.0, 2.0, 4.0])
    ref = plm.GaussianPrivacyLoss(sigma, sensitivity=sensitivity).get_delta_for_epsilon(eps)
    ours = gdp.delta_from_epsilon(eps, gdp.gaussian_mu(sensitivity, sigma))
    np.testing.assert_allclose(ours, ref, rtol=1e-9)


# ------------------------------------------------------------------ calculus
def test_compose():
    assert gdp.compose([0.3, 0.4]) == pytest.approx(0.5, rel=1e-15)
    assert gdp.compose([]) == 0.0
    assert gdp.compose([1e200, 1e200]) == pytest.approx(math.sqrt(2) * 1e200)
    np.testing.assert_allclose(gdp.compose(np.array([[3.0, 4.0], [5.0, 12.0]])), [5.0, 13.0])
    np.testing.assert_allclose(
        gdp.compose(np.array([[3.0, 4.0], [5.0, 12.0]]), axis=0), [math.hypot(3, 5), math.hypot(4, 12)]
    )
    # k Gaussian releases of sensitivity s and noise sigma = one with noise sigma / sqrt(k)
    k, s, sigma = 25, 2.0, 7.0
    assert gdp.compose([gdp.gaussian_mu(s, sigma)] * k) == pytest.approx(
        gdp.gaussian_mu(s, sigma / math.sqrt(k)), rel=1e-14
    )


def test_gaussian_mu():
    assert gdp.gaussian_mu(2.0, 4.0) == 0.5
    np.testing.assert_allclose(gdp.gaussian_mu([1.0, 2.0], [[1.0], [4.0]]), [[1.0, 2.0], [0.25, 0.5]])


def test_tradeoff_properties():
    alpha = np.linspace(0.0, 1.0, 1001)
    np.testing.assert_allclose(gdp.tradeoff(alpha, 0.0), 1.0 - alpha, atol=1e-15)
    for mu in (0.1, 1.0, 4.0):
        g = gdp.tradeoff(alpha, mu)
        assert np.all(g <= 1.0 - alpha + 1e-15)
        assert np.all(g[1:-1] < 1.0 - alpha[1:-1])
        assert np.all(np.diff(g) <= 0)
        assert g[0] == 1.0 and g[-1] == 0.0
        # G_mu is symmetric: G_mu(G_mu(alpha)) = alpha
        inner = alpha[(alpha > 1e-3) & (alpha < 1 - 1e-3)]
        np.testing.assert_allclose(gdp.tradeoff(gdp.tradeoff(inner, mu), mu), inner, rtol=1e-9)
    assert np.all(np.diff(gdp.tradeoff(0.05, [0.0, 0.5, 1.0, 2.0])) < 0)


def test_tradeoff_matches_mpmath_in_the_tails():
    for alpha, mu in [(1e-300, 1.0), (1e-20, 5.0), (0.999999, 0.5), (0.3, 30.0)]:
        with mp.workdps(50):
            q = -mp.sqrt(2) * mp.erfinv(2 * mp.mpf(alpha) - 1)  # Phi^-1(1 - alpha)
            ref = float(mp.ncdf(q - mu))
        assert gdp.tradeoff(alpha, mu) == pytest.approx(ref, rel=1e-9)


# ------------------------------------------------------------------ shapes and errors
def test_scalars_give_floats_and_arrays_broadcast():
    assert type(gdp.delta_from_epsilon(1, 1)) is float
    assert type(gdp.epsilon_from_delta(1.0, 1e-5)) is float
    assert type(gdp.mu_from_epsilon(np.float64(1.0), 1e-5)) is float
    out = gdp.delta_from_epsilon([[0.5], [1.0]], [0.5, 1.0, 2.0])
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    assert out[1, 1] == gdp.delta_from_epsilon(1.0, 1.0)
    assert gdp.epsilon_from_delta([0.5, 1.0], 1e-5).shape == (2,)
    assert gdp.mu_from_epsilon(1.0, np.full((2, 2), 1e-5)).shape == (2, 2)


@pytest.mark.parametrize(
    "call,name,value",
    [
        (lambda: gdp.delta_from_epsilon(-1.0, 1.0), "epsilon", "-1.0"),
        (lambda: gdp.delta_from_epsilon(float("nan"), 1.0), "epsilon", "nan"),
        (lambda: gdp.delta_from_epsilon(float("inf"), 1.0), "epsilon", "inf"),
        (lambda: gdp.delta_from_epsilon(1.0, 0.0), "mu", "0.0"),
        (lambda: gdp.log_delta_from_epsilon(1.0, [1.0, -2.0]), "mu", "-2.0"),
        (lambda: gdp.epsilon_from_delta(1.0, 0.0), "delta", "0.0"),
        (lambda: gdp.epsilon_from_delta(1.0, 1.0), "delta", "1.0"),
        (lambda: gdp.epsilon_from_delta(-0.5, 1e-5), "mu", "-0.5"),
        (lambda: gdp.mu_from_epsilon(1.0, 1.5), "delta", "1.5"),
        (lambda: gdp.mu_from_epsilon(-1e-9, 1e-5), "epsilon", "-1e-09"),
        (lambda: gdp.mu_from_epsilon("abc", 1e-5), "epsilon", "abc"),
        (lambda: gdp.compose([1.0, -1.0]), "mu", "-1.0"),
        (lambda: gdp.gaussian_mu(1.0, 0.0), "sigma", "0.0"),
        (lambda: gdp.gaussian_mu(-1.0, 1.0), "sensitivity", "-1.0"),
        (lambda: gdp.tradeoff(1.5, 1.0), "alpha", "1.5"),
        (lambda: gdp.tradeoff(0.5, float("inf")), "mu", "inf"),
    ],
)
def test_bad_input_names_value_and_range(call, name, value):
    with pytest.raises(PrivzvError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{name}=") and value in message and "must be" in message


def test_the_whole_float_range_gives_a_delta_without_nan_or_warning():
    """epsilon / mu overflowing (1e300 / 1e-300) once gave NaN with overflow warnings; delta is 0
    there (log delta -inf: below the smallest float), and every other pair is in [0, 1]."""
    grid = np.concatenate([[0.0], np.logspace(-300, 300, 61)])
    eps, mu = np.meshgrid(grid, grid[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log_d = gdp.log_delta_from_epsilon(eps, mu)
        delta = gdp.delta_from_epsilon(eps, mu)
    assert not np.isnan(log_d).any() and np.all(log_d <= 0.0)
    assert np.all((delta >= 0.0) & (delta <= 1.0))
    assert np.all(np.diff(np.maximum(log_d, -1e308), axis=1) <= 0.0)  # delta falls as epsilon grows
    assert gdp.delta_from_epsilon(1e300, 1e-300) == 0.0
    assert gdp.log_delta_from_epsilon(1e160, 1e-160) == -math.inf
    assert gdp.delta_from_epsilon(0.0, 1e300) == 1.0  # mu -> inf: nothing is hidden


def test_the_inverses_stay_in_range_and_refuse_a_subnormal_delta():
    """epsilon_from_delta(1e-300, 1e-310) was -5.4e-300 (a last Halley step left the bracket
    [0, upper]) and mu_from_epsilon(0, 5e-324) 2e-323, whose delta is 1.6x the target (a
    subnormal delta has too few bits): now epsilon >= 0 always, and a subnormal delta is refused."""
    mus = np.array([1e-300, 1e-100, 1e-12, 1e-3, 1.0, 10.0, 1e3])
    deltas = np.array([2.3e-308, 1e-300, 1e-100, 1e-12, 0.5, 0.999999])
    m, d = np.meshgrid(mus, deltas)
    eps = gdp.epsilon_from_delta(m, d)
    assert np.all(eps >= 0.0)
    # the round trip, where epsilon's documented absolute error (~1e-16) is below the root
    assert np.all(gdp.log_delta_from_epsilon(eps, m)[:, 1:] <= np.log(d)[:, 1:] + 1e-9)
    for bad in (5e-324, 1e-310):
        for call in (lambda: gdp.epsilon_from_delta(1.0, bad), lambda: gdp.mu_from_epsilon(0.0, bad)):
            with pytest.raises(PrivzvError, match=f"delta={bad!r}: must be a finite number >= 2.22507e-308"):
                call()


def test_an_answer_beyond_the_float_range_is_inf_without_a_warning():
    """gaussian_mu(1e300, 1e-12) and compose([1.7e308] * 3) warned of overflow (numpy)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gdp.gaussian_mu(1e300, 1e-12) == math.inf
        assert gdp.compose([1.7e308] * 3) == math.inf
        assert gdp.compose([1e300, 1e300]) == pytest.approx(math.sqrt(2) * 1e300)
