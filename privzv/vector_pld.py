"""dp-accounting's pessimistic PLD of a (Poisson-sampled) Gaussian, built with numpy arrays.

dp-accounting 0.6 builds the connect-the-dots PLD of a Gaussian (Doroshenko, Ghazi, Kamath,
Kumar & Manurangsi 2022, "Connect the dots: tighter discrete approximations of privacy loss
distributions", PETS, Algorithm 1) by evaluating the hockey-stick divergence delta(eps_i) on
every grid point eps_i = i * Delta. Its ``GaussianPrivacyLoss.get_delta_for_epsilon`` inverts the
privacy loss one grid point at a time in a Python loop (``inverse_privacy_loss``), which is
about 90% of a PLD evaluation at small noise multipliers (4e5 points: seconds).
:class:`ArrayGaussianPrivacyLoss` is the same class with that inverse written over arrays; the
formulas are dp-accounting's own (``privacy_loss_mechanism.py``: ``_inverse_privacy_loss_add``,
``_remove``, ``_replace`` and ``common.asinh_exp``), term by term, and its hockey-stick values
cancel the sampled pair's shared part in closed form (more precise than dp-accounting's, see
``_sampled_hockey_stick``), so the PLD is dp-accounting's up to floating-point rounding
(``tests/privzv/test_vector_pld.py`` compares the two). Also here: dp-accounting's epsilon walk
(:func:`epsilon_for_delta`) and FFT self-composition over arrays, a two-stage composition for
many releases (:func:`self_compose`, :func:`coarsen`) and an FFT round-off estimate
(:func:`round_off_slack`).

The privacy loss of the pair (Balle & Wang 2018 for the Gaussian; dp-accounting's docstrings for
the sampled pairs), with sensitivity s, noise sigma and sampling rate q:

- REMOVE: L(x) = log((1-q) + q e^{l(x)}), l(x) = s(-s/2 - x)/sigma^2, so
  x(eps) = -s/2 - sigma^2/s log(1 + (e^eps - 1)/q) for eps > log(1-q);
- ADD: L(x) = -log((1-q) + q e^{-l(x - s)}), so x(eps) = s - s/2 + sigma^2/s log(1 + (e^-eps -
  1)/q) for eps < -log(1-q);
- REPLACE: x(eps) = sigma^2/s (asinh(-sinh(eps/2) alpha) - eps/2), alpha = e^{s^2/(2 sigma^2)}
  (1-q)/q.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import fft
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

# from this many compositions on, self_compose works in two stages
STAGED_FROM = 10_000


class ArrayGaussianPrivacyLoss(GaussianPrivacyLoss):
    """dp-accounting's GaussianPrivacyLoss whose ``get_delta_for_epsilon`` inverts the privacy
    loss over the whole array of epsilons at once (same formulas, no Python loop) and evaluates
    the hockey-stick values without the cancellation of the shared (1-q) N(0, sigma^2) part."""

    def inverse_privacy_losses(self, eps: np.ndarray) -> np.ndarray:
        """``inverse_privacy_loss`` of each entry of ``eps`` (which must lie where
        dp-accounting's ``get_delta_for_epsilon`` inverts: eps > log(1-q) for REMOVE,
        eps < -log(1-q) for ADD)."""
        s, var, q = self.sensitivity, self._standard_deviation ** 2, self.sampling_prob
        eps = np.asarray(eps, dtype=float)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            if self.adjacency_type == AdjacencyType.REPLACE:
                return self._inverse_replace(eps, s, var, q)
            if self.adjacency_type == AdjacencyType.REMOVE:
                loss = eps if q == 1.0 else _log_mix(q, eps)
                if q < 1.0:   # dp-accounting: the boundary log(1-q) maps to x = +inf
                    loss = np.where(np.isclose(eps, math.log1p(-q), rtol=1e-9, atol=0.0),
                                    -np.inf, loss)
                return -0.5 * s - loss * var / s
            loss = eps if q == 1.0 else -_log_mix(q, -eps)
            if q < 1.0:
                loss = np.where(np.isclose(eps, -math.log1p(-q), rtol=1e-9, atol=0.0),
                                np.inf, loss)
            return s + (-0.5 * s - loss * var / s)

    @staticmethod
    def _inverse_replace(eps, s, var, q):
        if q == 1.0:
            return -eps * var / s / 2.0
        log_alpha = 0.5 * s * s / var + math.log1p(-q) - math.log(q)
        half = np.abs(eps) / 2.0
        # log sinh(|eps|/2) = |eps|/2 + log(1 - e^{-|eps|}) - log 2 (common.log_sinh)
        log_sinh = half + np.log1p(-np.exp(-2.0 * half)) - math.log(2.0)
        # asinh(-sign(eps) e^{log_alpha + log_sinh}) (common.asinh_exp)
        log_term = log_alpha + log_sinh
        asinh = -np.sign(eps) * np.logaddexp(0.5 * np.logaddexp(0.0, 2.0 * log_term), log_term)
        return np.where(eps == 0.0, 0.0, var / s * (asinh - eps / 2.0))

    def get_delta_for_epsilon(self, epsilon):
        """dp-accounting's ``get_delta_for_epsilon`` (same cases, same clipping to [0, 1])."""
        is_scalar = np.ndim(epsilon) == 0
        epsilons = np.atleast_1d(np.asarray(epsilon, dtype=float))
        deltas = np.zeros_like(epsilons)
        q = self.sampling_prob
        if q == 1.0 or self.adjacency_type == AdjacencyType.REPLACE:
            inverse = np.full(epsilons.shape, True)
        elif self.adjacency_type == AdjacencyType.ADD:
            inverse = epsilons < -math.log1p(-q)
        else:
            inverse = epsilons > math.log1p(-q)
            deltas[~inverse] = -np.expm1(epsilons[~inverse])
        x = self.inverse_privacy_losses(epsilons[inverse])
        if q == 1.0:
            deltas[inverse] = (self.mu_upper_cdf(x)
                               - np.exp(epsilons[inverse] + self.mu_lower_log_cdf(x)))
        else:
            deltas[inverse] = self._sampled_hockey_stick(epsilons[inverse], x)
        deltas = np.clip(deltas, 0.0, 1.0)
        return float(deltas[0]) if is_scalar else deltas


    def _sampled_hockey_stick(self, eps: np.ndarray, x: np.ndarray) -> np.ndarray:
        """delta(eps) = mu_upper(X <= x) - e^eps mu_lower(X <= x) at x = x(eps), with the
        (1-q) N(0, sigma^2) parts that mu_upper and mu_lower share cancelled in closed form
        (Phi the standard normal CDF, u = x/sigma, a = s/sigma):

        - REMOVE: q Phi(u + a) - (e^eps - 1 + q) Phi(u)
        - ADD: (q - (1-q)(e^eps - 1)) Phi(u) - q e^eps Phi(u - a)
        - REPLACE: q Phi(u + a) - (1-q)(e^eps - 1) Phi(u) - q e^eps Phi(u - a)

        dp-accounting subtracts the two CDFs whole, which leaves a rounding error of about 1e-16
        in delta; here every term is O(q), so the error is about q 1e-16. The connect-the-dots
        masses divide second differences of delta by the grid step, so this is what lets the
        grid get fine enough for 1e8 releases at small q."""
        from scipy.special import log_ndtr, ndtr

        q, sd, s = self.sampling_prob, self._standard_deviation, self.sensitivity
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            u = x / sd
            big = eps > 1.0
            log_expm1 = np.where(big, eps + np.log1p(-np.exp(-eps)),
                                 np.log(np.abs(np.expm1(np.minimum(eps, 1.0)))))
            log_shifted_down = math.log(q) + eps + log_ndtr(u - s / sd)    # q e^eps Phi(u - a)
            if self.adjacency_type == AdjacencyType.REMOVE:
                # log(e^eps - 1 + q), eps > log(1-q)
                log_coef = np.where(big, eps + np.log1p(-(1.0 - q) * np.exp(-eps)),
                                    np.log(np.expm1(np.minimum(eps, 1.0)) + q))
                return q * ndtr(u + s / sd) - np.exp(log_coef + log_ndtr(u))
            if self.adjacency_type == AdjacencyType.ADD:   # eps < -log(1-q): coefficient > 0
                return ((q - (1.0 - q) * np.expm1(eps)) * ndtr(u)
                        - np.exp(log_shifted_down))
            # REPLACE: (1-q)(e^eps - 1) Phi(u), in log space where it could overflow
            shared = np.sign(eps) * np.exp(math.log1p(-q) + log_expm1 + log_ndtr(u))
            return q * ndtr(u + s / sd) - np.where(eps == 0.0, 0.0, shared) - np.exp(
                log_shifted_down)


def _log_mix(q: float, eps: np.ndarray) -> np.ndarray:
    """log(1 + (e^eps - 1)/q) = log((1/q) e^eps - (1/q - 1)) for eps > log(1-q), computed as
    dp-accounting's ``common.log_a_times_exp_b_plus_c`` does (``_log_sub``: d + log(1 - e^{b-d}),
    d = eps + log(1/q), b = log(1/q - 1))."""
    d = eps + np.log(1.0 / q)
    return d + np.log1p(-np.exp(np.log(1.0 / q - 1.0) - d))


def _connect_dots_pmf(loss: ArrayGaussianPrivacyLoss, discretization: float) -> pld_pmf.PLDPmf:
    """dp-accounting's continuous connect-the-dots branch of
    ``_create_pld_pmf_from_monotone_privacy_loss`` (pessimistic)."""
    bounds = loss.connect_dots_bounds()
    upper = math.ceil(bounds.epsilon_upper / discretization)
    lower = math.floor(bounds.epsilon_lower / discretization)
    deltas = loss.get_delta_for_epsilon(np.arange(lower, upper + 1) * discretization)
    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(discretization, lower, upper,
                                                                 deltas)


def gaussian_pld(standard_deviation: float, *, sampling_prob: float, replace_one: bool,
                 discretization: float, log_mass_truncation_bound: float
                 ) -> pld.PrivacyLossDistribution:
    """``pld.from_gaussian_mechanism(standard_deviation, sensitivity=1, pessimistic_estimate=True,
    value_discretization_interval=discretization, log_mass_truncation_bound=...,
    sampling_prob=..., neighboring_relation=REPLACE_ONE if replace_one else ADD_OR_REMOVE_ONE)``,
    built over arrays."""
    def pmf(adjacency):
        return _connect_dots_pmf(ArrayGaussianPrivacyLoss(
            standard_deviation, sensitivity=1.0, pessimistic_estimate=True,
            log_mass_truncation_bound=log_mass_truncation_bound, sampling_prob=sampling_prob,
            adjacency_type=adjacency), discretization)

    if replace_one:
        return pld.PrivacyLossDistribution(pmf(AdjacencyType.REPLACE))
    remove = pmf(AdjacencyType.REMOVE)
    if sampling_prob == 1.0:
        return pld.PrivacyLossDistribution(remove)
    return pld.PrivacyLossDistribution(remove, pmf(AdjacencyType.ADD))


def epsilon_for_delta(distribution: pld.PrivacyLossDistribution, delta: float) -> float:
    """``distribution.get_epsilon_for_delta(delta)`` (the larger of the remove and the add PMF's),
    with dp-accounting's loop over the privacy-loss grid (``pld_pmf._get_epsilon_for_delta``, a
    Python loop, seconds for 1e6 points) written as cumulative sums. PMFs that are not dense
    go to dp-accounting."""
    # pylint: disable=protected-access
    pmfs = [distribution._pmf_remove]
    if not distribution._symmetric:
        pmfs.append(distribution._pmf_add)
    return max(_pmf_epsilon(pmf, delta) if isinstance(pmf, pld_pmf.DensePLDPmf)
               else pmf.get_epsilon_for_delta(delta) for pmf in pmfs)


def _pmf_epsilon(pmf: pld_pmf.DensePLDPmf, delta: float) -> float:
    """dp-accounting's ``_get_epsilon_for_delta`` for a dense PMF. Walking the losses l_i from
    the top, with U_i = inf mass + sum_{j<i} p_j and L_i = sum_{j<i} e^{-l_j} p_j (the masses of
    the upper and lower distribution above l_i): epsilon = log((U_i - delta)/L_i) at the first i
    where that is >= l_i (the hockey-stick divergence U - e^eps L reaches delta inside the
    i-th gap), and 0 where U - delta <= L there; the top loss in dp-accounting's corner case
    where L underflows to 0."""
    # pylint: disable=protected-access
    inf_mass = pmf._infinity_mass
    if inf_mass > delta:
        return math.inf
    probs = np.flip(pmf._probs)
    n = len(probs)
    if n == 0:
        return 0.0
    losses = (pmf._lower_loss + n - 1 - np.arange(n)) * pmf._discretization
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        weights = np.where(probs != 0.0, np.exp(-losses) * probs, 0.0)
        upper = np.cumsum(np.concatenate(([inf_mass], probs)))      # U_0 .. U_n
        lower = np.cumsum(np.concatenate(([0.0], weights)))         # L_0 .. L_n
        log_ratio = np.log((upper[:-1] - delta) / lower[:-1])
        stop = (upper[:-1] > delta) & (lower[:-1] > 0.0) & (log_ratio >= losses)
    corner = (upper[1:] >= delta) & (lower[1:] == 0.0)   # checked after adding element i
    i_stop = int(np.argmax(stop)) if stop.any() else n
    i_corner = int(np.argmax(corner)) if corner.any() else n
    used = min(i_stop, i_corner + 1)   # dp-accounting evaluated exp(-l_j) for j < used
    if used > 0 and -losses[used - 1] > 709.78:
        raise OverflowError("math range error")   # where dp-accounting's math.exp overflows
    if i_corner < i_stop:
        return max(0.0, float(losses[i_corner]))
    end = min(i_stop, n)   # the masses where the walk stopped (or all of them)
    if upper[end] <= lower[end] + delta:
        return 0.0
    return math.log((upper[end] - delta) / lower[end])


def coarsen(pmf: pld_pmf.DensePLDPmf, factor: int) -> pld_pmf.DensePLDPmf:
    """The PMF moved onto the grid ``factor`` times coarser, pessimistically and exactly.

    Each atom p at loss l, between the coarse grid points a <= l < b = a + D, is split into
    p_b = p (e^{-(l-a)} - 1) / (e^{-D} - 1) at b and p_a = p - p_b at a: the split keeps both the
    upper distribution's mass (p_a + p_b = p) and the lower one's (p_a e^{-a} + p_b e^{-b} =
    p e^{-l}), so merging a and b back into l maps the new pair onto the old one. The old pair is
    thus a post-processing of the new one, which dominates it (every hockey-stick divergence is at
    least as large): Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022 (connect-the-dots, PETS),
    applied to a discrete PLD. Infinity mass is kept."""
    # pylint: disable=protected-access
    if factor == 1:
        return pmf
    fine = pmf._lower_loss + np.arange(len(pmf._probs))
    coarse = np.floor_divide(fine, factor)
    offset = (fine - coarse * factor) * pmf._discretization           # l - a in [0, D)
    upper_share = np.expm1(-offset) / math.expm1(-factor * pmf._discretization)
    to_b = pmf._probs * upper_share
    base = int(coarse[0])
    index, size = coarse - base, int(coarse[-1]) - base + 2
    probs = (np.bincount(index, weights=pmf._probs - to_b, minlength=size)
             + np.bincount(index + 1, weights=to_b, minlength=size))
    return pld_pmf.DensePLDPmf(pmf._discretization * factor, base, probs, pmf._infinity_mass,
                               pmf._pessimistic_estimate)


class GridTooLarge(Exception):
    """A composition would need more grid points than allowed."""


def _self_compose(pmf: pld_pmf.DensePLDPmf, times: int, tail: float,
                  max_points: int) -> pld_pmf.DensePLDPmf:
    """dp-accounting's ``DensePLDPmf.self_compose`` (``common.self_convolve``: the FFT to the
    power ``times`` on the range that dp-accounting's Chernoff bounds keep, truncated tails to
    the infinity mass), with those bounds computed in numpy and checked against ``max_points``
    (GridTooLarge) before the FFT."""
    # pylint: disable=protected-access
    if times == 1:
        return pmf
    probs = pmf._probs
    lower, upper = _self_convolve_bounds(probs, times, tail)
    size = upper - lower + 1
    if size > max_points:
        raise GridTooLarge(f"{size:.3g} points after {times} compositions")
    fast = fft.next_fast_len(max(size, len(probs)))
    powered = np.real(fft.ifft(fft.fft(probs, fast) ** times))
    out = np.roll(powered, -lower)[:size]
    infinity = tail - math.expm1(times * math.log1p(-pmf._infinity_mass))
    return pld_pmf.DensePLDPmf(pmf._discretization, pmf._lower_loss * times + lower, out,
                               infinity, pmf._pessimistic_estimate)


def _self_convolve_bounds(probs: np.ndarray, times: int, tail: float) -> tuple[int, int]:
    """dp-accounting's ``common.compute_self_convolve_bounds`` at its default orders (Chernoff:
    the mass beyond them is at most ``tail``), its log-sum-exp written in numpy."""
    n = len(probs)
    upper, lower = (n - 1) * times, 0
    index = np.arange(n)
    for order in np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / n:
        exponent = index * order
        top = exponent[probs != 0].max()
        with np.errstate(divide="ignore", invalid="ignore"):
            log_mgf = math.log(float(np.sum(probs * np.exp(exponent - top)))) + top
            bound = (times * log_mgf + math.log(2.0 / tail)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        else:
            lower = max(lower, math.floor(bound))
    return lower, upper


def self_compose(distribution: pld.PrivacyLossDistribution, times: int, tail: float,
                 max_points: int) -> pld.PrivacyLossDistribution:
    """``distribution`` composed ``times`` times, in two stages for many compositions.

    For k = ``times`` >= STAGED_FROM: m = floor(sqrt(k)) releases are composed at the fine
    grid, the result is moved onto a grid c = floor(sqrt(m)) times coarser (:func:`coarsen`,
    pessimistic and exact), and that is composed k // m times (plus the k mod m remaining
    releases, coarsened too). The pessimistic rounding of a PLD moves epsilon by about
    (number of compositions) x (grid step)^2, so both stages add about k Delta^2, while the
    coarse stage needs sqrt(m) times fewer points: the composed grid of 1e8 releases shrinks
    from about 1e7 points to 1e5. Every step keeps an upper bound. Each FFT's output size is
    checked first (GridTooLarge above ``max_points``); truncated tails (``tail`` each) go to the
    infinity mass, as dp-accounting does."""
    # pylint: disable=protected-access
    def compose(pmf):
        pmf = pmf.to_dense_pmf()
        if times < STAGED_FROM:
            return _self_compose(pmf, times, tail, max_points)
        m = math.isqrt(times)
        factor = math.isqrt(m)
        rounds, rest = divmod(times, m)
        staged = _self_compose(coarsen(_self_compose(pmf, m, tail, max_points), factor),
                               rounds, tail, max_points)
        if rest:
            staged = staged.compose(coarsen(_self_compose(pmf, rest, tail, max_points),
                                            factor), tail_mass_truncation=tail)
        return staged

    if distribution._symmetric:
        return pld.PrivacyLossDistribution(compose(distribution._pmf_remove))
    return pld.PrivacyLossDistribution(compose(distribution._pmf_remove),
                                       compose(distribution._pmf_add))


def round_off_slack(distribution: pld.PrivacyLossDistribution, above: float = -math.inf) -> float:
    """An estimate of how far FFT round-off can move a composed PLD's delta(eps) for eps >=
    ``above``: the number of grid points with a loss above ``above`` times the largest negative
    mass (true masses are >= 0, so a negative one is pure round-off and shows its level; FFT
    round-off is spread evenly over the grid), the larger over the remove and add PMFs."""
    # pylint: disable=protected-access
    pmfs = [distribution._pmf_remove] + ([] if distribution._symmetric
                                         else [distribution._pmf_add])
    slack = 0.0
    for p in pmfs:
        if not isinstance(p, pld_pmf.DensePLDPmf) or not len(p._probs):
            continue
        first = math.floor(above / p._discretization) - p._lower_loss if math.isfinite(
            above) else 0
        count = len(p._probs) - min(max(first, 0), len(p._probs))
        slack = max(slack, count * max(0.0, -float(np.min(p._probs))))
    return slack


def epsilon_with_round_off(distribution: pld.PrivacyLossDistribution, delta: float) -> float:
    """The smaller of two epsilons that stay upper bounds under the FFT round-off estimate of
    :func:`round_off_slack`: epsilon at delta minus the whole grid's slack (when that is at most
    delta / 2), and epsilon at delta / 2 when the points above it carry at most delta / 2 of
    slack. RoundOffTooLarge when neither holds."""
    candidates = []
    whole = round_off_slack(distribution)
    if whole <= 0.5 * delta:
        candidates.append(epsilon_for_delta(distribution, delta - whole))
    half = epsilon_for_delta(distribution, 0.5 * delta)
    if round_off_slack(distribution, above=half) <= 0.5 * delta:
        candidates.append(half)
    if not candidates:
        raise RoundOffTooLarge(f"the FFT round-off of the composed PLD (~{whole:.2g}) is not "
                               f"small against delta {delta:g}")
    return min(candidates)


class RoundOffTooLarge(Exception):
    """The composed PLD's FFT round-off reaches delta."""
