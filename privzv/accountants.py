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
- Poisson sampling, replace-one, RDP: dp-accounting refuses this event. privzv computes the
  exact Renyi divergence of the same pair as the PLD path, (1-q) N(0,1) + q N(-a,1) against
  (1-q) N(0,1) + q N(a,1) with a = 1/(2z), by 1-D quadrature (:func:`replace_one_rdp`), and
  converts with dp-accounting's conversion (:func:`privzv.rdp.epsilon`). This replaces the earlier bound by
  Mironov's weak triangle inequality (Mironov 2017, "Renyi differential privacy",
  arXiv:1702.07476, Prop. 11), which bounds the same divergence from above and is 15% to
  several times looser.
- ``best``: the smaller of pld and rdp (both rigorous upper bounds), each evaluated where it
  answers; the answer names the one that produced it. pld and rdp each fall back to the other
  where they cannot answer (a grid too large, an overflow), and both to the unamplified closed
  form (:func:`unamplified_epsilon`).

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
import math

import numpy as np

from privzv import gdp
from privzv.threats import Exposure


def __getattr__(name: str) -> tuple[str, ...]:
    """``ACCOUNTANTS`` and ``RIGOROUS``: the registered accountants' names, and the rigorous
    ones' (:mod:`privzv.registry`; read at each access, so registrations show)."""
    if name in ("ACCOUNTANTS", "RIGOROUS"):
        from privzv import registry

        return registry.names(rigorous=True if name == "RIGOROUS" else None)
    raise AttributeError(f"module 'privzv.accountants' has no attribute {name!r}")


def seed_mu(z: float, rate: float, steps: int) -> float:
    """mu of Theorem VI.5 (DPZV paper): (B/D) sqrt(T) / z, i.e. 2C sqrt(T) / (D sigma), with
    ``rate`` = B/D."""
    return rate * math.sqrt(steps) / z


def seed_noise_multiplier(mu: float, rate: float, steps: int) -> float:
    """Inverse of :func:`seed_mu`: z = (B/D) sqrt(T) / mu (sigma = z * 2C/B = 2C sqrt(T)/(D mu))."""
    return rate * math.sqrt(steps) / mu


def clt_mu(z: float, exposure: Exposure) -> float:
    """Bu et al. 2020's CLT mu = q sqrt(k (e^{1/z^2} - 1)); exactly sqrt(k)/z without sampling.

    Computed in log space, so a tiny z gives inf rather than an overflow error, and a huge one
    (1/z^2 underflowing) a tiny mu rather than log(0).
    """
    k, q = exposure.compositions, exposure.sampling_rate
    if q is None:
        return math.sqrt(k) / z
    x = 1.0 / (z * z)
    if x > 1.0:
        log_expm1 = x + math.log1p(-math.exp(-x))
    elif x > 1e-8:
        log_expm1 = math.log(math.expm1(x))
    else:  # log(e^x - 1) = log x + x/2 + O(x^2), where x may underflow to 0 (z above 1e154)
        log_expm1 = -2.0 * math.log(z) + 0.5 * x
    log_mu = math.log(q) + 0.5 * (math.log(k) + log_expm1)
    return math.exp(log_mu) if log_mu < 700 else math.inf


def clt_noise_multiplier(mu: float, exposure: Exposure) -> float:
    """Inverse of :func:`clt_mu`: z = 1 / sqrt(log(1 + mu^2 / (q^2 k))), or sqrt(k)/mu; inf for
    mu 0 or where z exceeds the float range (log space: a tiny mu is no error)."""
    k, q = exposure.compositions, exposure.sampling_rate
    if mu <= 0.0:
        return math.inf
    if q is None:
        log_z = 0.5 * math.log(k) - math.log(mu)
    else:
        log_x = 2.0 * (math.log(mu) - math.log(q)) - math.log(k)  # x = mu^2 / (q^2 k)
        if log_x >= -700:
            return 1.0 / math.sqrt(log_x if log_x > 700 else math.log1p(math.exp(log_x)))
        log_z = -0.5 * log_x  # log(1 + x) = x there: z = x^(-1/2)
    return math.exp(log_z) if log_z < 709 else math.inf


# PLD value discretisation: pld_discretization gives the step the answer needs. A single
# release's grid is not built above PLD_MAX_POINTS points, and a composition that would need
# more than PLD_COMPOSED_BUDGET points runs on a release grid coarse enough to fit it
# (:func:`_pld_epsilon`; a coarser grid is a looser upper bound, still one); a grid more than
# PLD_MAX_COARSENING times coarser than asked for is not used (the next rigorous accountant
# answers instead). These bound one evaluation to well under a second.
# PLD_MAX_COMPOSED_POINTS is the composition's own hard limit.
PLD_RELATIVE_DISCRETIZATION = 1e-4
PLD_MAX_DISCRETIZATION = 1.0
PLD_MAX_POINTS = 150_000
PLD_COMPOSED_BUDGET = 400_000
PLD_MAX_COARSENING = 16.0
PLD_MAX_COMPOSED_POINTS = 4_000_000
# Before a release is built on its grid, a copy on at most PLD_PROBE_POINTS points sizes the
# composition (its range in loss units barely depends on the step); above PLD_PROBE_MARGIN x
# PLD_MAX_COARSENING times the budget pld declines without building the full grid.
PLD_PROBE_POINTS = 2_000
PLD_PROBE_MARGIN = 4.0
# ... except a release of at most this many points, which is sized on its own grid: at a noise
# multiplier of 0.009 the quadrature of a release costs 0.3 s whatever its grid (fuzz row 30),
# so a probe there doubled the cost of calibration's coarse evaluations
PLD_SELF_SIZED_POINTS = 20_000
# An add direction is bounded on a grid of PLD_SKIP_POINTS points a release before it is built
# on the fine one, where its probe's epsilon is within PLD_SKIP_RATIO times the remove
# direction's (beyond that, that grid is as loose: at q = 1.4e-6, T = 6.3e6 the add direction's
# 0.107 is 21.3 on its probe and 0.999 on 20,000 points, against the remove direction's 0.307).
PLD_SKIP_POINTS = 20_000
PLD_SKIP_RATIO = 10.0
# pld's tightness and speed were measured down to this delta (benchmarks/bench_calibration.py
# --sweep-only); below it pld does not answer and rdp (log-space, exact) does. (dp-accounting's
# plain FFT composition was erratic below ~1e-13; the tilted one is not, but is not measured
# there.)
PLD_MIN_DELTA = 1e-12
PLD_MIN_SPAN = 1e-280  # a release's loss range below this (noise multiplier ~1e280 / q): no grid


def clear_caches() -> None:
    """Forget every remembered evaluation (benchmarks and tests measure cold calls)."""
    for cached in (_pld_epsilon, _direction_epsilon, _cheap_epsilon, _tilted_release, _rdp_epsilon):
        cached.cache_clear()


class CannotAnswer(Exception):
    """An accountant cannot evaluate this exposure (grid too large, overflow); the caller falls
    back to the next rigorous accountant and says so."""


def pld_discretization(epsilon: float, compositions: float, delta: float) -> float:
    """The PLD value discretisation for an answer near ``epsilon`` at ``delta`` after k =
    ``compositions`` releases: min(r epsilon, sqrt(6 r epsilon / (max(t, 6) k))),
    r = PLD_RELATIVE_DISCRETIZATION, at most PLD_MAX_DISCRETIZATION, with
    t = sqrt(2 log(1/delta)) / mu the saddle point of the composed PLD (mu the GDP parameter of
    (epsilon, delta)). The pessimistic (connect-the-dots) rounding splits each atom between two
    grid points, which adds about Delta^2 / 6 of variance per release; a PLD of variance mu^2
    moves its epsilon by about (t/2) d(mu^2) (Gaussian DP, Dong, Roth & Su 2022, Cor. 2.13), so
    k releases move it by about t k Delta^2 / 12 (twice that with the two-stage composition),
    which this keeps near r epsilon. Chosen from the answer, not from a GDP model of z; no floor
    here: :func:`pld_epsilon` keeps it above the round-off floor of the release's grid."""
    if not math.isfinite(epsilon) or epsilon <= 0:
        return PLD_MAX_DISCRETIZATION
    r = PLD_RELATIVE_DISCRETIZATION * epsilon
    mu = gdp.mu_from_epsilon(epsilon, delta)
    t = math.sqrt(2.0 * math.log(1.0 / delta)) / mu if mu > 0 else math.inf
    step = math.sqrt(6.0 * r / (max(t, 6.0) * compositions))
    return min(r, step, PLD_MAX_DISCRETIZATION)


def _log_truncation(delta: float, compositions: float) -> float:
    """log of the P-mass cut from one release's PLD (it goes to the infinity mass): k of them
    add at most 1e-5 delta."""
    return min(-50.0, math.log(1e-5 * delta / compositions))


def release_span(z: float, exposure: Exposure, delta: float) -> float:
    """The range of one release's privacy losses on its grid: the largest over the directions
    (remove and add at z, replace at 2z) of the losses between the truncation quantiles
    (:func:`privzv.gaussian_pmf.loss_span`). With sampling it is far below the unsampled
    2 (a t + a^2 / 2) (a = 1/z, t the tail quantile): the losses of a sampled release are
    squeezed by q."""
    from privzv import gaussian_pmf

    q = 1.0 if exposure.sampling_rate is None else exposure.sampling_rate
    cut = _log_truncation(delta, exposure.compositions)
    return max(
        gaussian_pmf.loss_span(zk, sampling_prob=q, kind=kind, log_truncation=cut)
        for zk, kind in ((z, "remove"), (z, "add"), (2.0 * z, "replace"))
    )


def pld_grid_step(z: float, exposure: Exposure, delta: float, discretization: float) -> float:
    """The step :func:`pld_epsilon` uses when asked for ``discretization``: at most span / 20, so
    that a release has 20 grid points even at a huge noise multiplier, and at least
    span / PLD_MAX_POINTS (:func:`release_span`): a grid up to PLD_MAX_COARSENING times coarser
    than asked for is still an upper bound, only a looser one; beyond that CannotAnswer (the
    next rigorous accountant answers, faster)."""
    span = release_span(z, exposure, delta)
    step = min(discretization, span / 20.0)
    if not _fits(span, step):
        raise CannotAnswer(
            f"one release's privacy losses span {span:.3g}: below a representable grid"
            if not span > PLD_MIN_SPAN
            else f"one release's privacy-loss grid would need about "
            f"{span / step:.3g} points at discretisation {step:.3g}"
        )
    return float(max(step, span / PLD_MAX_POINTS))


def pld_grid_fits(z: float, exposure: Exposure, delta: float, discretization: float) -> bool:
    """False where :func:`pld_grid_step` declines ``discretization`` (a release grid more than
    PLD_MAX_COARSENING times over PLD_MAX_POINTS), and so every finer one."""
    span = release_span(z, exposure, delta)
    return _fits(span, min(discretization, span / 20.0))


def _fits(span: float, step: float) -> bool:
    return span > PLD_MIN_SPAN and span / (PLD_MAX_COARSENING * step) <= PLD_MAX_POINTS


def sampled_at_all(exposure: Exposure) -> float:
    """The chance 1 - (1 - q)^k that Poisson sampling puts the record in any of its k releases.

    Couple the runs on two neighbouring datasets through the same sampling and noise: their
    outputs differ only when the differing record is sampled, so the total variation distance
    between the two output distributions is at most this chance, i.e. the mechanism is
    (0, 1 - (1 - q)^k)-DP whatever the noise (also for adaptive releases: the coupling is per
    step). At a delta at least this large, epsilon is 0 for any noise multiplier. Returned
    rounded up by 1e-12 relative, so that a delta one ulp below the exact chance (a fuzzing
    find: q = 0.23, k = 1) is not answered with epsilon 0."""
    q = exposure.sampling_rate
    assert q is not None
    chance = -math.expm1(exposure.compositions * math.log1p(-q))
    return min(1.0, chance * (1.0 + 1e-12))  # rounded up: its round-off is a few ulps


def any_noise_suffices(exposure: Exposure, delta: float) -> bool:
    """True where Poisson sampling alone gives (0, delta)-DP (:func:`sampled_at_all`)."""
    return exposure.sampling_rate is not None and delta >= sampled_at_all(exposure)


def unamplified_epsilon(z: float, exposure: Exposure, delta: float) -> float:
    """epsilon of k Gaussian releases ignoring any sampling: exactly sqrt(k)/z-GDP (Dong, Roth &
    Su 2022, Cor. 3.3 and 2.13). With Poisson sampling it stays a rigorous upper bound (sampling
    is a randomised pre-processing of the records, so by joint convexity the sampled mechanism
    is no less private than the unsampled one)."""
    return gdp_epsilon(math.sqrt(exposure.compositions) / z, delta)


def pld_epsilon(
    z: float,
    exposure: Exposure,
    neighbors: str,
    delta: float,
    discretization: float,
    *,
    extended: bool = True,
    beyond: float = math.inf,
) -> float:
    """Pessimistic PLD epsilon of the exposure.

    Without sampling the privacy-loss distribution of k Gaussian releases is itself Gaussian
    (mu = sqrt(k)/z; Dong, Roth & Su 2022, Cor. 3.3) and its (epsilon, delta) curve is the
    closed form of Cor. 2.13 (= Balle & Wang 2018's analytic Gaussian), so it is used exactly.
    With sampling: the pessimistic (connect-the-dots) PLD of the sampled Gaussian (module
    docstring for the pair; :mod:`privzv.gaussian_pmf`, whose masses are upper bounds with a
    relative error of about 1e-13), self-composed k times (in two stages for large k,
    :func:`privzv.tilted_pld.self_compose`) after an exponential tilting at the saddle point of
    delta, so that the FFT's round-off stays far below delta, with the truncated tail masses
    (which a pessimistic PLD adds to delta) kept below delta / 1e4, and epsilon read from
    entrywise upper bounds on the composed masses (:func:`privzv.tilted_pld.epsilon`), plus k
    times the release's ``loss_shift`` (where its atoms may sit above the computed ones). An
    upper bound at any discretisation; the step is :func:`pld_grid_step` of ``discretization``.
    Raises CannotAnswer when a grid would be too large or overflows, and for
    delta < PLD_MIN_DELTA. ``extended=False``: the two-stage composition's first stage in
    float64, not long double (a looser upper bound, cheaper: calibration's coarse solve).
    ``beyond``: where a direction's epsilon exceeds it, that epsilon (a lower bound of the answer,
    above ``beyond``) without composing the other direction (calibration's infeasible side).
    """
    if exposure.sampling_rate is None:
        return unamplified_epsilon(z, exposure, delta)
    if delta < PLD_MIN_DELTA:
        raise CannotAnswer(
            f"delta {delta:g} is below {PLD_MIN_DELTA:g}, the smallest delta pld was measured at"
        )
    try:
        return _pld_epsilon(
            float(z),
            exposure.compositions,
            exposure.sampling_rate,
            neighbors,
            float(delta),
            pld_grid_step(z, exposure, delta, discretization),
            fit=True,
            extended=extended,
            beyond=beyond,
        )
    except (OverflowError, FloatingPointError, MemoryError, ValueError) as exc:
        raise CannotAnswer(f"the PLD failed ({type(exc).__name__})") from None


@functools.lru_cache(maxsize=16)
def _tilted_release(z, k, q, kind, delta, discretization):
    """(loss_shift, PMF tilted at delta's saddle point) of one release in direction ``kind``."""
    from privzv import gaussian_pmf, tilted_pld

    try:
        pmf = gaussian_pmf.release_pmf(
            2.0 * z if kind == "replace" else z,
            sampling_prob=q,
            kind=kind,
            discretization=discretization,
            log_truncation=_log_truncation(delta, k),
        )
    except gaussian_pmf.TooManyPieces as exc:
        raise CannotAnswer(f"one release's privacy-loss PMF would need {exc}") from None
    grid = (pmf.discretization, pmf.lower, pmf.probs)
    return pmf.loss_shift, tilted_pld.tilt(*grid, pmf.infinity_mass, tilted_pld.saddle_tilt(*grid, k, delta))


def probe_pld_epsilon(z: float, exposure: Exposure, neighbors: str, delta: float) -> float:
    """pld on the probes' grids (:func:`_cheap_epsilon`, at most PLD_PROBE_POINTS points a
    release): an upper bound like every pld, cheap, and where few sampled releases compose
    (where rdp is loosest) within about 1% of the fine pld; an estimate of the answer to choose
    the fine discretisation from, and a cheap curve for calibration. CannotAnswer as
    :func:`pld_epsilon`."""
    if delta < PLD_MIN_DELTA or exposure.sampling_rate is None:
        return pld_epsilon(z, exposure, neighbors, delta, PLD_MAX_DISCRETIZATION)  # declines or exact
    k, q = exposure.compositions, exposure.sampling_rate
    eps = max(
        _cheap_epsilon(float(z), k, q, kind, float(delta), PLD_PROBE_POINTS)
        for kind in _directions(q, neighbors)
    )
    if not math.isfinite(eps):
        raise CannotAnswer("pld on the probe's grid gave no finite epsilon")
    return eps


def _tail(delta: float) -> float:
    """The truncated mass each composition may send to infinity."""
    return min(1e-15, 1e-4 * delta) / 3.0


# the directions of one release's pair, per neighbour relation (q = 1: REMOVE and ADD coincide)
_DIRECTIONS = {"replace-one": ("replace",), "add-remove": ("remove", "add")}
# as pld's ``beyond``: stop after the first direction of _DIRECTIONS (every finite epsilon is
# above it), a lower bound of the pair's epsilon: calibration's coarse start
FIRST_DIRECTION = -math.inf


def _directions(q: float, neighbors: str) -> tuple[str, ...]:
    return ("remove",) if q == 1.0 and neighbors == "add-remove" else _DIRECTIONS[neighbors]


@functools.lru_cache(maxsize=4096)
def _pld_epsilon(z, k, q, neighbors, delta, discretization, fit=False, extended=True, beyond=math.inf):
    """pld at grid step ``discretization``: the largest over the pair's directions of
    :func:`_direction_epsilon`. With ``fit``, every direction is sized on its probe before any is
    composed (CannotAnswer where the composition would need more than PLD_PROBE_MARGIN x
    PLD_MAX_COARSENING times PLD_COMPOSED_BUDGET points), and the add direction is not built on
    the fine grid where a cheaper grid's epsilon of it (an upper bound of its true epsilon,
    :func:`_bounded_by`) is at most the remove direction's answer: it cannot raise the maximum
    (add is the smaller direction in the fuzz's slow corners, by 1.3 to 4.3 times). Once a
    direction's epsilon exceeds ``beyond``, the next one is not evaluated (:func:`pld_epsilon`);
    each direction's answer is cached, so the full evaluation reuses it."""
    directions = _directions(q, neighbors)
    guess = fit and max(_probed_ratio(z, k, q, kind, delta, discretization) for kind in directions)
    if guess > PLD_PROBE_MARGIN * PLD_MAX_COARSENING:  # every direction sized before any is composed
        raise CannotAnswer(
            f"the composed privacy-loss grid would need about {guess:.3g} times "
            f"{PLD_COMPOSED_BUDGET:.3g} points at discretisation {discretization:.3g}"
        )
    eps = -math.inf
    for kind in directions:
        if not (fit and math.isfinite(eps) and _bounded_by(z, k, q, kind, delta, eps, discretization)):
            eps = max(eps, _direction_epsilon(z, k, q, kind, delta, discretization, fit, extended))
        if eps > beyond:  # a lower bound of the maximum, already above it
            break
    if not math.isfinite(eps):
        raise CannotAnswer("the PLD gave no finite epsilon at this delta")
    return float(eps)


def _bounded_by(z, k, q, kind, delta, eps, discretization) -> bool:
    """True where direction ``kind``'s pld is at most ``eps`` on its probe's grid, on
    PLD_SKIP_POINTS points a release (where the probe is within PLD_SKIP_RATIO times ``eps``
    and that grid is coarser than ``discretization``) or on twice ``discretization`` (where that
    is finer still: fuzz rows 71 and 148, whose add direction is 0.154 and 0.999 on 20,000
    points, 0.068 and 0.215 on twice the step, against the remove direction's 0.070 and
    0.307)."""
    probe = _cheap_epsilon(z, k, q, kind, delta, PLD_PROBE_POINTS)
    skip_step = _probe_step(z, k, q, kind, delta, 0.0, PLD_SKIP_POINTS)
    if probe <= eps or (
        probe <= PLD_SKIP_RATIO * eps
        and skip_step > discretization
        and _cheap_epsilon(z, k, q, kind, delta, PLD_SKIP_POINTS) <= eps
    ):
        return True
    if not 2.0 * discretization < skip_step:
        return False
    try:
        return _direction_epsilon(z, k, q, kind, delta, 2.0 * discretization, True) <= eps
    except (CannotAnswer, OverflowError, FloatingPointError, MemoryError, ValueError):
        return False


@functools.lru_cache(maxsize=4096)
def _direction_epsilon(z, k, q, kind, delta, discretization, fit, extended=True):
    """One direction's pld at grid step ``discretization``. With ``fit``, where the composition
    would need more than PLD_COMPOSED_BUDGET points at that step (estimated on the probe's grid,
    :func:`_probed_ratio`, so that a release over the budget is not built on that step only to
    be sized; else :func:`privzv.tilted_pld.composed_points` of the release, counted before any
    FFT), at the step that fits it (the range scaled to the budget, rounded up to a power of 2
    times the step, so that epsilon is smooth in z between those steps), up to
    PLD_MAX_COARSENING times coarser, and CannotAnswer if even that grid needs more than twice
    the budget (without ``fit``, exactly at the step asked: the convergence checks)."""
    from privzv import tilted_pld

    ratio = fit and _probed_ratio(z, k, q, kind, delta, discretization)
    if not ratio > 1.0:  # within the budget by the probe's estimate: sized exactly on its grid
        shift, tilted = _tilted_release(z, k, q, kind, delta, discretization)
        ratio = fit and tilted_pld.composed_points(tilted, k, _tail(delta)) / PLD_COMPOSED_BUDGET
    if 1.0 < ratio <= PLD_MAX_COARSENING:
        # a power of 2: the step, and so epsilon's smoothness in z, holds over a range of z
        coarser = 2.0 ** math.ceil(math.log2(ratio))
        shift, tilted = _tilted_release(z, k, q, kind, delta, discretization * coarser)
        ratio = tilted_pld.composed_points(tilted, k, _tail(delta)) / PLD_COMPOSED_BUDGET
    if ratio > 2.0:
        raise CannotAnswer(
            f"the composed privacy-loss grid would need {ratio:.3g} times "
            f"{PLD_COMPOSED_BUDGET:.3g} points at discretisation "
            f"{discretization:.3g}"
        )
    try:
        composed = tilted_pld.self_compose(tilted, k, _tail(delta), PLD_MAX_COMPOSED_POINTS, extended)
    except tilted_pld.GridTooLarge as exc:
        raise CannotAnswer(
            f"the composed privacy-loss grid would need {exc} at discretisation {discretization:.3g}"
        ) from None
    return tilted_pld.epsilon(composed, delta) + k * shift


@functools.lru_cache(maxsize=4096)
def _cheap_epsilon(z, k, q, kind, delta, points) -> float:
    """One direction's pld on at most ``points`` points a release (step: its loss span /
    points; for PLD_PROBE_POINTS the grid :func:`_probed_ratio` sizes the composition on), inf
    where that cannot answer. An upper bound of the direction's true epsilon, like every pld."""
    try:
        step = _probe_step(z, k, q, kind, delta, 0.0, points)
        return _direction_epsilon(z, k, q, kind, delta, step, True)
    except (CannotAnswer, OverflowError, FloatingPointError, MemoryError, ValueError):
        return math.inf


def _probe_step(z, k, q, kind, delta, discretization, points=PLD_PROBE_POINTS) -> float:
    """The probe's step at ``discretization``: at most ``points`` points over the loss span."""
    from privzv import gaussian_pmf

    span = gaussian_pmf.loss_span(
        2.0 * z if kind == "replace" else z,
        sampling_prob=q,
        kind=kind,
        log_truncation=_log_truncation(delta, k),
    )
    return max(discretization, span / points)


def _probed_ratio(z, k, q, kind, delta, discretization) -> float:
    """The composition's points at ``discretization`` over PLD_COMPOSED_BUDGET, estimated from
    the release on at most PLD_PROBE_POINTS points (its composed range scaled to the step), or
    counted on the release itself where its grid has at most PLD_SELF_SIZED_POINTS points."""
    from privzv import tilted_pld

    step = _probe_step(z, k, q, kind, delta, discretization)
    if _probe_step(z, k, q, kind, delta, discretization, PLD_SELF_SIZED_POINTS) == discretization:
        step = discretization
    _, probe = _tilted_release(z, k, q, kind, delta, step)
    return tilted_pld.composed_points(probe, k, _tail(delta)) * (step / discretization) / PLD_COMPOSED_BUDGET


def rdp_epsilon(z: float, exposure: Exposure, neighbors: str, delta: float) -> float:
    """RDP epsilon (:mod:`privzv.rdp`, dp-accounting's formulas and default orders); see module
    docs for replace-one."""
    try:
        eps = _rdp_epsilon(float(z), exposure.compositions, exposure.sampling_rate, neighbors, float(delta))
    except (OverflowError, FloatingPointError, ValueError, ZeroDivisionError) as exc:
        raise CannotAnswer(f"RDP failed ({type(exc).__name__})") from None
    if not math.isfinite(eps):
        raise CannotAnswer("RDP gave no finite epsilon at any order")
    return eps


@functools.lru_cache(maxsize=4096)
def _rdp_epsilon(z, k, q, neighbors, delta):
    from privzv import rdp

    if q is None and not float(k).is_integer():  # an effective count (a pooled DP head):
        z, k = z / math.sqrt(k), 1  # k Gaussians at z = one at z / sqrt(k)
    orders = rdp.DEFAULT_ORDERS
    with np.errstate(all="ignore"):
        if q is None or neighbors == "add-remove":
            values = rdp.gaussian_rdp(z, orders, q)
        else:
            values = replace_one_rdp(q, z, orders)
        return rdp.epsilon(orders, int(k) * values, delta)


def rdp_epsilon_floor(z: float, exposure: Exposure, neighbors: str, delta: float) -> float:
    """A lower bound on :func:`rdp_epsilon` from its smallest order alone (one quadrature instead
    of about 150; at noise multiplier 0.009, replace-one, the full one costs 0.2 s): the Renyi
    divergence of a fixed pair does not decrease with the order (van Erven & Harremoes 2014,
    "Renyi divergence and Kullback-Leibler divergence", IEEE Trans. Inf. Theory 60(7), Thm. 3),
    so every order's composed value is at least k D(1.1), here halved to cover the computed
    values' round-off and margins, and the conversion (:func:`privzv.rdp.epsilon`) does not
    decrease in the values. 0 without sampling or where that order gives no finite value."""
    from privzv import rdp

    q = exposure.sampling_rate
    if q is None:
        return 0.0
    first = rdp.DEFAULT_ORDERS[:1]
    with np.errstate(all="ignore"):
        if neighbors == "add-remove":
            value = rdp.gaussian_rdp(float(z), first, q)[0]
        else:
            value = replace_one_rdp(q, float(z), first)[0]
    if not (math.isfinite(value) and value >= 0):
        return 0.0
    floor = np.full(rdp.DEFAULT_ORDERS.shape, 0.5 * exposure.compositions * value)
    return rdp.epsilon(rdp.DEFAULT_ORDERS, floor, delta)


def replace_one_rdp(q: float, z: float, orders) -> np.ndarray:
    """Exact Renyi divergence of order alpha between dp-accounting's replace-one pair of one
    Poisson-sampled Gaussian release, P = (1-q) N(0,1) + q N(-a,1) and Q = (1-q) N(0,1) +
    q N(a,1), a = 1/(2z) (the pair of the PLD path, module docstring), by 1-D quadrature
    (:func:`privzv.rdp.sampled_pair_renyi`). Mironov 2017's Prop. 11 (weak triangle inequality
    through the add-remove neighbour) bounds the same quantity from above and is 15% to several
    times larger (``tests/privzv/test_peer_values.py`` compares both)."""
    from privzv import rdp

    return rdp.sampled_pair_renyi(q, z, orders, "replace-one")


def gdp_epsilon(mu: float, delta: float) -> float:
    """epsilon of a mu-GDP mechanism at delta (Dong, Roth & Su 2022, Cor. 2.13); inf for mu=inf.

    mu = 0 (e.g. an underflowed seed mu for huge sigma) is perfect privacy: epsilon 0.
    """
    if mu == 0:
        return 0.0
    return math.inf if math.isinf(mu) else gdp.epsilon_from_delta(mu, delta)
