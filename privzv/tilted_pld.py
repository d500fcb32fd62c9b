"""Composing privacy-loss distributions by FFT without losing the small tail masses.

A PLD composed k times by FFT (dp-accounting's ``self_convolve``) carries an absolute round-off
of about 1e-16 x (largest mass) in every grid entry. delta(eps) at delta near 1e-12 sums masses
of that order over 1e5+ entries, so the round-off reaches delta. The cure is the exponential
tilting (the Esscher transform, Esscher 1932, "On the probability function in the collective
theory of risk", Skand. Aktuarietidskr. 15) used for tail probabilities computed by FFT: compose
p~_i = p_i e^{t l_i} / M(t) instead of p_i, where M(t) = sum_i p_i e^{t l_i}. Convolution
commutes with tilting (the k-fold composition of p~ is the tilted k-fold composition of p, with
normaliser M(t)^k), so the true mass of entry i is p~_i M(t)^k e^{-t l_i}: an absolute error e in
p~_i becomes e M^k e^{-t l_i}, small exactly where the tilted masses are large. t is the saddle
point of the target delta (:func:`saddle_tilt`), which puts the tilted distribution's mean at
the epsilon being read (Daniels 1954, "Saddlepoint approximations in statistics", Ann. Math.
Statist. 25(4)). Koskela, Jalko & Honkela 2020 ("Computing tight differential privacy
guarantees using FFT", AISTATS) bound the truncation and aliasing errors of FFT accounting with
the same moment generating function.

Every step keeps an upper bound on the true masses. The FFT's own round-off is bounded per entry
(:func:`_power_noise`, :func:`_product_noise`, from the componentwise form of Higham's FFT
error bound, :func:`_fft_error`)
and tracked (``noise``): composing k times multiplies an entrywise error bound e by at most
((1 + n e)^k - 1) / (n e) (the binomial expansion of (x + d)^{*k} with |x|_1 <= 1 and
|d * y|_inf <= |d|_inf |y|_1), coarsening by the split weights. :func:`epsilon` reads epsilon from
the entrywise upper bounds min(1, (max(p~, 0) + noise) M^k e^{-t l}); delta(eps) =
sum_{l > eps} (1 - e^{eps - l}) p_l + p_inf increases in every p_l, so the answer stays an
upper bound.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import fft

# from this many compositions on, self_compose works in two stages
STAGED_FROM = 10_000
# relative round-off of one float64 operation
_UNIT = float(np.finfo(float).eps)
# e^x is 0 in float64 below this
_UNDERFLOW = -746.0


class GridTooLarge(Exception):
    """A composition would need more grid points than allowed."""


@dataclasses.dataclass(frozen=True)
class TiltedPmf:
    """A privacy-loss PMF on the grid l_i = (lower + i) * discretization, stored tilted: the mass
    at l_i is probs[i] * exp(log_scale - tilt * l_i). ``infinity_mass`` is the (untilted) mass at
    +inf; ``noise`` bounds the absolute error of each entry of ``probs``. ``log_mgf`` bounds
    log sum_i p_i e^{theta l_i} of the true masses from above at each of ``thetas``: the
    truncation ranges come from it, because the tilted entries say nothing reliable about the
    true masses far below the tilted mean."""

    discretization: float
    lower: int
    probs: np.ndarray
    log_scale: float
    tilt: float
    infinity_mass: float
    thetas: np.ndarray
    log_mgf: np.ndarray
    noise: float = 0.0

    @property
    def losses(self) -> np.ndarray:
        return (self.lower + np.arange(len(self.probs))) * self.discretization

    def masses(self) -> np.ndarray:
        """Entrywise upper bounds on the true masses (at most 1 each)."""
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            log_m = (
                np.log(np.maximum(self.probs, 0.0) + self.noise) + self.log_scale - self.tilt * self.losses
            )
        return np.exp(np.minimum(log_m, 0.0))


def _log_weights(probs: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(probs, 0.0))


# theta grid for the tracked log moment generating function, in units of 1 / (the std of one
# release's privacy loss): Chernoff's optimal theta for k releases is about
# sqrt(2 log(1/tail) / k) / std, which this covers for k = 1 to 1e10
_THETAS = np.geomspace(1e-4, 1e2, 13)
_MIN_STD = 1e-290  # below: the std is treated as 0 (_THETAS[-1] / std would overflow)


def tilt(discretization: float, lower: int, probs: np.ndarray, infinity_mass: float, t: float) -> TiltedPmf:
    """The PMF (masses ``probs`` at (lower + i) * discretization) tilted by e^{t l}, normalised to
    sum 1, with its log moment generating function at -g and g for g in _THETAS / std, and at
    t + g for g in _THETAS / (the tilted PMF's std): the tilted ranges' Chernoff bounds need
    theta just above t on the tilted scale, which for a sampled release (a tiny untilted std, a
    tail that the tilt makes its bulk) is orders of magnitude below t + _THETAS[0] / std."""
    log_p = _log_weights(np.asarray(probs, dtype=float))
    losses = (lower + np.arange(len(probs))) * discretization
    finite = np.isfinite(log_p)
    log_q, at = log_p[finite], losses[finite]
    std = _scale(np.exp(log_q - log_q.max()), at, discretization)
    log_w = log_p + t * losses
    top = float(np.max(log_w))
    w = np.exp(log_w - top)
    total = float(np.sum(w))
    grid = _THETAS / std
    thetas = np.concatenate((-grid, grid, t + _THETAS / _scale(w, losses, discretization)))
    log_mgf = _log_mgf(log_q, at, thetas)
    return TiltedPmf(
        discretization, lower, w / total, top + math.log(total), t, infinity_mass, thetas, log_mgf
    )


def _scale(weights: np.ndarray, losses: np.ndarray, discretization: float) -> float:
    """The losses' standard deviation, or ``discretization`` where it is 0; never below _MIN_STD,
    where the theta grid over it would overflow (a point mass on a subnormal grid: noise
    multipliers above about 1e150). A Chernoff bound holds at any theta > 0: only its tightness
    depends on the grid."""
    std = _std(weights, losses)
    return max(std if std > _MIN_STD else discretization, _MIN_STD)


def _std(weights: np.ndarray, losses: np.ndarray) -> float:
    """The standard deviation of ``losses`` under (unnormalised) ``weights``."""
    mean = float(np.sum(weights * losses) / np.sum(weights))
    return math.sqrt(float(np.sum(weights * (losses - mean) ** 2) / np.sum(weights)))


def _log_mgf(log_p: np.ndarray, losses: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """log sum_i e^{log_p_i + theta losses_i} at each theta, by log-sum-exp in one buffer, the
    exponential taken only of the terms that do not underflow to 0 (below e^-746 of the largest:
    at the larger thetas most of them), 3 times faster than a temporary per theta on 7.5e4
    points (the sums then differ by rounding only, 2e-16 there)."""
    out, buffer = np.empty(len(thetas)), np.empty_like(losses)
    for j, theta in enumerate(thetas):
        np.multiply(losses, theta, out=buffer)
        buffer += log_p
        top = float(buffer.max())
        buffer -= top
        out[j] = top + math.log(float(np.sum(np.exp(buffer[buffer > _UNDERFLOW]))))
    return out


def saddle_tilt(discretization: float, lower: int, probs: np.ndarray, times: int, delta: float) -> float:
    """The t >= 0 with t K'(t) - K(t) = log(1/delta), K(t) = times log sum_i p_i e^{t l_i}: the
    saddle point at which the Chernoff estimate exp(K(t) - t eps) of the composed PLD's tail
    equals delta at eps = K'(t), the tilted mean (for a Gaussian PLD of parameter mu this is
    t = sqrt(2 log(1/delta)) / mu). Solved to about 1% by doubling and bisection; any t keeps
    the result exact, t only decides where the precision is best."""
    return composed_saddle_tilt([(discretization, lower, probs, times)], delta)


def composed_saddle_tilt(parts, delta: float) -> float:
    """:func:`saddle_tilt` for a composition of several PMFs: ``parts`` is a list of
    (discretization, lower, probs, times), K the sum over parts of times x log MGF."""
    goal = math.log(1.0 / delta)
    prepared = [
        (_log_weights(np.asarray(probs, dtype=float)), (lower + np.arange(len(probs))) * d, times)
        for d, lower, probs, times in parts
    ]

    def excess(t):
        total = 0.0
        for log_p, losses, times in prepared:
            log_w = log_p + t * losses
            top = float(np.max(log_w))
            w = np.exp(log_w - top)
            mass = float(np.sum(w))
            total += times * (t * float(np.sum(w * losses)) / mass - top - math.log(mass))
        return total - goal

    low, high = 0.0, 1.0
    while excess(high) < 0.0:
        low, high = high, 2.0 * high
        if high > 1e6:
            return low
    while high - low > 0.01 * high:
        mid = 0.5 * (low + high)
        low, high = (mid, high) if excess(mid) < 0.0 else (low, mid)
    return high


def _ranges(pmf: TiltedPmf, times: int, tail: float) -> tuple[int, int, int, np.ndarray]:
    """Grid indices (of the composed PMF) from Chernoff bounds on the tracked log MGF K of the
    true masses, composed ``times`` times (P(L <= a) <= e^{times K(theta) - theta a} for
    theta < 0, P(L >= a) <= e^{times K(theta) - theta a} for theta > 0): the lowest index with
    at most tail/2 of true mass below, the highest with at most tail/2 above, the highest with
    at most tail/2 of tilted mass above, and per theta > t the log of the tilted mass above an
    index i being at most ``times K(theta) - times log_scale - (theta - t) i D``. The indices
    are kept inside the support of the composition, times the PMF's first to last index."""
    k = times * pmf.log_mgf
    d, log_half = pmf.discretization, math.log(0.5 * tail)
    neg, pos = pmf.thetas < 0, pmf.thetas > 0
    with np.errstate(invalid="ignore", over="ignore"):
        lower = np.max((k[neg] - log_half) / pmf.thetas[neg]) / d
        upper = np.min((k[pos] - log_half) / pmf.thetas[pos]) / d
        above = pmf.thetas > pmf.tilt
        shifted = pmf.thetas[above] - pmf.tilt
        tilted_k = k[above] - times * pmf.log_scale
        upper_tilted = np.min((tilted_k - log_half) / shifted) / d
    first, last = times * pmf.lower, times * (pmf.lower + len(pmf.probs) - 1)
    return (
        max(math.floor(lower), first),
        min(math.ceil(upper), last),
        min(math.ceil(upper_tilted), last),
        np.stack((tilted_k, shifted * d)),
    )


def _propagated(noise: float, n: int, times: int) -> float:
    """Entrywise error bound after composing ``times`` copies of n entries with error <= noise."""
    spread = n * noise
    if spread == 0.0:
        return 0.0
    return noise * math.expm1(times * math.log1p(spread)) / spread


def _fft_error(size: int, unit: float = _UNIT) -> float:
    """A bound on the componentwise error of one FFT of ``size`` points, relative to the sum of
    the input's magnitudes: |fl(F x)_j - (F x)_j| <= this x sum_i |x_i| for every j. The radix-2
    FFT is a product of L = log2(size) butterfly stages A_L ... A_1, computed as (A_L + D_L) ...
    (A_1 + D_1) x with |D_k| <= eta |A_k| componentwise, eta = mu + gamma_4 (sqrt 2 + mu) (Higham
    2002, "Accuracy and Stability of Numerical Algorithms", 2nd ed., Sec. 24.1, the proof of
    Thm. 24.2; mu, the twiddle factors' error, taken as u), so the error is at most
    ((1 + eta)^L - 1) |A_L| ... |A_1| |x|, and every entry of |A_L| ... |A_1| is 1 (one path from
    each input to each output, twiddles of modulus 1). scipy's pocketfft uses radices 2 to 11
    and a generic pass, for which this is not proven: the bound is taken 4 times over (measured
    errors are far below it, tests/privzv/test_tilted_pld.py)."""
    eta = unit + 4.0 * unit / (1.0 - 4.0 * unit) * (math.sqrt(2.0) + unit)
    return 4.0 * math.expm1(math.log2(max(size, 2)) * math.log1p(eta))


def _full_sum(half: np.ndarray) -> float:
    """sum_j over the full spectrum of a real signal, from its rfft half (mirror entries equal in
    magnitude): at most twice the half's sum."""
    return 2.0 * float(np.sum(half))


def power(spectrum: np.ndarray, times: int) -> np.ndarray:
    """``spectrum ** times`` by binary exponentiation (at most 2 log2(times) complex products,
    in the spectrum's precision): several times faster than numpy's complex power
    (exp(times log z)) in long double, and with a smaller round-off (:func:`_power_noise`)."""
    result, base = None, spectrum
    while times:
        if times & 1:
            result = base if result is None else result * base
        times >>= 1
        if times:
            base = base * base
    assert result is not None, "power of a spectrum: times must be at least 1"
    return result


def _power_noise(
    probs: np.ndarray,
    spectrum: np.ndarray,
    times: int,
    size: int,
    powered_spectrum: np.ndarray,
    unit: float = _UNIT,
) -> float:
    """A bound on every entry's round-off in irfft(power(rfft(probs, size), times), size).

    Forward (:func:`_fft_error`): each computed frequency Y^_j is within b = f sum |p_i| of the
    exact one. Power: |Y^_j^k - Y_j^k| <= k (|Y^_j| + b)^(k-1) b, and :func:`power` adds at most
    a relative theta = (1 + e)^(k-1) - 1 of its own, e = sqrt(2) gamma_2 the relative error of
    one complex product (Higham 2002, Lemma 3.5; by induction over the products, the error of
    Y^a Y^b is at most (1 + e)^(a+b-1) - 1 given the factors'), so theta / (1 - theta) relative
    to the computed power, plus a subnormal per product where it underflows. Inverse (the
    1/size scaling of a sum over all frequencies): an entry moves by at most the mean over the
    full spectrum of those spectral errors, plus f times the mean of |Y^_j^k|. ``unit``: the
    working precision's machine epsilon. The bound itself is computed in float64 from
    magnitudes rounded up."""
    f = _fft_error(size, unit)
    b = f * float(np.sum(np.abs(probs)))
    e = math.sqrt(2.0) * 2.0 * unit / (1.0 - 2.0 * unit)
    theta = math.expm1((times - 1) * math.log1p(e))
    underflow = 2.0 * math.log2(max(times, 2)) * float(np.finfo(spectrum.real.dtype).smallest_subnormal)
    magnitude, powered = _magnitude(spectrum), _magnitude(powered_spectrum)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        # (|Y| + b)^(k-1) from log |Y| + log1p(b / |Y|), float64's own rounding covered by 1e-9
        log_base = np.log(magnitude) + np.log1p(b / magnitude)
        carried = times * np.exp((times - 1) * log_base) * b * (1.0 + 1e-9)
    own = theta / (1.0 - theta) * powered + underflow
    spectral = np.where(np.isfinite(carried), carried, math.inf) + own
    return float((_full_sum(spectral) + f * _full_sum(powered)) / size)


def _magnitude(spectrum: np.ndarray) -> np.ndarray:
    """|spectrum| in float64, rounded up (4 float64 ulps cover the conversion and hypot; the
    smallest normal float64 covers what underflows in the conversion)."""
    return np.abs(spectrum.astype(np.complex128)) * (1.0 + 4.0 * _UNIT) + float(np.finfo(float).tiny)


def _product_noise(
    a_spectrum: np.ndarray, b_spectrum: np.ndarray, a: np.ndarray, b: np.ndarray, size: int
) -> float:
    """A bound on every entry's round-off in irfft(rfft(a) rfft(b)) (as :func:`_power_noise`:
    |E_a| |B^| + |A^| |E_b| + |E_a| |E_b| and the product's own 2 u |A^ B^|, then the inverse)."""
    f = _fft_error(size)
    ea, eb = f * float(np.sum(np.abs(a))), f * float(np.sum(np.abs(b)))
    ma, mb = np.abs(a_spectrum), np.abs(b_spectrum)
    spectral = ea * (mb + eb) + eb * (ma + ea) + 2.0 * _UNIT * ma * mb
    return (_full_sum(spectral) + f * _full_sum(ma * mb)) / size


def self_compose_once(
    pmf: TiltedPmf, times: int, tail: float, max_points: int, extended: bool = False
) -> TiltedPmf:
    """``pmf`` composed ``times`` times by one FFT power, like dp-accounting's
    ``DensePLDPmf.self_compose`` (:func:`_ranges` for the Chernoff bounds): the range kept runs
    from the lower bound of the true masses to the upper bound of the tilted ones (which lies
    above the true one), or as far as ``max_points`` allow; the truncated true mass (at most
    ``tail``) goes to the infinity mass, the tilted mass that the cyclic FFT wraps around (at
    most ``tail`` plus a Chernoff bound of what lies beyond the range) into ``noise``.
    GridTooLarge if the true masses' range exceeds ``max_points``."""
    if times == 1:
        return pmf
    n = len(pmf.probs)
    low, high_true, high_tilted, tilted_tail = _ranges(pmf, times, tail)
    if high_true - low + 1 > max_points:
        raise GridTooLarge(f"{high_true - low + 1:.3g} points after {times} compositions")
    high = max(high_true, min(high_tilted, low + max_points - 1))
    wrapped = (
        0.0
        if high >= high_tilted
        else math.exp(min(0.0, float(np.min(tilted_tail[0] - tilted_tail[1] * high))))
    )
    size = high - low + 1
    fast = fft.next_fast_len(max(size, n), real=True)
    dtype = np.longdouble if extended else float
    spectrum = fft.rfft(pmf.probs.astype(dtype), fast)
    powered_spectrum = power(spectrum, times)
    powered = fft.irfft(powered_spectrum, fast)
    unit = float(np.finfo(dtype).eps)
    rounding = _power_noise(pmf.probs, spectrum, times, fast, powered_spectrum, unit)
    if extended:  # back to float64: at most half an ulp of the largest entry each
        rounding += _UNIT * float(np.max(np.abs(powered)))
        powered = powered.astype(float)
    if not np.all(np.isfinite(powered)):
        raise FloatingPointError("the FFT power overflowed")
    out = np.roll(powered, times * pmf.lower - low)[:size]
    noise = max(-float(np.min(out)), rounding) + tail + wrapped + _propagated(pmf.noise, n, times)
    infinity = tail - math.expm1(times * math.log1p(-pmf.infinity_mass))
    return dataclasses.replace(
        pmf,
        lower=low,
        probs=out,
        log_scale=times * pmf.log_scale,
        infinity_mass=infinity,
        log_mgf=times * pmf.log_mgf,
        noise=noise,
    )


def compose(a: TiltedPmf, b: TiltedPmf) -> TiltedPmf:
    """The composition of two PMFs with the same grid and tilt (full linear convolution)."""
    size = len(a.probs) + len(b.probs) - 1
    fast = fft.next_fast_len(size, real=True)
    a_spectrum, b_spectrum = fft.rfft(a.probs, fast), fft.rfft(b.probs, fast)
    out = fft.irfft(a_spectrum * b_spectrum, fast)[:size]
    noise = (
        max(-float(np.min(out)), _product_noise(a_spectrum, b_spectrum, a.probs, b.probs, fast))
        + a.noise * float(np.sum(np.abs(b.probs)) + len(b.probs) * b.noise)
        + b.noise * float(np.sum(np.abs(a.probs)))
    )
    infinity = 1.0 - (1.0 - a.infinity_mass) * (1.0 - b.infinity_mass)
    return dataclasses.replace(
        a,
        lower=a.lower + b.lower,
        probs=out,
        log_scale=a.log_scale + b.log_scale,
        infinity_mass=infinity,
        log_mgf=a.log_mgf + b.log_mgf,
        noise=noise,
    )


def coarsen(pmf: TiltedPmf, factor: int) -> TiltedPmf:
    """The PMF moved onto the grid ``factor`` times coarser, pessimistically and exactly.

    Each atom p at loss l, between the coarse grid points a <= l < b = a + D, is split into
    p_b = p (e^{-(l-a)} - 1) / (e^{-D} - 1) at b and p_a = p - p_b at a: the split keeps both the
    upper distribution's mass (p_a + p_b = p) and the lower one's (p_a e^{-a} + p_b e^{-b} =
    p e^{-l}), so merging a and b back into l maps the new pair onto the old one. The old pair is
    thus a post-processing of the new one, which dominates it (every hockey-stick divergence is at
    least as large): Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022 (connect-the-dots, PETS),
    applied to a discrete PLD. In the tilted representation p_a and p_b carry the factors
    e^{t (a - l)} and e^{t (b - l)}. Infinity mass is kept; no mass moves by more than D, so the
    log MGF grows by at most |theta| D."""
    if factor == 1:
        return pmf
    fine = pmf.lower + np.arange(len(pmf.probs))
    coarse = np.floor_divide(fine, factor)
    # l - a in [0, D) takes only ``factor`` values: the shares and tilts are computed once for
    # each and gathered (the same floats as elementwise, at 1/3 of the cost on 3.5e5 points)
    rest = fine - coarse * factor
    offset = np.arange(factor) * pmf.discretization
    step = factor * pmf.discretization
    upper_share = np.expm1(-offset) / math.expm1(-step)
    to_b = pmf.probs * upper_share[rest] * np.exp(pmf.tilt * (step - offset))[rest]
    to_a = pmf.probs * (1.0 - upper_share)[rest] * np.exp(-pmf.tilt * offset)[rest]
    base = int(coarse[0])
    index, size = coarse - base, int(coarse[-1]) - base + 2
    probs = np.bincount(index, weights=to_a, minlength=size) + np.bincount(
        index + 1, weights=to_b, minlength=size
    )
    noise = 2 * factor * pmf.noise * math.exp(pmf.tilt * step)
    total = float(np.sum(probs))  # renormalised, so that the FFT power cannot overflow
    return dataclasses.replace(
        pmf,
        discretization=step,
        lower=base,
        probs=probs / total,
        log_scale=pmf.log_scale + math.log(total),
        log_mgf=pmf.log_mgf + np.abs(pmf.thetas) * step,
        noise=noise / total,
    )


def self_compose(
    pmf: TiltedPmf, times: int, tail: float, max_points: int, extended: bool = True
) -> TiltedPmf:
    """``pmf`` composed ``times`` times, in two stages for many compositions.

    For k = ``times`` >= STAGED_FROM: m = floor(sqrt(k)) releases are composed at the fine
    grid, the result is moved onto a grid c = floor(sqrt(m)) times coarser (:func:`coarsen`,
    pessimistic and exact), and that is composed k // m times (plus the k mod m remaining
    releases, coarsened too). The pessimistic rounding of a PLD moves epsilon by about
    (number of compositions) x (grid step)^2, so both stages add about k Delta^2, while the
    coarse stage needs sqrt(m) times fewer points: the composed grid of 1e8 releases shrinks
    from about 1e7 points to 1e5. Every step keeps an upper bound. Each FFT's output size is
    checked first (GridTooLarge above ``max_points``); truncated tails (``tail`` each) go to the
    infinity mass, as dp-accounting does; the first stage's is tail / (k // m), so that the
    infinity mass of the whole stays about 3 ``tail`` plus k times the release's own. The first
    stage runs in long double unless ``extended`` is False (float64: a looser bound, its FFT
    about 4 times cheaper)."""
    if times < STAGED_FROM:
        return self_compose_once(pmf, times, tail, max_points)
    m = math.isqrt(times)
    factor = math.isqrt(m)
    rounds, rest = divmod(times, m)
    # the second stage's size, from the whole composition's range on the fine grid, before the
    # first stage's (extended-precision) FFT is spent on it
    low, high_true, _, _ = _ranges(pmf, times, tail)
    if (high_true - low) / factor > 1.1 * max_points:
        raise GridTooLarge(f"about {(high_true - low) / factor:.3g} points after {times} compositions")
    # the first stage's truncated mass is composed `rounds` times: give it tail / rounds
    block = self_compose_once(pmf, m, tail / rounds, max_points, extended=extended)
    staged = self_compose_once(coarsen(block, factor), rounds, tail, max_points)
    if rest:
        staged = compose(staged, coarsen(self_compose_once(pmf, rest, tail, max_points), factor))
    return staged


def composed_points(pmf: TiltedPmf, times: int, tail: float) -> int:
    """The number of grid points of the largest FFT that :func:`self_compose` with ``times`` and
    ``tail`` would use without capping its range (from the Chernoff bounds of :func:`_ranges`;
    for the two-stage composition the larger of its stages, the second estimated from the whole
    composition's range on the fine grid, as :func:`self_compose` checks it). Computed before
    any FFT, so that a caller can choose a coarser grid that fits its budget."""
    if times < STAGED_FROM:
        low, _, high_tilted, _ = _ranges(pmf, times, tail)
        return high_tilted - low + 1
    m = math.isqrt(times)
    low, _, high_tilted, _ = _ranges(pmf, m, tail / (times // m))
    whole_low, _, whole_high, _ = _ranges(pmf, times, tail)
    return max(high_tilted - low + 1, math.ceil((whole_high - whole_low) / math.isqrt(m)) + 2)


def epsilon(pmf: TiltedPmf, delta: float) -> float:
    """The smallest epsilon whose hockey-stick divergence, computed from the entrywise upper
    bounds of :meth:`TiltedPmf.masses`, is at most delta (dp-accounting's epsilon walk,
    :func:`walk_epsilon`)."""
    masses = pmf.masses()
    return walk_epsilon(np.flip(pmf.losses), np.flip(masses), pmf.infinity_mass, delta)


def walk_epsilon(losses: np.ndarray, probs: np.ndarray, inf_mass: float, delta: float) -> float:
    """dp-accounting's ``pld_pmf._get_epsilon_for_delta`` over arrays, the losses given from the
    top. With U_i = inf mass + sum_{j<i} p_j and L_i = sum_{j<i} e^{-l_j} p_j (the masses of the
    upper and lower distribution above l_i): epsilon = log((U_i - delta)/L_i) at the first i
    where that is >= l_i (the hockey-stick divergence U - e^eps L reaches delta inside the
    i-th gap), and 0 where U - delta <= L there; the top loss in dp-accounting's corner case
    where L underflows to 0."""
    if inf_mass > delta:
        return math.inf
    n = len(probs)
    if n == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        weights = np.where(probs != 0.0, np.exp(-losses) * probs, 0.0)
        upper = np.cumsum(np.concatenate(([inf_mass], probs)))  # U_0 .. U_n
        lower = np.cumsum(np.concatenate(([0.0], weights)))  # L_0 .. L_n
        log_ratio = np.log((upper[:-1] - delta) / lower[:-1])
        stop = (upper[:-1] > delta) & (lower[:-1] > 0.0) & (log_ratio >= losses)
    corner = (upper[1:] >= delta) & (lower[1:] == 0.0)  # checked after adding element i
    i_stop = int(np.argmax(stop)) if stop.any() else n
    i_corner = int(np.argmax(corner)) if corner.any() else n
    used = min(i_stop, i_corner + 1)  # dp-accounting evaluated exp(-l_j) for j < used
    if used > 0 and -losses[used - 1] > 709.78:
        raise OverflowError("math range error")  # where dp-accounting's math.exp overflows
    if i_corner < i_stop:
        return max(0.0, float(losses[i_corner]))
    end = min(i_stop, n)  # the masses where the walk stopped (or all of them)
    if upper[end] <= lower[end] + delta:
        return 0.0
    above, below = float(upper[end] - delta), float(lower[end])
    return math.log(above) - math.log(below) if below > 0.0 else math.inf  # no overflow
