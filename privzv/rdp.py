"""Renyi DP of the (Poisson-sampled) Gaussian mechanism and its conversion to (epsilon, delta),
over numpy arrays of orders, without importing dp-accounting (whose import costs about 2 s).

The formulas are dp-accounting 0.6's ``rdp_privacy_accountant`` (``tests/privzv/test_rdp.py``
compares the two over a sweep of q, z, k and delta):

- plain Gaussian of noise multiplier z: RDP alpha / (2 z^2);
- Poisson-sampled Gaussian, add-remove: log(A_alpha) / (alpha - 1) (Mironov, Talwar & Zhang
  2019, "Renyi differential privacy of the sampled Gaussian mechanism", arXiv:1908.10530): for
  integer alpha, A_alpha = sum_i C(alpha, i) q^i (1-q)^(alpha-i) e^{(i^2 - i) / (2 z^2)} (their
  Sec. 3.2), summed as 1 + sum_i C(alpha, i) q^i (1-q)^(alpha-i) expm1(...) where that is
  small, which keeps the digits dp-accounting's log-sum-exp loses near A_alpha = 1; for fractional alpha the two series of their Sec. 3.3, summed until both terms
  decrease and are below e^-30 of the total (at most 1000 terms; an order that does not converge
  is left out, which keeps the bound valid);
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
DEFAULT_ORDERS = np.array([1.0 + x / 10.0 for x in range(1, 100)] + list(range(11, 64))
                          + [128, 256, 512, 1024], dtype=float)
_MAX_FRACTIONAL_TERMS = 1000
_CHUNK = 64


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
    if exponent[-1] > 1.0:   # large terms: plain log-sum-exp, no cancellation to avoid
        return float(special.logsumexp(log_weights + exponent))
    return math.log1p(float(np.sum(np.exp(log_weights) * np.expm1(exponent))))


def _log_a_fractional(q: float, z: float, alpha: float) -> float:
    """Sec. 3.3's two series, in chunks, stopped where dp-accounting stops."""
    z0 = z * z * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    totals = (-math.inf, -math.inf)
    last = (-math.inf, -math.inf)
    for start in range(0, _MAX_FRACTIONAL_TERMS, _CHUNK):
        i = np.arange(start, min(start + _CHUNK, _MAX_FRACTIONAL_TERMS), dtype=float)
        j = alpha - i
        log_coef = _log_comb(alpha, i)
        log_e0 = math.log(0.5) + _log_erfc((i - z0) / (math.sqrt(2.0) * z))
        log_e1 = math.log(0.5) + _log_erfc((z0 - j) / (math.sqrt(2.0) * z))
        s0 = log_coef + i * log_q + j * log_1mq + (i * i - i) / (2.0 * z * z) + log_e0
        s1 = log_coef + j * log_q + i * log_1mq + (j * j - j) / (2.0 * z * z) + log_e1
        a0 = np.logaddexp.accumulate(np.concatenate(([totals[0]], s0)))[1:]
        a1 = np.logaddexp.accumulate(np.concatenate(([totals[1]], s1)))[1:]
        total = np.logaddexp(a0, a1)
        prev0 = np.concatenate(([last[0]], s0[:-1]))
        prev1 = np.concatenate(([last[1]], s1[:-1]))
        done = (s0 < prev0) & (s1 < prev1) & (np.maximum(s0, s1) < total - 30.0)
        if done.any():
            return float(total[int(np.argmax(done))])
        totals, last = (float(a0[-1]), float(a1[-1])), (float(s0[-1]), float(s1[-1]))
    return math.inf


def _log_erfc(x):
    return math.log(2.0) + special.log_ndtr(-x * math.sqrt(2.0))


def gaussian_rdp(z: float, orders=DEFAULT_ORDERS, sampling_rate: float | None = None
                 ) -> np.ndarray:
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
        log_a = np.array([_log_a_integer(sampling_rate, z, int(a)) if float(a).is_integer()
                          else _log_a_fractional(sampling_rate, z, float(a)) for a in orders])
        out = log_a / (orders - 1.0)
    return np.where(np.isnan(out), math.inf, out)


def epsilon(orders, rdp, delta: float) -> float:
    """The smallest epsilon over the orders for the composed RDP values ``rdp`` at ``delta``
    (module docstring); inf if no order gives a finite one."""
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    if delta == 0.0:
        return 0.0 if np.all(rdp == 0.0) else math.inf
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        converted = (rdp + np.log1p(-1.0 / orders)
                     - math.log(delta) / (orders - 1.0) - np.log(orders) / (orders - 1.0))
        eps = np.where(rdp < 0.0, 0.0,
                       np.where(delta * delta + np.expm1(-rdp) > 0.0, 0.0,
                                np.where(orders > 1.01, converted, math.inf)))
    eps = np.where(np.isnan(eps), math.inf, eps)
    return max(0.0, float(np.min(eps)))
