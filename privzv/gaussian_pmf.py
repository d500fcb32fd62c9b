"""The pessimistic (connect-the-dots) privacy-loss PMF of one (Poisson-sampled) Gaussian release,
with masses accurate to a relative 1e-13, so that composing 1e8 releases stays an upper bound.

The pair, in noise units (u = x / sigma, a = sensitivity / sigma, q the sampling rate; the pairs
of dp-accounting's ``AdditiveNoisePrivacyLoss``, whose ``from_gaussian_mechanism`` builds the same
PMF from hockey-stick values):

- REMOVE: P = (1-q) N(0,1) + q N(-a,1), Q = N(0,1): L(u) = log(1 + q expm1(-a u - a^2/2));
- ADD: P = N(0,1), Q = (1-q) N(0,1) + q N(a,1): L(u) = -log(1 + q expm1(a u - a^2/2));
- REPLACE: P = (1-q) N(0,1) + q N(-a,1), Q = (1-q) N(0,1) + q N(a,1): the difference of the two.

L decreases in u. Connect the dots (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, "Connect
the dots: tighter discrete approximations of privacy loss distributions", PETS, Algorithm 1) puts
an atom of P-mass p at loss l, between grid points l_i <= l <= l_{i+1} = l_i + D, at the two grid
points with shares that keep both its P-mass and its Q-mass p e^{-l}: p (e^{l_{i+1} - l} - 1) /
(e^D - 1) at l_i and the rest at l_{i+1} (:func:`privzv.tilted_pld.coarsen` is the same split of a
discrete PMF). The pair is a post-processing of the result, which therefore dominates it.
dp-accounting computes these masses as second differences of hockey-stick values, which leaves
an absolute error of about 1e-16 / D in each: composing 1e8 releases multiplies that by 1e8, so
accounting at that many releases had to keep the grid coarse (a "round-off floor"). Here each
mass is an integral of a positive integrand over u, by 3-point Gauss-Legendre on pieces short
enough for its remainder to be negligible, so every mass has a small RELATIVE error:

- quadrature: the Gauss-Legendre remainder (Abramowitz & Stegun 25.4.30) of n = 3 points on a
  piece of width w is w^7 (3!)^4 / (7 (6!)^3) f^(6), about 5e-7 w^7 f^(6); the integrand is a
  Gaussian density, whose sixth derivative is at most about (|u| + 3)^6 times its size, times a
  split share (e^{c - L(u)} - 1) / (e^D - 1), c a grid point, whose sixth derivative is about
  |L'|^6 e^{c - L} / (e^D - 1), |L'| <= a: up to 1 / (e^D - 1) times larger than the share near a
  bucket's edge. Pieces of width w <= 0.05 / (|u| + 2a + 3) keep the density's part under
  5e-7 0.05^6 = 8e-15 of the piece's mass. For the share's part, a piece never crosses a cut
  point (the pieces are cut at every grid loss), so it also spans at most one bucket, w a <= D as
  well as w a <= 0.025; summed over a bucket of u-width about D / a, against the bucket's mass
  (about the density times D / a), its remainder is about 1e-6 (w a)^6 / D <= 1e-6 min(D,
  0.025)^6 / D <= 1e-14 relative (QUADRATURE_ERROR allows 1e-13);
- round-off: each node's density and share are a few float64 operations (at most about
  (64 + u^2) ulps, the u^2 from exp(-u^2 / 2)).

The returned masses are multiplied by 1 + r, r the sum of the two, which makes them entrywise
upper bounds; composing k releases multiplies delta by at most (1 + r)^k (1e-5 for k = 1e8).
What remains is where the atoms sit. A node's split share is computed from its loss L(u), whose
absolute error is a few ulps of a (|u| + a) (the size of the exponent it is computed from); the
computed share is then the exact share of an atom at the computed loss. A share is clipped to
[0, 1] where the grid's cut point u_i (L(u_i) = l_i) is off, which moves the atom by at most the
cut point's error in loss (measured here by evaluating L at the cut points). So the computed PMF
is the exact split of the pair with every loss moved by at most ``loss_shift``, and it
dominates the pair once its losses are raised by that much: k releases move epsilon by at most
k ``loss_shift`` (added by the caller; 1e-9 of epsilon or less at T = 1e8). Tails: the P-mass below the truncation point U_lo (at most e^{log_truncation} / 2) goes
to infinity, as dp-accounting does; the mass above U_hi is rounded up to the grid point above
L(U_hi).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import special

_UNIT = float(np.finfo(float).eps)
# estimated Gauss-Legendre remainder per piece, relative (module docstring), with a margin
QUADRATURE_ERROR = 1e-13
# no more than this many quadrature pieces (the caller's next accountant answers instead)
MAX_PIECES = 4_000_000
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(3)


class TooManyPieces(Exception):
    """The release's PMF would need more quadrature pieces than MAX_PIECES."""


@dataclasses.dataclass(frozen=True)
class ReleasePmf:
    """Upper bounds on the masses at (lower + i) * discretization and at +inf, of a PMF that
    dominates one release's pair once every loss is raised by ``loss_shift``."""

    discretization: float
    lower: int
    probs: np.ndarray
    infinity_mass: float
    loss_shift: float


@dataclasses.dataclass(frozen=True)
class _Pair:
    """One direction of the pair: P's components (weights, means) and the privacy loss L(u)."""

    a: float
    q: float
    kind: str  # "remove", "add" or "replace"

    @property
    def components(self) -> tuple[np.ndarray, np.ndarray]:
        if self.kind == "add":
            return np.array([1.0]), np.array([0.0])
        if self.q == 1.0:
            return np.array([1.0]), np.array([-self.a])
        return np.array([1.0 - self.q, self.q]), np.array([0.0, -self.a])

    def loss(self, u: np.ndarray) -> np.ndarray:
        a, q = self.a, self.q
        if self.kind == "add":
            return -_log1p_mix(q, a * u - 0.5 * a * a)
        remove = _log1p_mix(q, -a * u - 0.5 * a * a)
        if self.kind == "remove":
            return remove
        return remove - _log1p_mix(q, a * u - 0.5 * a * a)

    def inverse(self, loss: np.ndarray) -> np.ndarray:
        """u with L(u) = loss (loss inside L's range)."""
        a, q = self.a, self.q
        if self.kind == "replace":
            if q == 1.0:  # L = -2 a u
                return -loss / (2.0 * a)
            # e^L = R(u) / S(u), solved as dp-accounting's _inverse_privacy_loss_replace does:
            # u = (asinh(-sinh(L/2) alpha) - L/2) / a, alpha = e^{a^2/2} (1-q)/q
            log_alpha = 0.5 * a * a + math.log1p(-q) - math.log(q)
            half = np.abs(loss) / 2.0
            with np.errstate(divide="ignore"):  # loss 0: log sinh 0 = -inf, u = 0 below
                log_sinh = half + np.log1p(-np.exp(-2.0 * half)) - math.log(2.0)
            log_term = log_alpha + log_sinh
            asinh = -np.sign(loss) * np.logaddexp(0.5 * np.logaddexp(0.0, 2.0 * log_term), log_term)
            return np.where(loss == 0.0, 0.0, (asinh - loss / 2.0) / a)
        if self.kind == "remove":  # l0 = -a u - a^2/2 = log(1 + expm1(L) / q)
            return (-_log1p_ratio(loss, q) - 0.5 * a * a) / a
        return (_log1p_ratio(-loss, q) + 0.5 * a * a) / a


def _log1p_mix(q: float, x: np.ndarray) -> np.ndarray:
    """log((1-q) + q e^x) = log1p(q expm1(x)), by log-sum-exp where e^x would overflow; x itself
    at q = 1 (where expm1(x) rounds to -1 below x = -37 and log1p(-1) would give -inf)."""
    x = np.asarray(x, dtype=float)
    if q == 1.0:
        return x
    big = x > 30.0
    out = np.log1p(q * np.expm1(np.minimum(x, 30.0)))
    if np.any(big):
        out = np.where(big, np.logaddexp(math.log1p(-q) if q < 1.0 else -math.inf, math.log(q) + x), out)
    return out


def _log1p_ratio(loss: np.ndarray, q: float) -> np.ndarray:
    """log(1 + expm1(loss) / q), for loss > log(1-q)."""
    loss = np.asarray(loss, dtype=float)
    if q == 1.0:
        return loss
    big = loss > 30.0
    out = np.log1p(np.expm1(np.minimum(loss, 30.0)) / q)
    if np.any(big):  # log((e^L - (1-q)) / q) = L + log1p(-(1-q) e^{-L}) - log q
        out = np.where(big, loss + np.log1p(-(1.0 - q) * np.exp(-loss)) - math.log(q), out)
    return out


def _truncation_point(log_truncation: float) -> float:
    """z_t with Phi(-z_t) = e^{log_truncation} / 2 (dp-accounting's ``privacy_loss_tail``)."""
    return -float(special.ndtri_exp(math.log(0.5) + log_truncation))


def _support(pair: _Pair, log_truncation: float) -> tuple[float, float, float, float]:
    """(u_lo, u_hi, l_bottom, l_top): the u-quantiles of ``log_truncation`` that bound the PMF's
    P-mass and the losses there (L decreases in u)."""
    z_t, a = _truncation_point(log_truncation), pair.a
    u_lo, u_hi = (-z_t, z_t + a) if pair.kind == "add" else (-z_t - a, z_t)
    l_bottom, l_top = (float(v) for v in pair.loss(np.array([u_hi, u_lo])))
    return u_lo, u_hi, l_bottom, l_top


def loss_span(noise_multiplier: float, *, sampling_prob: float, kind: str, log_truncation: float) -> float:
    """The range of losses :func:`release_pmf` puts on its grid (its points: this / step)."""
    _, _, l_bottom, l_top = _support(_Pair(1.0 / noise_multiplier, sampling_prob, kind), log_truncation)
    return l_top - l_bottom


def release_pmf(
    noise_multiplier: float, *, sampling_prob: float, kind: str, discretization: float, log_truncation: float
) -> ReleasePmf:
    """The connect-the-dots PMF (upper bounds, module docstring) of one direction ``kind``
    ("remove", "add", "replace") of a Gaussian release of noise ``noise_multiplier`` x its
    sensitivity (dp-accounting's ``standard_deviation`` at sensitivity 1), sampled with
    probability ``sampling_prob``, on the grid of step ``discretization``; P-mass beyond the
    u-quantiles of ``log_truncation`` is rounded up as dp-accounting's ``privacy_loss_tail``
    does. TooManyPieces if the quadrature would need more than MAX_PIECES pieces."""
    pair = _Pair(1.0 / noise_multiplier, sampling_prob, kind)
    d, a = discretization, pair.a
    u_lo, u_hi, l_bottom, l_top = _support(pair, log_truncation)
    lower, upper = math.floor(l_bottom / d), math.ceil(l_top / d)
    upper = max(upper, lower + 1)
    n = upper - lower + 1
    reach = max(abs(u_lo), abs(u_hi)) + 2.0 * a
    width = 0.05 / (reach + 3.0)
    pieces = (n - 2) + math.ceil((u_hi - u_lo) / width)
    if pieces > MAX_PIECES:
        raise TooManyPieces(f"{pieces:.3g} quadrature pieces")
    inner = np.arange(lower + 1, upper) * d
    cuts = np.clip(pair.inverse(inner), u_lo, u_hi)[::-1]  # ascending u
    points = np.unique(np.concatenate((cuts, np.linspace(u_lo, u_hi, pieces - (n - 2) + 1))))
    mid, half = 0.5 * (points[1:] + points[:-1]), 0.5 * np.diff(points)
    bucket = len(cuts) - np.searchsorted(cuts, mid, side="right")  # L(mid) in [l_j, l_j+1]
    u = mid[:, None] + half[:, None] * _NODES
    weights, means = pair.components
    density = sum(w * np.exp(-0.5 * (u - m) ** 2) for w, m in zip(weights, means))
    mass = density * (half[:, None] * _WEIGHTS / math.sqrt(2.0 * math.pi))
    top = ((lower + bucket + 1) * d)[:, None]
    down = np.clip(np.expm1(top - pair.loss(u)) / math.expm1(d), 0.0, 1.0)
    index = np.broadcast_to(bucket[:, None], u.shape).ravel()
    probs = np.bincount(index, (mass * down).ravel(), minlength=n) + np.bincount(
        index + 1, (mass * (1.0 - down)).ravel(), minlength=n
    )
    probs[math.ceil(l_bottom / d) - lower] += float(np.sum(weights * special.ndtr(means - u_hi)))
    infinity = float(np.sum(weights * special.ndtr(u_lo - means)))
    r = QUADRATURE_ERROR + _UNIT * (64.0 + (reach + 1.0) ** 2)
    # a node's loss: a few ulps of its exponent's size, a (|u| + a); a cut point's: measured
    shift = float(np.max(np.abs(pair.loss(cuts[::-1]) - inner), initial=0.0)) + 32.0 * _UNIT * (
        a * reach + a * a + max(abs(l_bottom), abs(l_top))
    )
    return ReleasePmf(d, lower, probs * (1.0 + r), infinity * (1.0 + r), shift)
