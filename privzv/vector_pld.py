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
(``tests/privzv/test_vector_pld.py`` compares the two). The composition and the epsilon walk
are :mod:`privzv.tilted_pld`.

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
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss


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
