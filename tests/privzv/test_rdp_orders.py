"""privzv.rdp over many orders at once: the quadrature (:func:`privzv.rdp.sampled_pair_renyi`) and
the integer-order series compute every order in one pass, on one lattice, and stay upper bounds
of the exact Renyi divergence (40-digit references)."""

import itertools

import mpmath as mp
import numpy as np
import pytest

from privzv import gaussian_pmf, rdp

# the fuzz's slow rdp rows (benchmarks/fuzz_accounting.py rows 37, 207, 283: replace-one, the noise
# multipliers their calibrations try) and the corners the module names (q = 2.9e-8, z = 2154)
QS = (
    2.933456125188687e-08,
    1.7686189256905197e-08,
    4.949017365714332e-08,
    1e-6,
    1.1608432205696822e-4,
    0.01,
    0.5,
    0.99,
)
ZS = (2154.3697114701895, 1e4, 5.0, 1.0, 0.3, 0.17, 0.0342, 0.0286, 0.003)


@pytest.mark.parametrize("pair", ["add-remove", "replace-one"])
def test_all_orders_at_once_equal_each_order_on_its_own_grid(pair):
    """One order alone is computed on its own grid (from its own start); all of dp-accounting's
    orders at once on one shared lattice. The two differ only by the trapezoid rule's shift and
    round-off and the rounding bound added to each sum (``rdp._row_log_sums``; it depends on the
    grid): 1e-12 relative, or 5e-18 absolute where the integral's sum cancels (values of 1e-9 and
    below); inf (beyond 2000 noise units) alike."""
    orders, mixed = rdp.DEFAULT_ORDERS, 0
    some = np.r_[0 : len(orders) : 7, len(orders) - 4 : len(orders)]  # 23 of them, 1.1 to 1024
    for q, z in itertools.product(QS, ZS):
        together = rdp.sampled_pair_renyi(q, z, orders, pair)[some]
        alone = np.array([rdp.sampled_pair_renyi(q, z, [alpha], pair)[0] for alpha in orders[some]])
        np.testing.assert_array_equal(np.isinf(together), np.isinf(alone))
        finite = np.isfinite(alone)
        mixed += bool(finite.any() and not finite.all())
        np.testing.assert_allclose(
            together[finite], alone[finite], rtol=1e-12, atol=5e-18, err_msg=f"{q} {z}"
        )
    assert mixed >= 10  # the grid has orders beyond 2000 noise units beside finite ones


@pytest.mark.parametrize("pair, calls", [("add-remove", 1), ("replace-one", 2)])
def test_the_mixture_logs_are_computed_once_not_per_order(monkeypatch, pair, calls):
    """log p and log q do not depend on the order: one evaluation each for all 156 orders (the
    per-order loop made 156 and 312)."""
    seen = []
    original = gaussian_pmf._log1p_mix

    def counting(q, x):
        seen.append(len(x))
        return original(q, x)

    monkeypatch.setattr(gaussian_pmf, "_log1p_mix", counting)
    values = rdp.sampled_pair_renyi(1.16e-4, 0.0367, rdp.DEFAULT_ORDERS, pair)
    assert len(seen) == calls and np.isfinite(values).sum() > 100


def _exact_add_remove(q, z, alpha):
    """log A_alpha / (alpha - 1), Mironov, Talwar & Zhang 2019 Sec. 3.2, at 40 digits."""
    with mp.workdps(40):
        q, z = mp.mpf(q), mp.mpf(z)
        terms = (
            mp.binomial(alpha, i) * q**i * (1 - q) ** (alpha - i) * mp.e ** (mp.mpf(i * i - i) / (2 * z * z))
            for i in range(alpha + 1)
        )
        return float(mp.log(mp.fsum(terms)) / (alpha - 1))


@pytest.mark.parametrize(
    "q, z",
    [
        (2.933456125188687e-08, 0.7),
        (2.933456125188687e-08, 1.0),
        (2.933456125188687e-08, 2.0),
        (1e-6, 50.0),
        (1e-4, 2.0),
    ],
)
def test_small_divergences_at_integer_orders_bound_the_exact_value(q, z):
    """Where the divergence is 1e-15 to 1e-8 and large exponents sit in far tails, the quadrature
    (at integer orders, where the exact series exists) stays within [exact, exact (1 + 2e-9) +
    2e-18] and the integer series within 1e-12 relative. A log-sum-exp of terms that sum to about
    1 (the previous rule wherever some exponent was large) gave the quadrature 2.5% below the
    exact value at q = 2.9e-8, z = 1, alpha = 28, 1.5e-9 below at q = 1e-4, z = 2, alpha = 63, and
    the series up to 1e-4 off (below at z = 0.7, alpha = 2)."""
    orders = np.array([2, 3, 10, 28, 63, 128])
    quadrature = rdp.sampled_pair_renyi(q, z, orders.astype(float), "add-remove")
    series = rdp.gaussian_rdp(z, orders.astype(float), q)
    for alpha, quad, ours in zip(orders, quadrature, series):
        exact = _exact_add_remove(q, z, int(alpha))
        assert exact <= quad <= exact * (1 + 2e-9) + 2e-18, alpha
        assert ours == pytest.approx(exact, rel=1e-12, abs=0.0), alpha


@pytest.mark.parametrize("q, z, alpha", [(0.99, 5.0, 256.0), (0.5, 1.0, 20.0), (0.1, 0.3, 63.0)])
def test_replace_one_covers_the_mass_of_large_sampling_rates(q, z, alpha):
    """At q near 1 the replace-one integrand peaks near x = -(2 alpha - 1) a, beyond the grid's
    earlier start -alpha a - a - 15, which lost 1.2e-3 of the value at q = 0.99, z = 5, alpha =
    256: the value stays within [exact, exact (1 + 2e-9) + 2e-18] (40-digit quadrature)."""
    with mp.workdps(30):
        qq, a = mp.mpf(q), mp.mpf(0.5) / mp.mpf(z)
        p = lambda x: (1 - qq) * mp.npdf(x) + qq * mp.npdf(x + a)  # noqa: E731
        r = lambda x: (1 - qq) * mp.npdf(x) + qq * mp.npdf(x - a)  # noqa: E731
        peak = -(2 * alpha - 1) * a
        cuts = [-mp.inf, peak - 20, peak - 5, peak, peak + 5, -alpha * a, 0, mp.inf]
        integral = mp.quad(lambda x: p(x) ** alpha * r(x) ** (1 - alpha), sorted(set(cuts)))
        exact = float(mp.log(integral) / (alpha - 1))
    ours = rdp.sampled_pair_renyi(q, z, [alpha], "replace-one")[0]
    assert exact <= ours <= exact * (1 + 2e-9) + 2e-18
