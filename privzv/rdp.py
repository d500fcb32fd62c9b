"""Renyi DP of the (Poisson-sampled) Gaussian mechanism and its conversion to (epsilon, delta),
over numpy arrays of orders, without importing dp-accounting (whose import costs about 2 s).

The formulas are dp-accounting 0.6's ``rdp_privacy_accountant`` (``tests/privzv/test_rdp.py``
compares the two over a sweep of q, z, k and delta):

- plain Gaussian of noise multiplier z: RDP alpha / (2 z^2);
- Poisson-sampled Gaussian, add-remove: log(A_alpha) / (alpha - 1) (Mironov, Talwar & Zhang
  2019, "Renyi differential privacy of the sampled Gaussian mechanism", arXiv:1908.10530): for
  integer alpha, A_alpha = sum_i C(alpha, i) q^i (1-q)^(alpha-i) e^{(i^2 - i) / (2 z^2)} (their
  Sec. 3.2), summed as 1 + sum_i C(alpha, i) q^i (1-q)^(alpha-i) expm1(...) unless a term
  exceeds e^600, which keeps the digits dp-accounting's log-sum-exp loses near A_alpha = 1; for
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


def _row_log_sums(log_w: np.ndarray, w: np.ndarray, e: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """log(sum w e^e) over each row (consecutive runs of ``lengths`` entries, each at least one),
    w = e^{log_w} weights that sum to about 1 in each row, as log1p(sum w expm1(e)), floored at 0:
    this keeps the digits a log-sum-exp loses near a sum of 1 (it sums numbers near 1, an absolute
    error of n ulps). A term is w expm1(e) where |e| < 1, else e^{log_w + e} - w (no cancellation,
    and no term lost to w underflowing). A row with a term above e^600 (its sum might overflow)
    is a plain log-sum-exp instead: its log is above 600, where n ulps are relatively negligible.
    Each other sum gets a bound on its rounding added (below), so that it is never below the sum of
    the computed terms."""
    starts = np.cumsum(lengths) - lengths
    t = log_w + e
    top = np.maximum.reduceat(t, starts)
    big = top > 600.0
    element = np.repeat(big, lengths)
    terms = np.exp(t - np.repeat(np.where(big, top, 0.0), lengths)) - np.where(element, 0.0, w)
    near = (np.abs(e) < 1.0) & ~element
    terms[near] = w[near] * np.expm1(e[near])
    # plus a bound on the float sum's rounding, (n + 4) u sum |terms| (Higham 2002, "Accuracy and
    # Stability of Numerical Algorithms", eq. (4.4), recursive summation; 4 ulps a term): the
    # terms cancel where e < 0, so it can exceed the absolute margin; never below the exact sum
    slack = (lengths + 4.0) * 2.0**-53 * np.add.reduceat(np.abs(terms), starts)
    sums = np.add.reduceat(terms, starts) + slack
    with np.errstate(invalid="ignore", divide="ignore"):  # the branch not taken
        return np.where(big, top + np.log(sums), np.log1p(np.maximum(sums, 0.0)))


def _log_a_integer(q: float, z: float, alphas: np.ndarray) -> np.ndarray:
    """log A_alpha at each integer order: log1p(sum_i C(alpha, i) q^i (1-q)^(alpha-i) expm1((i^2 -
    i) / (2 z^2))): the binomial weights sum to 1, so A_alpha - 1 is a sum of non-negative terms,
    accurate to a few ulps even where A_alpha is 1 + 1e-15 (dp-accounting sums the log terms,
    which loses the digits below 1e-16 of A_alpha). All orders in one pass."""
    lengths = alphas.astype(int) + 1
    alpha = np.repeat(alphas, lengths)
    i = np.arange(alpha.size) - np.repeat(np.cumsum(lengths) - lengths, lengths).astype(float)
    log_weights = _log_comb(alpha, i) + i * math.log(q) + (alpha - i) * math.log1p(-q)
    exponent = (i * i - i) / (2.0 * z * z)
    return _row_log_sums(log_weights, np.exp(log_weights), exponent, lengths)


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
        integer = orders % 1.0 == 0.0
        out = np.empty(orders.shape)
        out[integer] = _log_a_integer(sampling_rate, z, orders[integer]) / (orders[integer] - 1.0)
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

    The integrand e^h (x mirrored for add-remove) is smooth; h' >= -c - x left of -c, with c =
    alpha a for add-remove and c = alpha a + (alpha - 1) a s(-alpha a) for replace-one, s = (log
    Q/phi)' / a in (0, 1) increasing (c = alpha a missed the mass at q near 1: 1.2e-3 of the value
    at q = 0.99, z = 5, alpha = 256), and h' <= -x right of 0; so the mass outside [-c - 15, 15]
    is below e^{-112} of the peak's, and the trapezoid rule converges geometrically (Trefethen &
    Weideman 2014, "The exponentially convergent trapezoidal rule", SIAM Review 56(3), Sec. 5);
    margins of 1e-9 relative and 1e-18 absolute keep the value an upper bound. The integral is
    summed as 1 + sum phi expm1(g) (:func:`_row_log_sums`; a log-sum-exp of terms summing to
    about 1 loses n ulps of 1, far above the margins where the divergence is 1e-14). All orders
    share one lattice of step 0.1 (the largest order's; each order's grid is its slice from -c -
    a - 15) and log p, log q, computed once (they do not depend on the order); the orders' sums
    are ragged slices of one array. Orders with c beyond 2000 noise units give inf (a valid,
    useless bound)."""
    from privzv.gaussian_pmf import _log1p_mix

    orders = np.asarray(orders, dtype=float)
    a = (1.0 if pair == "add-remove" else 0.5) / z
    shift = -0.5 * a * a
    out = np.full(orders.shape, np.inf)
    reach = orders * a  # the integrand increases left of -reach (docstring)
    if pair != "add-remove":
        reach = reach + (orders - 1.0) * a * special.expit(special.logit(q) - (orders + 0.5) * a * a)
    live = reach <= _MAX_REACH
    if not np.any(live):
        return out
    alphas = orders[live]
    starts = -reach[live] - a - _HALF_WIDTH
    # the largest order's lattice; every other order's is its slice x >= that order's start
    x = np.arange(starts.min(), a + _HALF_WIDTH, _STEP)
    # log(p/phi) and log(q/phi), phi the N(0,1) density, at -x for add-remove (mirrored so that
    # the mass sits at negative x in both cases): small where the two are close
    log_p = _log1p_mix(q, shift - a * x)
    log_r = None if pair == "add-remove" else _log1p_mix(q, shift + a * x)
    log_phi = -0.5 * x * x - 0.5 * math.log(2.0 * math.pi) + math.log(_STEP)
    phi = np.exp(log_phi)
    first = np.searchsorted(x, starts)
    lengths = x.size - first
    # row j is x[first[j]:], entry i of the concatenated rows x[col[i]]
    col = np.arange(lengths.sum()) + np.repeat(first - (np.cumsum(lengths) - lengths), lengths)
    alpha = np.repeat(alphas, lengths)
    g = alpha * log_p[col]  # log of the integrand over phi
    if log_r is not None:
        g += (1.0 - alpha) * log_r[col]
    value = _row_log_sums(log_phi[col], phi[col], g, lengths) / (alphas - 1.0)
    out[live] = value * (1.0 + _MARGIN[0]) + _MARGIN[1]
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
