"""Accounting and calibration of the DPZV downlink release, per threat model and accountant.

``account`` gives the epsilon that a release's sigma buys; ``calibrate`` gives the smallest sigma
(and noise multiplier sigma / sensitivity) whose epsilon is at most a target. Every answer is a
:class:`Result` that names its threat, accountant and neighbouring relation and says whether it
is a rigorous upper bound. Threats: :mod:`privzv.threats`; accountants: :mod:`privzv.accountants`.
"""
from __future__ import annotations

import dataclasses
import math

from privzv import accountants, gdp, mixture
from privzv.accountants import ACCOUNTANTS
from privzv.calibration import Z_RANGE, smallest_feasible
from privzv.errors import PrivzvError
from privzv.release import THREATS, Release, Schedule
from privzv.threats import Exposure, exposure, releases_per_record

__all__ = ["ACCOUNTANTS", "Result", "Unanswered", "Bound", "account", "calibrate", "account_all",
           "calibrate_all", "account_exposure", "calibrate_exposure", "evaluate",
           "checked_exposure", "releases_per_record"]

# Calibration under pld: a cheap first solve at this many times the final discretisation.
COARSE_FACTOR = 10.0
# ... and on at most this many grid points per release
COARSE_POINTS = 20_000
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
    (:mod:`privzv.mixture`). ``sigma`` is the
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
    compositions: int
    sampling_rate: float | None
    mu: float | None
    note: str
    head_sigma: float | None = None
    requested: str | None = None
    fallback: str | None = None
    head_steps: int | None = None
    head_sampling_rate: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Bound:
    """epsilon from one accountant: which one answered (``accountant``), mu for the GDP-based
    ones, and why the requested one did not (``fallback``, None when it did)."""

    epsilon: float
    accountant: str
    mu: float | None = None
    fallback: str | None = None


def _check(delta: float, accountant: str) -> None:
    if not (isinstance(delta, (int, float)) and not isinstance(delta, bool) and 0 < delta < 1):
        raise PrivzvError(f"delta={delta!r}: must be a number with 0 < delta < 1")
    if accountant not in ACCOUNTANTS:
        raise PrivzvError(f"accountant={accountant!r}: allowed are {', '.join(ACCOUNTANTS)}")


def _check_epsilon(epsilon: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise PrivzvError(f"epsilon={epsilon!r}: must be a finite number > 0")


def _threat_text(release: Release, schedule: Schedule, exp: Exposure) -> str:
    k, q = exp.compositions, exp.sampling_rate
    amp = "no amplification" if q is None else f"Poisson amplification q={q:.6g}"
    text = {
        "device": f"device threat: the device chose its batch; record in {k} of its releases, "
                  f"{amp}",
        "eavesdropper": f"eavesdropper threat: all {k} releases, {amp}",
        "secret-subsampling": f"secret-subsampling threat: record in {k} super-batches, "
                              f"server keeps it with {amp}",
    }[schedule.threat]
    if exp.head_steps is not None:   # a sampled head (privzv.mixture)
        down = ("no downlink (withheld)" if release.withholds else text)
        return (f"{down}; composed with {exp.head_steps} head steps, each on a secret Poisson "
                f"sample of the table at q_h={release.head.sampling_rate:.6g} (amplified against "
                "every party)")
    if release.head is not None and release.head.window:   # privzv.threats: a pooled head
        return (f"device threat: record in one pooled head window (q={release.head.window}) per "
                f"epoch, in c of its batches; effective count K = sum (1-w) c + w c^2 = {k:g} "
                f"(head share w={release.head_weight:g}), no amplification")
    if release.head is not None:
        text += (f"; each round is the downlink release and the DP head update "
                 f"(head share {release.head_share:g} of 1/z^2), composed as one Gaussian")
    return text


def _rigorous_bound(z: float, exp: Exposure, neighbors: str, delta: float, order: tuple[str, ...],
                    coarseness: float) -> Bound:
    """The first of ``order`` (pld, rdp) that answers, else the unamplified closed form; for
    ``order`` of length 2 under "best", the smaller of both. Each is a rigorous upper bound."""
    answers, failures = {}, []
    for name in order:
        try:
            if name == "pld":
                estimate = (answers["rdp"] if "rdp" in answers
                            else _estimate(z, exp, neighbors, delta))
                answers[name] = _pld(z, exp, neighbors, delta, estimate, coarseness)
            else:
                answers[name] = accountants.rdp_epsilon(z, exp, neighbors, delta)
        except accountants.CannotAnswer as exc:
            failures.append(f"{name}: {exc}")
    if not answers:
        answers["unamplified"] = accountants.unamplified_epsilon(z, exp, delta)
    elif exp.sampling_rate is not None:   # always valid; wins only where the grids fail
        unamplified = accountants.unamplified_epsilon(z, exp, delta)
        if unamplified < min(answers.values()):
            answers["unamplified"] = unamplified
    name = min(answers, key=answers.get)
    return Bound(answers[name], name, None, "; ".join(failures) or None)


def _pld(z: float, exp: Exposure, neighbors: str, delta: float, estimate: float,
         coarseness: float) -> float:
    """pld at ``coarseness`` times the discretisation that ``estimate`` of the answer calls for
    (a function of z alone, so that calibrate, account and the ledger agree exactly); where the
    estimate (rdp) was more than twice the answer, once more at the discretisation of the answer
    itself, keeping the smaller (both are upper bounds). An rdp estimate 12x too large left
    the step 12x too coarse: 0.12% looser than dp-accounting at q = 1.2e-4, T = 1071."""
    def at(guess):
        disc = coarseness * accountants.pld_discretization(guess, exp.compositions, delta)
        return accountants.pld_epsilon(z, exp, neighbors, delta, disc)

    first = at(estimate)
    if coarseness == 1.0 and 0 < first < estimate / 2:   # not in calibration's coarse solve
        try:
            return min(first, at(first))
        except accountants.CannotAnswer:
            pass
    return first


def _estimate(z: float, exp: Exposure, neighbors: str, delta: float) -> float:
    """A cheap upper estimate of epsilon to choose the PLD discretisation from (rdp, or the
    unamplified closed form where rdp cannot answer)."""
    try:
        return accountants.rdp_epsilon(z, exp, neighbors, delta)
    except accountants.CannotAnswer:
        return accountants.unamplified_epsilon(z, exp, delta)


def evaluate(z: float, release: Release, schedule: Schedule, exp: Exposure, delta: float,
             accountant: str, coarseness: float = 1.0) -> Bound:
    """The Bound of noise multiplier z for an exposure (the seed reads the schedule).

    ``best`` evaluates pld and rdp (each where it answers) and keeps the smaller; ``pld`` falls
    back to rdp, ``rdp`` to pld, and both to the unamplified closed form
    (:func:`privzv.accountants.unamplified_epsilon`), naming which answered. pld discretises
    at ``coarseness`` times :func:`privzv.accountants.pld_discretization` of the rdp estimate of
    the answer (> 1 only for calibration's cheap first solve)."""
    if accountant == "seed":
        mu = accountants.seed_mu(z, release.batch_size, schedule.dataset_size, schedule.steps)
        return Bound(accountants.gdp_epsilon(mu, delta), "seed", mu)
    if exp.head_steps is not None:
        return _mixture_bound(mixture_at(z, release, exp), release.neighbors, delta, accountant)
    if accountant == "gdp-clt":
        mu = accountants.clt_mu(z, exp)
        return Bound(accountants.gdp_epsilon(mu, delta), "gdp-clt", mu)
    if exp.sampling_rate is None and accountant != "rdp":   # exact closed form, below rdp
        return Bound(accountants.unamplified_epsilon(z, exp, delta), "pld")
    if accountants.any_noise_suffices(exp, delta):
        return Bound(0.0, "sampling")
    order = {"best": ("rdp", "pld"), "pld": ("pld", "rdp"), "rdp": ("rdp", "pld")}[accountant]
    bound = _rigorous_bound(z, exp, release.neighbors, delta,
                            order if accountant == "best" else order[:1], coarseness)
    if accountant != "best" and bound.fallback:   # it could not answer: the other one does
        other = _rigorous_bound(z, exp, release.neighbors, delta, order[1:], coarseness)
        bound = dataclasses.replace(other, fallback=f"{bound.fallback}; {other.accountant} "
                                                     "answered")
    return bound


def mixture_at(z: float, release: Release, exp: Exposure) -> mixture.Mixture:
    """The sampled head's composition at round-level z (split by the release's fixed ratio,
    :meth:`privzv.release.Release.split`)."""
    z_down, z_head = release.split(z)
    down = (None if release.withholds or not exp.compositions
            else Exposure(exp.compositions, exp.sampling_rate))
    return mixture.Mixture(down, z_down, exp.head_steps, release.head.sampling_rate, z_head)


def _mixture_bound(m: mixture.Mixture, neighbors: str, delta: float, accountant: str) -> Bound:
    if accountant == "gdp-clt":
        mu = mixture.clt_mu(m)
        return Bound(accountants.gdp_epsilon(mu, delta), "gdp-clt", mu)
    eps, name, why = mixture.epsilon(m, neighbors, delta, accountant)
    return Bound(eps, name, None, why)


def epsilon_for_exposure(z: float, release: Release, schedule: Schedule, exp: Exposure,
                         delta: float, accountant: str) -> tuple[float, float | None]:
    """(epsilon, mu or None) of noise multiplier z for an exposure (:func:`evaluate`)."""
    bound = evaluate(z, release, schedule, exp, delta, accountant)
    return bound.epsilon, bound.mu


_HOW = {
    "pld": "PLD, pessimistic connect-the-dots, tilted FFT composition",
    "rdp": "RDP of the sampled Gaussian, dp-accounting's formulas and conversion",
    "rdp-replace-one": "RDP; replace-one with sampling by exact quadrature of the sampled pair's "
                       "Renyi divergence, dp-accounting's conversion",
    "unamplified": "closed form without amplification: k Gaussian releases are sqrt(k)/z-GDP",
    "mixture": "the downlink's releases composed with the sampled head's steps, "
               "privzv.mixture",
    "sampling": "delta is at least 1 - (1-q)^k, the chance that the record is sampled at all: "
                "(0, delta)-DP at any noise",
}


def _result(z: float, bound: Bound, release: Release, schedule: Schedule, exp: Exposure,
            delta: float, accountant: str) -> Result:
    threat = _threat_text(release, schedule, exp)
    name = bound.accountant
    if name == "seed":
        rigorous = False
        note = ("seed accountant (DPZV Theorem VI.5, sigma = 2C sqrt(T)/(D mu)): NOT a rigorous "
                "bound; it scales mu linearly by the sampling rate B/D and ignores the threat "
                f"and the devices (the threat here, {schedule.threat}, does not change it)")
    elif name == "gdp-clt":
        rigorous = exp.sampling_rate is None and exp.head_steps is None
        note = (f"gdp-clt: {threat}; " + (
            "exact: k Gaussian releases compose to sqrt(k)/z-GDP" if rigorous else
            "APPROXIMATE central-limit value (Bu et al. 2020), not an upper bound"))
    else:
        rigorous = True
        how = (_HOW["mixture"] if exp.head_steps is not None else
               "exact closed form: k Gaussian releases compose to sqrt(k)/z-GDP"
               if exp.sampling_rate is None else _HOW[
                   "rdp-replace-one" if name == "rdp" and release.neighbors == "replace-one"
                   else name])
        chosen = " (best: the smallest rigorous bound)" if accountant == "best" else ""
        fell = f"; fallback: {bound.fallback}" if bound.fallback else ""
        note = f"{name}{chosen} ({how}): {threat}; rigorous upper bound{fell}"
    k, q = exp.compositions, exp.sampling_rate
    if name == "seed":  # the formula composes all T releases at "sampling rate" B/D
        k, q = schedule.steps, release.batch_size / schedule.dataset_size
    noised = release.with_noise_multiplier(z)
    return Result(sigma=noised.sigma, head_sigma=noised.head and noised.head.sigma,
                  noise_multiplier=z, epsilon=bound.epsilon, delta=delta,
                  accountant=name, threat=schedule.threat, neighbors=release.neighbors,
                  rigorous=rigorous, compositions=k, sampling_rate=q, mu=bound.mu, note=note,
                  requested=accountant, fallback=bound.fallback,
                  head_steps=exp.head_steps,
                  head_sampling_rate=None if exp.head_steps is None else release.head.sampling_rate)


def checked_exposure(release: Release, schedule: Schedule, delta: float,
                     accountant: str) -> Exposure:
    """The record's Exposure, after the checks of :func:`account` (PrivzvError on bad input)."""
    _check(delta, accountant)
    if release.sigma is None or not release.sigma > 0:
        raise PrivzvError(f"sigma={release.sigma!r}: must be a number > 0 (sigma 0 gives no "
                          "privacy)")
    return exposure(release, schedule)


def _finite(result: Result, what: str) -> Result:
    if not math.isfinite(result.epsilon):
        raise PrivzvError(f"{what}: epsilon exceeds the floating-point range (no meaningful "
                          "privacy); give more noise")
    return result


def account(release: Release, schedule: Schedule, delta: float,
            accountant: str = "best") -> Result:
    """The epsilon at ``delta`` that ``release.sigma`` gives under the schedule's threat.

    PrivzvError if that epsilon exceeds the floating-point range."""
    return account_exposure(release, schedule,
                            checked_exposure(release, schedule, delta, accountant), delta,
                            accountant)


def account_exposure(release: Release, schedule: Schedule, exp: Exposure, delta: float,
                     accountant: str) -> Result:
    """:func:`account` for a given Exposure (``release`` must carry its sigma)."""
    _check(delta, accountant)
    z = release.noise_multiplier
    bound = evaluate(z, release, schedule, exp, delta, accountant)
    return _finite(_result(z, bound, release, schedule, exp, delta, accountant),
                   f"sigma={release.sigma!r}")


def calibrate(epsilon: float, delta: float, release: Release, schedule: Schedule,
              accountant: str = "best") -> Result:
    """The smallest sigma with epsilon(sigma) <= ``epsilon`` at ``delta`` (release.sigma ignored).

    One-sided: the returned Result's epsilon is the accountant's value at the returned sigma,
    re-evaluated, and is <= the target. seed, gdp-clt and unsampled pld and best are solved in
    closed form; the others by :func:`privzv.calibration.smallest_feasible`
    (relative precision 2e-4 in epsilon; pld: a coarse solve at
    COARSE_FACTOR times the discretisation of :func:`evaluate` first).
    """
    _check(delta, accountant)
    return calibrate_exposure(epsilon, delta, release, schedule, exposure(release, schedule),
                              accountant)


def calibrate_exposure(epsilon: float, delta: float, release: Release, schedule: Schedule,
                       exp: Exposure, accountant: str) -> Result:
    """:func:`calibrate` for a given Exposure (``schedule`` names the threat; the seed reads
    it)."""
    _check(delta, accountant)
    _check_epsilon(epsilon)
    b, d, t = release.batch_size, schedule.dataset_size, schedule.steps

    def bound(z, coarseness=1.0):
        return evaluate(z, release, schedule, exp, delta, accountant, coarseness)

    if exp.head_steps is not None and accountant != "seed":
        return _calibrate_mixture(epsilon, delta, release, schedule, exp, accountant, bound)
    if accountant in ("seed", "gdp-clt") or (exp.sampling_rate is None and accountant != "rdp"):
        # closed forms; without sampling pld and best are the exact Gaussian composition
        mu_target = gdp.mu_from_epsilon(epsilon, delta)
        z = (accountants.seed_noise_multiplier(mu_target, b, d, t) if accountant == "seed"
             else accountants.clt_noise_multiplier(mu_target, exp))
        for _ in range(MAX_NUDGES):  # closed forms can land a rounding error above the target
            found = bound(z)
            if found.epsilon <= epsilon:
                return _result(z, found, release, schedule, exp, delta, accountant)
            z *= 1.0 + 1e-12 * 2 ** _
        raise PrivzvError(f"epsilon={epsilon!r}: the closed form could not be brought below "
                          "the target")

    if accountants.any_noise_suffices(exp, delta):
        z = Z_RANGE[0]     # any noise meets the target: the bottom of the search range
        return _result(z, bound(z), release, schedule, exp, delta, accountant)

    def model_mu(z):
        return accountants.clt_mu(z, exp)

    def model_inverse(mu):
        return accountants.clt_noise_multiplier(mu, exp)

    start = slope = None
    try:
        if accountant in ("pld", "best"):
            start, slope = _coarse_start(epsilon, delta, release, exp, bound, model_mu,
                                         model_inverse)
        z, _ = smallest_feasible(lambda z: bound(z).epsilon, epsilon, delta, model_mu,
                                 model_inverse, start=start, slope=slope)
    except PrivzvError as exc:
        if accountant == "best":
            raise
        # rdp's finite orders (or pld's grids) floor its epsilon: the smallest rigorous bound
        # answers, and says why
        other = calibrate_exposure(epsilon, delta, release, schedule, exp, "best")
        answered = Bound(other.epsilon, other.accountant, other.mu,
                         f"{accountant}: {exc}; {other.accountant} answered")
        return _result(other.noise_multiplier, answered, release, schedule, exp, delta, accountant)
    return _result(z, bound(z), release, schedule, exp, delta, accountant)


def _calibrate_mixture(epsilon, delta, release, schedule, exp, accountant, bound) -> Result:
    """The smallest round-level z (the fixed split, :meth:`privzv.release.Release.split`) whose
    mixture epsilon is <= the target: :func:`privzv.calibration.smallest_feasible` from the
    mixture's GDP model (:func:`privzv.mixture.clt_mu`)."""
    def model_mu(z):
        return mixture.clt_mu(mixture_at(z, release, exp))

    def model_inverse(mu):   # model_mu decreases in z: bisection on log z
        lo, hi = Z_RANGE
        while hi / lo > 1.0 + 1e-9:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if model_mu(mid) > mu else (lo, mid)
        return hi

    z, _ = smallest_feasible(lambda z: bound(z).epsilon, epsilon, delta, model_mu, model_inverse)
    return _result(z, bound(z), release, schedule, exp, delta, accountant)


def _coarse_start(epsilon, delta, release, exp, bound, model_mu, model_inverse):
    """(z, slope): a cheap first solve with pld alone at COARSE_FACTOR times the discretisation
    that the target epsilon calls for (where pld cannot answer: ``bound`` at that coarseness),
    and the slope of log epsilon against log z there, which the fine solve's first step uses."""
    disc = COARSE_FACTOR * accountants.pld_discretization(epsilon, exp.compositions, delta)
    seen = {}

    def coarse(z):
        try:   # on at most COARSE_POINTS points per release: a start, not an answer
            step = max(disc, accountants.release_span(z, exp, delta) / COARSE_POINTS)
            seen[z] = accountants.pld_epsilon(z, exp, release.neighbors, delta, step)
        except accountants.CannotAnswer:
            seen[z] = bound(z, COARSE_FACTOR).epsilon
        return seen[z]

    start, e = smallest_feasible(coarse, epsilon, delta, model_mu, model_inverse, eps_rtol=2e-3)
    others = [(z, v) for z, v in seen.items() if z != start and 0 < v != e]
    if not others or not e > 0:
        return start, None
    z, v = min(others, key=lambda p: abs(math.log(p[0] / start)))
    return start, (math.log(v) - math.log(e)) / (math.log(z) - math.log(start))


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


def _side_by_side(release: Release, schedule: Schedule, delta: float,
                  run) -> list[Result | Unanswered]:
    """``run(release, schedule, accountant)`` for seed once, then every threat x rigorous/CLT
    accountant (secret-subsampling only when the schedule has a super_batch). A row whose
    accountant has no finite answer becomes an :class:`Unanswered` saying why (the callers
    check the input first, so bad input still raises PrivzvError)."""
    rows = [("seed", schedule)] + [
        (name, dataclasses.replace(schedule, threat=threat)) for threat in THREATS
        if threat != "secret-subsampling" or schedule.super_batch is not None
        for name in ("pld", "rdp", "gdp-clt")]
    results = []
    for name, sched in rows:
        try:
            result = run(release, sched, name)
            if not all(math.isfinite(v) for v in (result.sigma, result.noise_multiplier,
                                                   result.epsilon)):
                raise PrivzvError("epsilon or sigma exceeds the floating-point range")
        except PrivzvError as exc:
            kind = "rigorous answer" if name in accountants.RIGOROUS else "answer"
            result = Unanswered(sched.threat, name, release.neighbors, delta,
                                f"no {kind}: {exc}")
        results.append(result)
    return results


def account_all(release: Release, schedule: Schedule,
                delta: float) -> list[Result | Unanswered]:
    """:func:`account` for the seed and for every threat x accountant, side by side; a row
    without a finite answer is an :class:`Unanswered`."""
    checked_exposure(release, schedule, delta, "best")   # bad input fails here, not per row
    return _side_by_side(release, schedule, delta, lambda r, s, a: account(r, s, delta, a))


def calibrate_all(epsilon: float, delta: float, release: Release,
                  schedule: Schedule) -> list[Result | Unanswered]:
    """:func:`calibrate` for the seed and for every threat x accountant, side by side; a row
    without a finite answer is an :class:`Unanswered`."""
    _check(delta, "best")   # bad input fails here, not per row
    _check_epsilon(epsilon)
    exposure(release, schedule)
    return _side_by_side(release, schedule, delta,
                         lambda r, s, a: calibrate(epsilon, delta, r, s, a))
