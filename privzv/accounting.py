"""Accounting and calibration of the DPZV downlink release, per threat model and accountant.

``account`` gives the epsilon that a release's sigma buys; ``calibrate`` gives the smallest sigma
(and noise multiplier sigma / sensitivity) whose epsilon is at most a target. Every answer is a
:class:`Result` that names its threat, accountant and neighbouring relation and says whether it
is a rigorous upper bound. Threats: :mod:`privzv.threats`; accountants: registered in
:mod:`privzv.registry`, their math in :mod:`privzv.accountants`.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from privzv import accountants, checks, gdp, mixture, registry, tilted_pld
from privzv.calibration import EPS_RTOL, Z_RANGE, smallest_feasible
from privzv.defaults import ACCOUNTANT
from privzv.errors import PrivzvError
from privzv.registry import Bound, Question
from privzv.release import THREATS, Release, Schedule
from privzv.threats import Exposure, check_objects, exposure, releases_per_record

__all__ = [
    "Result",
    "Unanswered",
    "Bound",
    "account",
    "calibrate",
    "account_all",
    "calibrate_all",
    "account_exposure",
    "calibrate_exposure",
    "evaluate",
    "checked_exposure",
    "releases_per_record",
]

# Calibration under pld: a cheap first solve at this many times the final discretisation.
COARSE_FACTOR = 10.0
# ... and on at most this many grid points per release; where the fine evaluations compose in
# two stages (tilted_pld.STAGED_FROM releases on, the first stage in long double: each costs 5 to
# 8 coarse ones on 20,000 points), on at most COARSE_STAGED_POINTS, near the fine grid (span /
# PLD_MAX_POINTS, a power of 2 coarser where the composition is over its budget): at fuzz rows
# 71 and 148 the coarse answer then lies within 0.25% of the fine one (20,000 points: 20%, 11%)
COARSE_POINTS = 20_000
COARSE_STAGED_POINTS = 75_000
# ... to this precision, relative, in epsilon or in the bracket on z (the fine solve's precision
# is calibration.EPS_RTOL and Z_RTOL; 1e-2 took 7 coarse and 4 fine evaluations at fuzz row 71)
COARSE_RTOL = 2e-3
# Closed-form calibration: relative nudges of z until the re-evaluated epsilon is <= the target.
MAX_NUDGES = 64


@dataclasses.dataclass(frozen=True)
class Result:
    """One accounting answer. ``accountant`` is the accountant that produced ``epsilon`` (for
    ``requested`` "best": the smaller of pld and rdp; after a fallback: the one that answered,
    with ``fallback`` saying why); ``compositions``: releases composed per record;
    ``sampling_rate``: the Poisson rate that amplifies them (None: no amplification); ``mu``:
    the GDP parameter for the GDP-based accountants (None otherwise). With a sampled head,
    ``head_steps`` (T_h) and ``head_sampling_rate`` (q_h) describe its part of the composition
    (:mod:`privzv.mixture`). ``answer`` names the number asked for, which ``float(result)``
    gives: "noise_multiplier" for a calibration, "epsilon" for an accounting. ``sigma`` is the
    downlink's noise std, ``head_sigma`` the head update's (None without a DP head);
    ``noise_multiplier`` is the round's, both combined
    (:attr:`privzv.release.Release.noise_multiplier`)."""

    sigma: float
    noise_multiplier: float
    epsilon: float
    delta: float
    accountant: str
    threat: str
    neighbors: str
    rigorous: bool
    compositions: int | float
    sampling_rate: float | None
    mu: float | None
    note: str
    head_sigma: float | None = None
    requested: str | None = None
    fallback: str | None = None
    head_steps: int | None = None
    head_sampling_rate: float | None = None
    answer: str = "epsilon"

    def __float__(self) -> float:
        """The number asked for: the noise multiplier of a calibration (``answer``
        "noise_multiplier"), the epsilon of an accounting."""
        return float(getattr(self, self.answer))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def __getattr__(name: str) -> tuple[str, ...]:
    """``ACCOUNTANTS``: the registered accountants' names (:mod:`privzv.registry`)."""
    if name == "ACCOUNTANTS":
        return registry.names()
    raise AttributeError(f"module 'privzv.accounting' has no attribute {name!r}")


def _check(delta: float, accountant: str) -> float:
    """``delta`` checked (0 < delta < 1) and the accountant registered, else PrivzvError."""
    registry.get(accountant)
    return checks.number("delta", delta, lo=0, hi=1, lo_open=True, hi_open=True)


def _check_epsilon(epsilon: float) -> float:
    return checks.number("epsilon", epsilon, lo=0, lo_open=True)


def _threat_text(release: Release, schedule: Schedule, exp: Exposure) -> str:
    k, q = exp.compositions, exp.sampling_rate
    amp = "no amplification" if q is None else f"Poisson amplification q={q:.6g}"
    text = {
        "device": f"device threat: the device chose its batch; record in {k} of its releases, {amp}",
        "eavesdropper": f"eavesdropper threat: all {k} releases, {amp}",
        "secret-subsampling": f"secret-subsampling threat: record in {k} super-batches, "
        f"server keeps it with {amp}",
    }[schedule.threat]
    if exp.head_steps is not None and release.head is not None:  # a sampled head (mixture)
        down = "no downlink (withheld)" if release.withholds else text
        return (
            f"{down}; composed with {exp.head_steps} head steps, each on a secret Poisson "
            f"sample of the table at q_h={release.head.sampling_rate:.6g} (amplified against "
            "every party)"
        )
    if release.head is not None and release.head.window:  # privzv.threats: a pooled head
        return (
            f"device threat: record in one pooled head window (q={release.head.window}) per "
            f"epoch, in c of its batches; effective count K = sum (1-w) c + w c^2 = {k:g} "
            f"(head share w={release.head_weight:g}), no amplification"
        )
    if release.head is not None:
        text += (
            f"; each round is the downlink release and the DP head update "
            f"(head share {release.head_share:g} of 1/z^2), composed as one Gaussian"
        )
    return text


def evaluate(
    z: float,
    release: Release,
    schedule: Schedule,
    exp: Exposure,
    delta: float,
    accountant: str,
    coarseness: float = 1.0,
    beyond: float = math.inf,
) -> Bound:
    """The Bound of noise multiplier z for an exposure: the registered accountant's
    (:mod:`privzv.registry`). ``best`` evaluates pld and rdp (each where it answers) and keeps
    the smaller; ``pld`` falls back to rdp, ``rdp`` to pld, and both to the unamplified closed
    form (:func:`privzv.accountants.unamplified_epsilon`), naming which answered. pld
    discretises at ``coarseness`` times :func:`privzv.accountants.pld_discretization` of the rdp
    estimate of the answer (> 1 only for calibration's cheap first solve). Where the answer
    exceeds ``beyond`` (calibration's target), it may be a lower bound of it above ``beyond``
    (:class:`privzv.registry.Question`)."""
    question = Question(release, schedule, exp, delta, beyond)
    return registry.get(accountant).epsilon(z, question, coarseness)


def epsilon_for_exposure(
    z: float, release: Release, schedule: Schedule, exp: Exposure, delta: float, accountant: str
) -> tuple[float, float | None]:
    """(epsilon, mu or None) of noise multiplier z for an exposure (:func:`evaluate`)."""
    bound = evaluate(z, release, schedule, exp, delta, accountant)
    return bound.epsilon, bound.mu


def _result(
    z: float, bound: Bound, release: Release, schedule: Schedule, exp: Exposure, delta: float, accountant: str
) -> Result:
    question = Question(release, schedule, exp, delta)
    rigorous, note = registry.get(accountant).note(
        bound, question, _threat_text(release, schedule, exp), accountant
    )
    k, q = bound.shown or (exp.compositions, exp.sampling_rate)
    noised = release.with_noise_multiplier(z)
    head = release.head
    assert noised.sigma is not None
    return Result(
        sigma=noised.sigma,
        head_sigma=None if noised.head is None else noised.head.sigma,
        noise_multiplier=z,
        epsilon=bound.epsilon,
        delta=delta,
        accountant=bound.accountant,
        threat=schedule.threat,
        neighbors=release.neighbors,
        rigorous=rigorous,
        compositions=k,
        sampling_rate=q,
        mu=bound.mu,
        note=note,
        requested=accountant,
        fallback=bound.fallback,
        head_steps=exp.head_steps,
        head_sampling_rate=None if exp.head_steps is None or head is None else head.sampling_rate,
    )


def checked_exposure(release: Release, schedule: Schedule, delta: float, accountant: str) -> Exposure:
    """The record's Exposure, after the checks of :func:`account` (PrivzvError on bad input)."""
    _check(delta, accountant)
    check_objects(release, schedule)
    if release.sigma is None or not release.sigma > 0:
        raise PrivzvError(f"sigma={release.sigma!r}: must be a number > 0 (sigma 0 gives no privacy)")
    return exposure(release, schedule)


def _finite(result: Result, what: str) -> Result:
    if not math.isfinite(result.epsilon):
        raise PrivzvError(
            f"{what}: epsilon exceeds the floating-point range (no meaningful privacy); give more noise"
        )
    return result


def account(release: Release, schedule: Schedule, delta: float, accountant: str = ACCOUNTANT) -> Result:
    """The epsilon at ``delta`` that ``release.sigma`` gives under the schedule's threat.

    PrivzvError if that epsilon exceeds the floating-point range."""
    return account_exposure(
        release, schedule, checked_exposure(release, schedule, delta, accountant), delta, accountant
    )


def account_exposure(
    release: Release, schedule: Schedule, exp: Exposure, delta: float, accountant: str
) -> Result:
    """:func:`account` for a given Exposure (``release`` must carry its sigma)."""
    delta = _check(delta, accountant)
    z = release.noise_multiplier
    bound = evaluate(z, release, schedule, exp, delta, accountant)
    return _finite(_result(z, bound, release, schedule, exp, delta, accountant), f"sigma={release.sigma!r}")


def calibrate(
    epsilon: float, delta: float, release: Release, schedule: Schedule, accountant: str = ACCOUNTANT
) -> Result:
    """The smallest sigma with epsilon(sigma) <= ``epsilon`` at ``delta`` (release.sigma ignored).

    One-sided: the returned Result's epsilon is the accountant's value at the returned sigma,
    re-evaluated, and is <= the target. seed, gdp-clt and unsampled pld and best are solved in
    closed form; the others by :func:`privzv.calibration.smallest_feasible`
    (relative precision 2e-4 in epsilon; pld: a coarse solve at
    COARSE_FACTOR times the discretisation of :func:`evaluate` first).
    """
    _check(delta, accountant)
    return calibrate_exposure(epsilon, delta, release, schedule, exposure(release, schedule), accountant)


def calibrate_exposure(
    epsilon: float, delta: float, release: Release, schedule: Schedule, exp: Exposure, accountant: str
) -> Result:
    """:func:`calibrate` for a given Exposure (``schedule`` names the threat; the seed reads
    it)."""
    return dataclasses.replace(
        _calibrate_exposure(epsilon, delta, release, schedule, exp, accountant), answer="noise_multiplier"
    )


def _calibrate_exposure(
    epsilon: float, delta: float, release: Release, schedule: Schedule, exp: Exposure, accountant: str
) -> Result:
    delta, epsilon = _check(delta, accountant), _check_epsilon(epsilon)
    acc = registry.get(accountant)

    def bound(z, coarseness=1.0, beyond=math.inf):
        return evaluate(z, release, schedule, exp, delta, accountant, coarseness, beyond)

    z0 = acc.solve(gdp.mu_from_epsilon(epsilon, delta), Question(release, schedule, exp, delta))
    if z0 is not None:  # a closed form; it can land a rounding error above the target
        z = z0
        for _ in range(MAX_NUDGES):
            found = bound(z)
            if found.epsilon <= epsilon:
                return _result(z, found, release, schedule, exp, delta, accountant)
            z *= 1.0 + 1e-12 * 2**_
        raise PrivzvError(f"epsilon={epsilon!r}: the closed form could not be brought below the target")
    if exp.head_steps is not None:
        return _calibrate_mixture(epsilon, delta, release, schedule, exp, accountant, bound)

    if accountants.any_noise_suffices(exp, delta):
        z = Z_RANGE[0]  # any noise meets the target: the bottom of the search range
        return _result(z, bound(z), release, schedule, exp, delta, accountant)

    def model_mu(z):
        return accountants.clt_mu(z, exp)

    def model_inverse(mu):
        return accountants.clt_noise_multiplier(mu, exp)

    start = first_step = None
    try:
        if acc.coarse_start:
            start, first_step = _coarse_start(epsilon, delta, release, exp, bound, model_mu, model_inverse)
        z, _ = smallest_feasible(  # an infeasible z needs no more than a lower bound above the target
            lambda z: bound(z, beyond=epsilon).epsilon,
            epsilon,
            delta,
            model_mu,
            model_inverse,
            start=start,
            first_step=first_step,
        )
    except PrivzvError as exc:
        if acc.fallback is None:
            raise
        # rdp's finite orders (or pld's grids) floor its epsilon: the fallback (the smallest
        # rigorous bound) answers, and says why
        other = calibrate_exposure(epsilon, delta, release, schedule, exp, acc.fallback)
        answered = Bound(
            other.epsilon, other.accountant, other.mu, f"{accountant}: {exc}; {other.accountant} answered"
        )
        return _result(other.noise_multiplier, answered, release, schedule, exp, delta, accountant)
    return _result(z, bound(z), release, schedule, exp, delta, accountant)


def _calibrate_mixture(epsilon, delta, release, schedule, exp, accountant, bound) -> Result:
    """The smallest round-level z (the fixed split, :meth:`privzv.release.Release.split`) whose
    mixture epsilon is <= the target: :func:`privzv.calibration.smallest_feasible` from the
    mixture's GDP model (:func:`privzv.mixture.clt_mu`)."""

    def model_mu(z):
        return mixture.clt_mu(registry.mixture_at(z, release, exp))

    def model_inverse(mu):  # model_mu decreases in z: bisection on log z
        lo, hi = Z_RANGE
        while hi / lo > 1.0 + 1e-9:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if model_mu(mid) > mu else (lo, mid)
        return hi

    z, _ = smallest_feasible(lambda z: bound(z).epsilon, epsilon, delta, model_mu, model_inverse)
    return _result(z, bound(z), release, schedule, exp, delta, accountant)


def _coarse_start(epsilon, delta, release, exp, bound, model_mu, model_inverse):
    """(z, first step): a cheap first solve with pld alone at COARSE_FACTOR times the
    discretisation that the target epsilon calls for, on the remove direction alone (the larger
    on the fine grid in the fuzz's slow corners; the add direction's release cost as much), its
    first composition stage in float64 (where pld cannot answer: ``bound`` at that coarseness),
    to COARSE_RTOL; the fine solve starts where the coarse curve meets the fine solve's aim
    (inside the coarse bracket: at fuzz row 30 the fine answer, at rows 71 and 148 within
    0.03% and 0.2% of it) and takes its first step from there (:func:`_coarse_step`)."""
    disc = COARSE_FACTOR * accountants.pld_discretization(epsilon, exp.compositions, delta)
    points = COARSE_STAGED_POINTS if exp.compositions >= tilted_pld.STAGED_FROM else COARSE_POINTS
    seen = {}

    def coarse(z):
        try:  # a start, not an answer: one direction, float64, at most `points` a release
            step = max(disc, accountants.release_span(z, exp, delta) / points)
            seen[z] = accountants.pld_epsilon(
                z, exp, release.neighbors, delta, step, extended=False, beyond=accountants.FIRST_DIRECTION
            )
        except accountants.CannotAnswer:
            seen[z] = bound(z, COARSE_FACTOR).epsilon
        return seen[z]

    start, _ = smallest_feasible(
        coarse, epsilon, delta, model_mu, model_inverse, eps_rtol=COARSE_RTOL, z_rtol=COARSE_RTOL
    )
    curve = sorted(seen.items())
    at_aim = _coarse_step(curve, start, seen[start], epsilon * (1.0 - 0.5 * EPS_RTOL))
    below = [z for z, e in curve if z < start and e > epsilon]
    if below and max(below) < at_aim <= start:  # inside the coarse bracket
        start = at_aim
    return start, functools.partial(_coarse_step, curve)


def _coarse_step(coarse, z, e, aim):
    """The z where the coarse solve's curve (``coarse``: its (z, epsilon) points, by z) times
    e / coarse(z) meets ``aim``, by interpolating log epsilon against log z between the two
    points around it nearest to z: the fine epsilon is a ratio of the coarse one (0.38 and 0.54
    at fuzz rows 148 and 71 on 20,000 points, 0.993 and 0.999 on COARSE_STAGED_POINTS) that
    changes more slowly in z than either. Where no two points surround it, the slope of the two
    nearest to z. coarse(z), where z is not a point, is interpolated between the two around it."""
    points = [(math.log(x), math.log(v)) for x, v in coarse if 0 < v < math.inf]
    pairs = list(zip(points, points[1:]))
    x = math.log(z)
    here = dict(coarse).get(z)
    inside = [((x0, y0), (x1, y1)) for (x0, y0), (x1, y1) in pairs if x0 < x < x1]
    if here is None and inside:  # between two points: interpolated
        (x0, y0), (x1, y1) = inside[0]
        here = math.exp(y0 + (x - x0) * (y1 - y0) / (x1 - x0))
    if len(points) < 2 or here is None or not 0 < here < math.inf:
        return math.nan  # the caller steps by its model instead
    goal = math.log(aim) - math.log(e) + math.log(here)
    around = [(a, b) for a, b in pairs if (a[1] - goal) * (b[1] - goal) <= 0 and a[1] != b[1]]
    near = around or [p for p in pairs if p[0][1] != p[1][1]]
    if not near:
        return math.nan
    (x0, y0), (x1, y1) = min(near, key=lambda p: abs(p[0][0] + p[1][0] - 2 * x))
    step = x0 + (goal - y0) * (x1 - x0) / (y1 - y0)
    return math.exp(step) if abs(step) < 700 else math.nan


@dataclasses.dataclass(frozen=True)
class Unanswered:
    """A row of :func:`account_all` / :func:`calibrate_all` that has no finite answer (an epsilon
    beyond the floating-point range, an unreachable target): ``reason`` says why. The other
    rows still answer."""

    threat: str
    requested: str
    neighbors: str
    delta: float
    reason: str

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "accountant": None, "answered": False}


def _side_by_side(release: Release, schedule: Schedule, delta: float, run) -> list[Result | Unanswered]:
    """``run(release, schedule, accountant)`` once for each accountant of the ``--all`` table
    that ignores the threat (the seed), then every threat x the others (secret-subsampling only
    when the schedule has a super_batch). A row whose
    accountant has no finite answer becomes an :class:`Unanswered` saying why (the callers
    check the input first, so bad input still raises PrivzvError)."""
    table = [a for a in registry.REGISTRY.values() if a.table]
    rows = [(a.name, schedule) for a in table if a.threats is None] + [
        (a.name, dataclasses.replace(schedule, threat=threat))
        for threat in THREATS
        if threat != "secret-subsampling" or schedule.super_batch is not None
        for a in table
        if a.threats is not None and threat in a.threats
    ]
    results = []
    for name, sched in rows:
        try:
            result = run(release, sched, name)
            if not all(math.isfinite(v) for v in (result.sigma, result.noise_multiplier, result.epsilon)):
                raise PrivzvError("epsilon or sigma exceeds the floating-point range")
        except PrivzvError as exc:
            kind = "rigorous answer" if registry.get(name).rigorous else "answer"
            result = Unanswered(sched.threat, name, release.neighbors, delta, f"no {kind}: {exc}")
        results.append(result)
    return results


def account_all(release: Release, schedule: Schedule, delta: float) -> list[Result | Unanswered]:
    """:func:`account` for the seed and for every threat x accountant, side by side; a row
    without a finite answer is an :class:`Unanswered`."""
    checked_exposure(release, schedule, delta, ACCOUNTANT)  # bad input fails here, not per row
    return _side_by_side(release, schedule, delta, lambda r, s, a: account(r, s, delta, a))


def calibrate_all(
    epsilon: float, delta: float, release: Release, schedule: Schedule
) -> list[Result | Unanswered]:
    """:func:`calibrate` for the seed and for every threat x accountant, side by side; a row
    without a finite answer is an :class:`Unanswered`."""
    _check(delta, ACCOUNTANT)  # bad input fails here, not per row
    _check_epsilon(epsilon)
    exposure(release, schedule)
    return _side_by_side(release, schedule, delta, lambda r, s, a: calibrate(epsilon, delta, r, s, a))
