"""The four accountants: epsilon of one record's exposure to Gaussian releases.

Every function takes the noise multiplier ``z = sigma / sensitivity``, where ``sensitivity`` is
:attr:`privzv.release.Release.sensitivity`: the largest L2 change of the un-noised message
between neighbouring datasets (2C/B replace-one, C/B add-remove, for a clipped batch mean).

Mapping to dp-accounting (read from its source, version 0.6):

- Without sampling, a Gaussian release of sensitivity s and noise sigma is exactly
  ``GaussianDpEvent(sigma / s)`` under ADD_OR_REMOVE_ONE, whatever our relation is: the PLD of
  a Gaussian depends only on the shift between the two output distributions, and ``s`` is that
  shift. (dp-accounting's REPLACE_ONE Gaussian shifts each side by the noise-multiplier unit, so
  its REPLACE_ONE event with ``2 sigma/s`` is the same distribution; a test checks this.) The
  RDP accountant ignores the relation for a plain Gaussian and reads the multiplier as
  sigma / (full shift), which is again ``z``.
- Poisson sampling, add-remove: ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` (both
  accountants; dp-accounting bounds the remove and the add direction).
- Poisson sampling, replace-one, PLD: dp-accounting's REPLACE_ONE pair for a sampled Gaussian
  with per-record norm bound r is (1-q) N(0, sigma^2) + q N(-r, sigma^2) against
  (1-q) N(0, sigma^2) + q N(+r, sigma^2): the replaced record contributes -r in one dataset and +r
  in the other (dp-accounting ``pld/privacy_loss_mechanism.py``, AdditiveNoisePrivacyLoss
  docstring). Our replace-one sensitivity is 2r, so the event is
  ``PoissonSampledDpEvent(q, GaussianDpEvent(2z))`` under ``NeighboringRelation.REPLACE_ONE``.
  For DPZV's scalar contributions in [-C/B, C/B] these are the extreme contributions.
- Poisson sampling, replace-one, RDP: dp-accounting refuses this event. A replace-one pair
  (D, D') passes through D'' = D without the record, which is add-remove adjacent to both, so
  Mironov's weak triangle inequality for Renyi divergences (Mironov 2017, "Renyi differential
  privacy", Prop. 11 with p = q = 2) gives, per release and order alpha,
  eps_rep(alpha) <= (alpha - 1/2)/(alpha - 1) * eps_ar(2 alpha) + eps_ar(2 alpha - 1),
  where eps_ar is the add-remove RDP of the sampled Gaussian with per-record sensitivity r
  (multiplier 2z). A valid upper bound, looser than the PLD's.

The non-dp-accounting accountants work in Gaussian DP:

- ``seed``: Theorem VI.5 of the DPZV paper, sigma = 2C sqrt(T) / (D mu), i.e.
  mu = (B/D) sqrt(T) / z with z = sigma / (2C/B). It ignores the threat and the devices.
- ``gdp-clt``: Bu, Dong, Long & Su 2020 ("Deep learning with Gaussian differential privacy",
  Harvard Data Science Review 2(3)): the central-limit mu of Poisson-subsampled noisy SGD,
  mu = q sqrt(k (exp(1/z^2) - 1)) (their mu_CLT, e.g. Fig. 4: q = 256/60000, z = 1.06,
  20 epochs gives 0.35; TensorFlow Privacy's ``compute_mu_poisson``). Asymptotic, not a bound;
  without sampling the composition of k Gaussians is exactly sqrt(k)/z-GDP (Dong, Roth & Su
  2022, Cor. 3.3).
"""
from __future__ import annotations

import functools
import logging
import math

import numpy as np

from privzv import gdp
from privzv.threats import Exposure

ACCOUNTANTS = ("pld", "rdp", "gdp-clt", "seed")

# PLD value discretisation used by ``account``: dp-accounting's default, widened for very large
# privacy losses (where the grid would otherwise have millions of points and epsilon is huge).
PLD_DISCRETIZATION = 1e-4


def seed_mu(z: float, batch_size: int, dataset_size: int, steps: int) -> float:
    """mu of Theorem VI.5 (DPZV paper): (B/D) sqrt(T) / z, i.e. 2C sqrt(T) / (D sigma)."""
    return (batch_size / dataset_size) * math.sqrt(steps) / z


def seed_noise_multiplier(mu: float, batch_size: int, dataset_size: int, steps: int) -> float:
    """Inverse of :func:`seed_mu`: z = (B/D) sqrt(T) / mu (sigma = z * 2C/B = 2C sqrt(T)/(D mu))."""
    return (batch_size / dataset_size) * math.sqrt(steps) / mu


def clt_mu(z: float, exposure: Exposure) -> float:
    """Bu et al. 2020's CLT mu = q sqrt(k (e^{1/z^2} - 1)); exactly sqrt(k)/z without sampling.

    Computed in log space, so a tiny z gives inf rather than an overflow error.
    """
    k, q = exposure.compositions, exposure.sampling_rate
    if q is None:
        return math.sqrt(k) / z
    x = 1.0 / (z * z)
    log_expm1 = x + math.log1p(-math.exp(-x)) if x > 1.0 else math.log(math.expm1(x))
    log_mu = math.log(q) + 0.5 * (math.log(k) + log_expm1)
    return math.exp(log_mu) if log_mu < 700 else math.inf


def clt_noise_multiplier(mu: float, exposure: Exposure) -> float:
    """Inverse of :func:`clt_mu`: z = 1 / sqrt(log(1 + mu^2 / (q^2 k))), or sqrt(k)/mu."""
    k, q = exposure.compositions, exposure.sampling_rate
    if q is None:
        return math.sqrt(k) / mu
    return 1.0 / math.sqrt(math.log1p((mu / q) ** 2 / k))


def pld_epsilon(z: float, exposure: Exposure, neighbors: str, delta: float,
                discretization: float | None = None) -> float:
    """Pessimistic PLD epsilon (dp-accounting PLDAccountant) of the exposure; see module docs.

    Without sampling the privacy-loss distribution of k Gaussian releases is itself Gaussian
    (mu = sqrt(k)/z; Dong, Roth & Su 2022, Cor. 3.3) and its (epsilon, delta) curve is the
    closed form of Cor. 2.13 (= Balle & Wang 2018's analytic Gaussian), so it is used exactly.
    With sampling that closed form stays a valid upper bound (subsampling is a randomised
    pre-processing; joint convexity), used where dp-accounting's grid overflows (tiny z).

    ``discretization`` defaults to PLD_DISCRETIZATION * max(1, mu^2) with mu the CLT/exact GDP
    estimate, which keeps the grid small when epsilon is large. The estimate is an upper bound at
    any discretisation (``pessimistic_estimate=True``, dp-accounting's default).
    """
    exact = gdp_epsilon(math.sqrt(exposure.compositions) / z, delta)
    if exposure.sampling_rate is None:
        return exact
    if discretization is None:
        discretization = PLD_DISCRETIZATION * max(1.0, min(clt_mu(z, exposure), 1e4) ** 2)
    try:
        eps = _pld_epsilon(float(z), exposure.compositions, exposure.sampling_rate, neighbors,
                           float(delta), float(discretization))
    except (OverflowError, FloatingPointError):
        return exact
    return min(eps, exact)


@functools.lru_cache(maxsize=4096)
def _pld_epsilon(z, k, q, neighbors, delta, discretization):
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant

    relation = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    event = dpa.GaussianDpEvent(z)
    if q is not None:
        if neighbors == "replace-one":
            relation = dpa.NeighboringRelation.REPLACE_ONE
            event = dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(2.0 * z))
        else:
            event = dpa.PoissonSampledDpEvent(q, event)
    accountant = pld_privacy_accountant.PLDAccountant(
        relation, value_discretization_interval=discretization)
    accountant.compose(event, k)
    return float(accountant.get_epsilon(delta))


def rdp_epsilon(z: float, exposure: Exposure, neighbors: str, delta: float) -> float:
    """RDP epsilon (dp-accounting RdpAccountant, default orders); see module docs for replace-one."""
    return _rdp_epsilon(float(z), exposure.compositions, exposure.sampling_rate, neighbors,
                        float(delta))


@functools.lru_cache(maxsize=4096)
def _rdp_epsilon(z, k, q, neighbors, delta):
    # dp-accounting logs (through absl) each RDP order it cannot evaluate and then leaves out;
    # leaving an order out keeps the bound valid, so silence those lines on the CLI.
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        return _rdp_epsilon_unlogged(z, k, q, neighbors, delta)
    finally:
        absl.setLevel(level)


def _rdp_epsilon_unlogged(z, k, q, neighbors, delta):
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    if q is None or neighbors == "add-remove":
        event = dpa.GaussianDpEvent(z) if q is None else dpa.PoissonSampledDpEvent(
            q, dpa.GaussianDpEvent(z))
        accountant = rdp.RdpAccountant()
        accountant.compose(event, k)
        return float(accountant.get_epsilon(delta))
    # replace-one with Poisson sampling: Mironov 2017, Prop. 11 (p = q = 2), per release.
    orders = np.asarray(rdp.DEFAULT_RDP_ORDERS, dtype=float)
    sampled = functools.partial(rdp._compute_rdp_poisson_subsampled_gaussian, q, 2.0 * z)
    per_release = (orders - 0.5) / (orders - 1.0) * sampled(2.0 * orders) + sampled(
        2.0 * orders - 1.0)
    return float(rdp.compute_epsilon(orders, k * per_release, delta)[0])


def gdp_epsilon(mu: float, delta: float) -> float:
    """epsilon of a mu-GDP mechanism at delta (Dong, Roth & Su 2022, Cor. 2.13); inf for mu=inf.

    mu = 0 (e.g. an underflowed seed mu for huge sigma) is perfect privacy: epsilon 0.
    """
    if mu == 0:
        return 0.0
    return math.inf if math.isinf(mu) else gdp.epsilon_from_delta(mu, delta)
