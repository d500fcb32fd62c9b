"""Renyi DP of the (Poisson-sampled) Gaussian mechanism and its conversion to (epsilon, delta),
over numpy arrays of orders, without importing dp-accounting (whose import costs about 2 s).

The formulas are dp-accounting 0.6's ``rdp_privacy_accountant`` (``tests/privzv/test_rdp.py``
compares the two over a sweep of q, z, k and delta):

- plain Gaussian of noise multiplier z: RDP alpha / (2 z^2);
- Poisson-sampled Gaussian, add-remove: log(A_alpha) / (alpha - 1) (Mironov, Talwar & Zhang
  2019, "Renyi differential privacy of the sampled Gaussian mechanism", arXiv:1908.10530): for
  integer alpha, A_alpha = sum_i C(alpha, i) q^i (1-q)^(alpha-i) e^{(i^2 - i) / (2 z^2)} (their
  Sec. 3.2), summed as 1 + sum_i C(alpha, i) q^i (1-q)^(alpha-i) expm1(...) where that is
  small, which keeps the digits dp-accounting's log-sum-exp loses near A_alpha = 1; for
  fractional alpha not their Sec. 3.3 series (dp-accounting's, which fuzzing found negative
  where the divergence is about 1e-22) but the same integral by quadrature with a margin
  (:func:`sampled_pair_renyi`);
- (epsilon, delta): min over orders of rdp + log1p(-1/alpha) - log(delta alpha) / (alpha - 1)
  (Canonne, Kamath & Steinke 2020, "The discrete Gaussian for differential privacy",
  arXiv:2004.00010, Prop. 12; Asoodeh, Liao, Calmon, Kosut & Sankar 2020, Eq. 20), 0 where
  delta^2 + expm1(-rdp) > 0 (Pinsker-type bound through the KL divergence), inf for
  alpha <= 1.01.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

# dp-accounting's DEFAULT_RDP_ORDERS
DEFAULT_ORDERS = np.array(
    [1.0 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024], dtype=float
)


def _log_comb(n, k):
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


def _log_a_integer(q: float, z: float, alpha: int) -> float:
    """log A_alpha = log1p(sum_i C(alpha, i) q^i (1-q)^(alpha-i) expm1((i^2 - i) / (2 z^2))):
    the binomial weights sum to 1, so A_alpha - 1 is a sum of non-negative terms, accurate to a
    few ulps even where A_alpha is 1 + 1e-15 (dp-accounting sums the log terms, which loses the
    digits below 1e-16 of A_alpha)."""
    i = np.arange(alpha + 1, dtype=float)
    log_weights = _log_comb(float(alpha), i) + i * math.log(q) + (alpha - i) * math.log1p(-q)
    exponent = (i * i - i) / (2.0 * z * z)
    if exponent[-1] > 1.0:  # large terms: plain log-sum-exp, no cancellation to avoid
        return float(special.logsumexp(log_weights + exponent))
    return math.log1p(float(np.sum(np.exp(log_weights) * np.expm1(exponent))))


def gaussian_rdp(z: float, orders=DEFAULT_ORDERS, sampling_rate: float | None = None) -> np.ndarray:
    """RDP of one Gaussian release of noise multiplier z at each order, Poisson-sampled with
    ``sampling_rate`` (None or 1: no sampling); inf where an order does not converge."""
    orders = np.asarray(orders, dtype=float)
    if z == 0.0:
        return np.full(orders.shape, math.inf)
    if sampling_rate is None or sampling_rate == 1.0:
        return orders / (2.0 * z * z)
    if sampling_rate == 0.0:
        return np.zeros(orders.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        integer = np.array([float(a).is_integer() for a in orders])
        out = np.empty(orders.shape)
        out[integer] = [_log_a_integer(sampling_rate, z, int(a)) / (a - 1.0) for a in orders[integer]]
        out[~integer] = sampled_pair_renyi(sampling_rate, z, orders[~integer], "add-remove")
    return np.where(np.isnan(out), math.inf, out)


# Quadrature of sampled_pair_renyi: trapezoid step (in noise units) and half-width around the
# integrand's mass; orders whose integrand sits further out than _MAX_REACH give inf.
_STEP = 0.1
_HALF_WIDTH = 15.0
_MAX_REACH = 2e3
# relative and absolute margin added to the quadrature so the value stays an upper bound
_MARGIN = (1e-9, 1e-18)


def sampled_pair_renyi(q: float, z: float, orders, pair: str) -> np.ndarray:
    """Renyi divergence D_alpha(P || Q) of one Poisson-sampled Gaussian release, by 1-D
    quadrature of log( integral p(x)^alpha q(x)^(1-alpha) dx ) / (alpha - 1), in noise units:

    - "add-remove": P = (1-q) N(0,1) + q N(a,1), Q = N(0,1), a = 1/z: the log A_alpha / (alpha
      - 1) of Mironov, Talwar & Zhang 2019 (the larger of the two directions, their Thm. 5),
      here for fractional orders, where the Sec. 3.3 series (dp-accounting's) loses to
      round-off: fuzzing found it negative at q = 2.9e-8, z = 2154, where dp-accounting then
      answers epsilon 0 (its "negative Renyi divergence" warning) although the exact delta at
      epsilon 0 is 5.4e-12, above the delta of 2e-17 asked for;
    - "replace-one": P = (1-q) N(0,1) + q N(-a,1), Q = (1-q) N(0,1) + q N(a,1), a = 1/(2z)
      (dp-accounting's replace-one pair; P(x) = Q(-x), so one direction suffices).

    The integrand is smooth and decays like a Gaussian around x ~ alpha a (mirrored for
    replace-one), where the trapezoid rule converges geometrically (Trefethen & Weideman 2014,
    "The exponentially convergent trapezoidal rule", SIAM Review 56(3), Sec. 5); margins of 1e-9
    relative and 1e-18 absolute keep the value an upper bound. Orders whose mass lies beyond
    2000 noise units give inf (a valid, useless bound)."""
    from scipy.special import logsumexp

    from privzv.gaussian_pmf import _log1p_mix

    orders = np.asarray(orders, dtype=float)
    a = (1.0 if pair == "add-remove" else 0.5) / z
    shift = -0.5 * a * a
    out = np.full(orders.shape, np.inf)
    for i, alpha in enumerate(orders):
        reach = alpha * a
        if reach > _MAX_REACH:
            continue
        x = np.arange(-reach - a - _HALF_WIDTH, a + _HALF_WIDTH, _STEP)
        # log(p/phi) and log(q/phi), phi the N(0,1) density, at -x for add-remove (mirrored so
        # that the mass sits at negative x in both cases): small where the two are close
        if pair == "add-remove":
            log_p, log_r = _log1p_mix(q, shift - a * x), np.zeros_like(x)
        else:
            log_p, log_r = _log1p_mix(q, shift - a * x), _log1p_mix(q, shift + a * x)
        g = alpha * log_p + (1.0 - alpha) * log_r  # log of the integrand over phi
        log_phi = -0.5 * x * x - 0.5 * math.log(2.0 * math.pi) + math.log(_STEP)
        if g.max() < 700.0:  # integral = 1 + sum phi expm1(g): no cancellation near 1
            log_int = math.log1p(max(float(np.sum(np.exp(log_phi) * np.expm1(g))), 0.0))
        else:
            log_int = float(logsumexp(log_phi + g))
        value = max(log_int, 0.0) / (alpha - 1.0)
        out[i] = value * (1.0 + _MARGIN[0]) + _MARGIN[1]
    return out


def epsilon(orders, rdp, delta: float) -> float:
    """The smallest epsilon over the orders for the composed RDP values ``rdp`` at ``delta``
    (module docstring); inf if no order gives a finite one."""
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    if delta == 0.0:
        return 0.0 if np.all(rdp == 0.0) else math.inf
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        converted = (
            rdp + np.log1p(-1.0 / orders) - math.log(delta) / (orders - 1.0) - np.log(orders) / (orders - 1.0)
        )
        # a negative value cannot be a divergence: that order is left out (dp-accounting answers
        # 0 there, which is not a bound)
        eps = np.where(
            rdp < 0.0,
            math.inf,
            np.where(delta * delta + np.expm1(-rdp) > 0.0, 0.0, np.where(orders > 1.01, converted, math.inf)),
        )
    eps = np.where(np.isnan(eps), math.inf, eps)
    return max(0.0, float(np.min(eps)))
