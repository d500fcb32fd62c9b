"""privzv.rdp: dp-accounting's RDP accountant for the (Poisson-sampled) Gaussian, over arrays and
without importing dp-accounting, must give dp-accounting's epsilon; and the accounting path
(pld, rdp, best) must not import dp-accounting at all (its import costs about 2 s)."""

import itertools
import math
import subprocess
import sys

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from privzv import accountants, rdp
from privzv.threats import Exposure

QS = (1e-6, 1e-4, 256 / 60000, 0.01, 0.1, 0.5, 1.0)
ZS = (0.3, 0.7, 1.0, 2.0, 5.0, 50.0, 1e4)
KS = (1, 1000, 10**8)
DELTAS = (1e-5, 1e-12, 1e-300)


def test_orders_are_dp_accountings():
    np.testing.assert_array_equal(rdp.DEFAULT_ORDERS, dpa_rdp.DEFAULT_RDP_ORDERS)


@pytest.mark.parametrize("q, z", list(itertools.product(QS, ZS)))
def test_rdp_values_and_epsilons_are_dp_accountings(q, z):
    """Every order, integer and fractional, to 1e-12 relative or 1e-15 absolute (log A_alpha is a
    log-sum-exp near 0 at tiny q, which privzv sums as A_alpha - 1 and dp-accounting as logs: a
    few ulps of 1 apart), inf where dp-accounting leaves the order out. Epsilon of k releases
    (dp-accounting's RdpAccountant composes k x these values and converts) to 1e-11 relative or
    k x 1e-15 absolute, for every k and delta. Fractional orders with sampling are not
    dp-accounting's series but a quadrature (checked against exact integrals below), so epsilon
    is compared on the integer orders (dp-accounting's series does not converge at q = 0.5,
    z = 50, alpha = 1.2 and gives 0.0096 at 2.6 where the integral is 1.3e-4)."""
    ours = rdp.gaussian_rdp(z, rdp.DEFAULT_ORDERS, None if q == 1.0 else q)
    theirs = dpa_rdp._compute_rdp_poisson_subsampled_gaussian(q, z, dpa_rdp.DEFAULT_RDP_ORDERS)
    finite = np.isfinite(theirs)
    orders = rdp.DEFAULT_ORDERS
    integer = (orders % 1 == 0) | (q == 1.0)
    same = finite & integer
    np.testing.assert_array_equal(np.isfinite(ours[integer]), finite[integer])
    np.testing.assert_allclose(ours[same], theirs[same], rtol=1e-12, atol=1e-15)
    for k, delta in itertools.product(KS, DELTAS):
        expected = dpa_rdp.compute_epsilon(orders[integer], k * theirs[integer], delta)[0]
        try:
            got = rdp.epsilon(orders[integer], k * ours[integer], delta)
            if not math.isfinite(got):
                raise accountants.CannotAnswer("no finite order")
        except accountants.CannotAnswer:
            assert not math.isfinite(expected)
            continue
        assert got == pytest.approx(expected, rel=1e-11, abs=k * 1e-15), (k, delta)


def test_the_accountant_composes_as_dp_accountings_rdp_accountant():
    """The shortcut above (k x one release's RDP) is what RdpAccountant does (up to the
    fractional orders' quadrature margins, 1e-9 relative: privzv is never below)."""
    accountant = dpa_rdp.RdpAccountant()
    accountant.compose(dpa.PoissonSampledDpEvent(256 / 60000, dpa.GaussianDpEvent(1.1)), 14062)
    ours = accountants.rdp_epsilon(1.1, Exposure(14062, 256 / 60000), "add-remove", 1e-5)
    theirs = accountant.get_epsilon(1e-5)
    assert theirs <= ours <= theirs * (1 + 1e-8)


@pytest.mark.parametrize("q, z", [(1e-6, 0.7), (0.01, 1e4), (256 / 60000, 50.0), (0.5, 2.0)])
def test_integer_orders_match_40_digit_arithmetic(q, z):
    """A_alpha of Mironov, Talwar & Zhang 2019 (Sec. 3.2) in mpmath: privzv's RDP at every
    integer order within 1e-12 relative, also where A_alpha - 1 is below 1e-15."""
    import mpmath

    mpmath.mp.dps = 40
    for alpha in (2, 3, 10, 33, 63, 256):
        exact = mpmath.log(
            mpmath.fsum(
                mpmath.binomial(alpha, i)
                * mpmath.mpf(q) ** i
                * (1 - mpmath.mpf(q)) ** (alpha - i)
                * mpmath.e ** (mpmath.mpf(i * i - i) / (2 * mpmath.mpf(z) ** 2))
                for i in range(alpha + 1)
            )
        ) / (alpha - 1)
        ours = rdp.gaussian_rdp(z, [alpha], q)[0]
        assert ours == pytest.approx(float(exact), rel=1e-12, abs=0.0), alpha


def test_conversion_is_dp_accountings_including_its_corner_cases():
    orders = rdp.DEFAULT_ORDERS
    for values in (
        np.zeros(len(orders)),
        np.full(len(orders), 1e-30),
        orders * 0.01,
        orders * 1e3,
        np.where(orders > 5, np.inf, orders),
    ):
        for delta in (0.0, 1e-300, 1e-12, 0.5):
            theirs = dpa_rdp.compute_epsilon(orders, values, delta)[0]
            assert rdp.epsilon(orders, values, delta) == pytest.approx(theirs, rel=1e-13)


@pytest.mark.parametrize("z, q", [(1e-12, 0.01), (1e-12, None), (1e12, 0.5), (0.01, 1e-9)])
def test_extremes_answer_or_decline_never_crash(z, q):
    for k, delta in itertools.product((1, 10**8), (1e-300, 0.5)):
        try:
            eps = accountants.rdp_epsilon(z, Exposure(k, q), "add-remove", delta)
        except accountants.CannotAnswer:
            continue
        assert math.isfinite(eps) and eps >= 0.0


def test_the_accounting_path_does_not_import_dp_accounting():
    """A calibration on a sampled threat (best: pld and rdp) and an rdp account, in a fresh
    process: dp_accounting is never imported."""
    code = (
        "import sys\n"
        "from privzv.accounting import account, calibrate\n"
        "from privzv.release import Release, Schedule\n"
        "release = Release(clip=1.0, batch_size=256, neighbors='add-remove')\n"
        "schedule = Schedule(steps=1000, dataset_size=60000, threat='eavesdropper')\n"
        "result = calibrate(1.0, 1e-5, release, schedule, 'best')\n"
        "account(release.with_noise_multiplier(result.noise_multiplier), schedule, 1e-5, 'rdp')\n"
        "assert 'dp_accounting' not in sys.modules, sorted(m for m in sys.modules if "
        "m.startswith('dp_accounting'))\n"
        "print(result.noise_multiplier)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 0


def test_round_off_in_the_fractional_series_never_gives_epsilon_0():
    """Fuzzing found epsilon 0 (dp-accounting's too, with its "negative Renyi divergence"
    warning) for one release at q = 2.9e-8, z = 2154, delta 2.1e-17: the fractional orders'
    values are round-off there (one came out negative). The exact delta at epsilon 0 is
    q (2 Phi(1/(2z)) - 1) = 5.4e-12, far above delta, so epsilon must be positive; privzv now
    bounds such orders by the next integer order and leaves negative values out."""
    from privzv import gdp

    q, z, delta = 2.933456125188687e-08, 2154.3697114701895, 2.0891981409205023e-17
    assert q * gdp.delta_from_epsilon(0.0, 1.0 / z) > 1e5 * delta
    values = rdp.gaussian_rdp(z, rdp.DEFAULT_ORDERS, q)
    assert np.all(values > 0)
    assert rdp.epsilon(rdp.DEFAULT_ORDERS, values, delta) > 0
    orders = np.array([1.5, 2.0])  # a negative value is left out, not read as epsilon 0
    assert (
        rdp.epsilon(orders, np.array([-1e-27, 1e-3]), 1e-5)
        == rdp.epsilon(orders, np.array([math.inf, 1e-3]), 1e-5)
        > 0
    )


@pytest.mark.parametrize(
    "q, z, alpha",
    [
        (0.01, 50.0, 1.1),
        (0.01, 50.0, 2.5),
        (0.1, 1.0, 1.5),
        (0.1, 1.0, 7.3),
        (256 / 60000, 0.8, 3.7),
        (2.933456125188687e-08, 2154.3697114701895, 1.3),
    ],
)
def test_fractional_orders_bound_the_exact_renyi_divergence(q, z, alpha):
    """log A_alpha = log E_{x ~ N(0, z^2)} (1 - q + q e^{(2x - 1) / (2 z^2)})^alpha (Mironov,
    Talwar & Zhang 2019, add-remove, sensitivity 1) by 40-digit quadrature: privzv's trapezoid
    sum is above it by at most its margins (1e-9 relative, 1e-18 absolute) and the float sum's
    rounding bound (``rdp._row_log_sums``: 2.7e-9 relative at q 0.01, z 50, order 1.1)."""
    import mpmath as mp

    with mp.workdps(40):
        zz, qq = mp.mpf(z), mp.mpf(q)
        integrand = lambda x: mp.npdf(x, 0, zz) * (1 - qq + qq * mp.exp((2 * x - 1) / (2 * zz * zz))) ** alpha  # noqa: E731
        exact = float(mp.log(mp.quad(integrand, [-mp.inf, 0, 0.5, 1, mp.inf])) / (alpha - 1))
    ours = float(rdp.gaussian_rdp(z, np.array([alpha]), q)[0])
    assert exact <= ours <= exact * (1 + 5e-9) + 2e-18
