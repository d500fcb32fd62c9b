"""Accountants as registered objects (compare Opacus's ``register_accountant`` and dp-accounting's
``PrivacyAccountant``): each declares its name, whether its answers are rigorous upper bounds,
the threats it answers, its epsilon and its closed-form calibration. Every entry point (the
Python API, the ledger, ``privzv calibrate/account`` and their ``--all`` tables) finds
accountants here, so adding one is one :func:`register_accountant` call.

The built-ins: ``pld`` and ``rdp`` (rigorous, each falling back to the other), ``best`` (the
smaller of both), ``gdp-clt`` (Bu et al. 2020's CLT, approximate) and ``seed`` (the DPZV paper's
formula, not a bound, blind to the threat). The math is in :mod:`privzv.accountants`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from privzv import accountants, mixture
from privzv.errors import PrivzvError
from privzv.release import THREATS, Release, Schedule
from privzv.threats import Exposure


@dataclasses.dataclass(frozen=True)
class Bound:
    """epsilon from one accountant: which one answered (``accountant``), mu for the GDP-based
    ones, and why the requested one did not (``fallback``, None when it did). ``shown``: the
    (compositions, sampling rate) the answer describes when not the exposure's (the seed's)."""

    epsilon: float
    accountant: str
    mu: float | None = None
    fallback: str | None = None
    shown: tuple[int, float] | None = None


@dataclasses.dataclass(frozen=True)
class Question:
    """What an accountant is asked about: the release, its schedule, the record's exposure under
    the schedule's threat, and delta. ``beyond`` (calibration's target): where the answer
    exceeds it, an accountant may answer any lower bound of it that still exceeds it."""

    release: Release
    schedule: Schedule
    exp: Exposure
    delta: float
    beyond: float = math.inf


@dataclasses.dataclass(frozen=True)
class Accountant:
    """One accountant. ``epsilon(z, question, coarseness)`` is its Bound at noise multiplier z
    (``coarseness`` > 1 only for calibration's cheap first solve); ``solve(mu, question)`` the
    closed-form z whose GDP mu is ``mu``, or None where it has none (calibration then searches);
    ``note(bound, question, threat_text, requested)`` the answer's (rigorous, note).
    ``threats``: the threats it answers (None: it ignores the threat, one row in ``--all``);
    ``table``: a row of ``--all``; ``fallback``: the accountant whose calibration answers when
    this one's cannot; ``coarse_start``: calibrate from a coarse pld solve; ``order`` and
    ``smallest``: the rigorous grids it evaluates (the first that answers, or the smallest)."""

    name: str
    rigorous: bool
    epsilon: Callable[[float, Question, float], Bound]
    note: Callable[[Bound, Question, str, str], tuple[bool, str]]
    solve: Callable[[float, Question], float | None] = lambda mu, q: None
    threats: tuple[str, ...] | None = THREATS
    summary: str = ""
    table: bool = True
    fallback: str | None = None
    coarse_start: bool = False
    order: tuple[str, ...] = ()
    smallest: bool = False


REGISTRY: dict[str, Accountant] = {}


def register_accountant(accountant: Accountant) -> Accountant:
    """Add ``accountant`` (its name must be new); it is then a choice of every entry point."""
    if accountant.name in REGISTRY:
        raise PrivzvError(f"accountant {accountant.name!r}: already registered")
    REGISTRY[accountant.name] = accountant
    return accountant


def unregister_accountant(name: str) -> None:
    """Remove a registered accountant (tests register toys)."""
    REGISTRY.pop(name, None)


def names(*, rigorous: bool | None = None) -> tuple[str, ...]:
    """The registered accountants' names (only the rigorous ones, or only the others, if asked)."""
    return tuple(n for n, a in REGISTRY.items() if rigorous is None or a.rigorous == rigorous)


def get(name: object) -> Accountant:
    """The accountant named ``name``, else PrivzvError listing the allowed names."""
    if not (isinstance(name, str) and name in REGISTRY):
        raise PrivzvError(f"accountant={name!r}: allowed are {', '.join(REGISTRY)}")
    return REGISTRY[name]


# ------------------------------------------------------------------ the rigorous grids
_HOW = {
    "pld": "PLD, pessimistic connect-the-dots, tilted FFT composition",
    "rdp": "RDP of the sampled Gaussian, dp-accounting's formulas and conversion",
    "rdp-replace-one": "RDP; replace-one with sampling by exact quadrature of the sampled pair's "
    "Renyi divergence, dp-accounting's conversion",
    "unamplified": "closed form without amplification: k Gaussian releases are sqrt(k)/z-GDP",
    "mixture": "the downlink's releases composed with the sampled head's steps, privzv.mixture",
    "sampling": "delta is at least 1 - (1-q)^k, the chance that the record is sampled at all: "
    "(0, delta)-DP at any noise",
}


def _estimate(z: float, exp: Exposure, neighbors: str, delta: float, below: float = math.inf) -> float:
    """A cheap upper estimate of epsilon to choose the PLD discretisation from (rdp, or the
    unamplified closed form where rdp cannot answer); inf, without computing rdp, where both are
    provably above ``below`` (:func:`privzv.accountants.rdp_epsilon_floor`): :func:`_pld` then
    takes the same branch."""
    if below < accountants.unamplified_epsilon(z, exp, delta) and below < accountants.rdp_epsilon_floor(
        z, exp, neighbors, delta
    ):
        return math.inf
    try:
        return accountants.rdp_epsilon(z, exp, neighbors, delta)
    except accountants.CannotAnswer:
        return accountants.unamplified_epsilon(z, exp, delta)


def _pld(
    z: float,
    exp: Exposure,
    neighbors: str,
    delta: float,
    estimate: float | Callable[[float], float],
    coarseness: float,
    beyond: float = math.inf,
) -> float:
    """pld at ``coarseness`` times the discretisation that an estimate of the answer calls for
    (a function of z alone, so that calibrate, account and the ledger agree exactly): pld on the
    probes' grids (:func:`privzv.accountants.probe_pld_epsilon`) where it is below ``estimate``
    (rdp; up to 3e3 times the answer in the fuzz's slow corners) and pld answers on the grid it
    calls for, else ``estimate``; where that estimate was more than twice the answer, once more
    at the discretisation of the answer itself, keeping the smaller (both are upper bounds). An
    rdp estimate 12x too large left the step 12x too coarse: 0.12% looser than dp-accounting at
    q = 1.2e-4, T = 1071. ``estimate`` may be a function of the probe's epsilon giving it
    (:func:`_estimate`: computed only where it decides the step). Above ``beyond`` the answer may
    be a lower bound of it (:func:`privzv.accountants.pld_epsilon`), still above ``beyond``."""

    def disc(guess):
        return coarseness * accountants.pld_discretization(guess, exp.compositions, delta)

    def at(guess, beyond=math.inf):
        return accountants.pld_epsilon(z, exp, neighbors, delta, disc(guess), beyond=beyond)

    try:
        probe = accountants.probe_pld_epsilon(z, exp, neighbors, delta)
    except accountants.CannotAnswer:
        probe = math.inf
    lazy, guess = (estimate, estimate(probe)) if callable(estimate) else (None, estimate)
    first = None  # guess: inf where rdp is provably above the probe (:func:`_estimate`)
    if probe < guess:
        try:
            first, guess = at(probe, beyond), probe
        except accountants.CannotAnswer:
            if lazy is not None:  # needed after all
                guess = lazy(math.inf)
    if first is None:
        first = at(guess, beyond)
    if coarseness == 1.0 and 0 < first < guess / 2:  # not in calibration's coarse solve
        if first > beyond:  # maybe a lower bound: the grid for the answer needs the answer,
            if not accountants.pld_grid_fits(z, exp, delta, disc(guess / 2)):
                return first  # unless no grid that fine fits (every smaller guess's is finer)
            first = at(guess)
        try:  # min(first, a lower bound above beyond) is one too
            return min(first, at(first, beyond))
        except accountants.CannotAnswer:
            pass
    return first


def _rigorous_bound(
    z: float,
    exp: Exposure,
    neighbors: str,
    delta: float,
    order: tuple[str, ...],
    coarseness: float,
    beyond: float = math.inf,
) -> Bound:
    """The first of ``order`` (pld, rdp) that answers, else the unamplified closed form; for
    ``order`` of length 2 under "best", the smaller of both. Each is a rigorous upper bound; pld
    above ``beyond`` maybe a lower bound of its own, above ``beyond`` (:func:`_pld`), and so the
    smallest (the smallest of numbers, one of them replaced by a lower bound above ``beyond``,
    is above ``beyond`` exactly where the true smallest is)."""
    answers: dict[str, float] = {}
    failures = []
    for name in order:
        try:
            if name == "pld":
                answers[name] = _pld(
                    z,
                    exp,
                    neighbors,
                    delta,
                    answers["rdp"]
                    if "rdp" in answers
                    else lambda probe: _estimate(z, exp, neighbors, delta, probe),
                    coarseness,
                    beyond,
                )
            else:
                answers[name] = accountants.rdp_epsilon(z, exp, neighbors, delta)
        except accountants.CannotAnswer as exc:
            failures.append(f"{name}: {exc}")
    if not answers:
        answers["unamplified"] = accountants.unamplified_epsilon(z, exp, delta)
    elif exp.sampling_rate is not None:  # always valid; wins only where the grids fail
        unamplified = accountants.unamplified_epsilon(z, exp, delta)
        if unamplified < min(answers.values()):
            answers["unamplified"] = unamplified
    name = min(answers, key=lambda n: answers[n])
    return Bound(answers[name], name, None, "; ".join(failures) or None)


def mixture_at(z: float, release: Release, exp: Exposure) -> mixture.Mixture:
    """The sampled head's composition at round-level z (split by the release's fixed ratio,
    :meth:`privzv.release.Release.split`)."""
    z_down, z_head = release.split(z)
    assert z_head is not None and release.head is not None and exp.head_steps is not None
    assert release.head.sampling_rate is not None
    down = (
        None if release.withholds or not exp.compositions else Exposure(exp.compositions, exp.sampling_rate)
    )
    return mixture.Mixture(down, z_down, exp.head_steps, release.head.sampling_rate, z_head)


def _grid_epsilon(name: str) -> Callable[[float, Question, float], Bound]:
    """The epsilon of a rigorous grid accountant (its ``order`` and ``smallest``): the exact
    closed form without sampling where pld is among those it evaluates, (0, delta) where
    sampling alone gives it, else the grids, falling back along ``order``."""

    def epsilon(z: float, q: Question, coarseness: float) -> Bound:
        acc, exp, neighbors = REGISTRY[name], q.exp, q.release.neighbors
        used = acc.order if acc.smallest else acc.order[:1]
        if exp.head_steps is not None:
            eps, answered, why = mixture.epsilon(mixture_at(z, q.release, exp), neighbors, q.delta, name)
            return Bound(eps, answered, None, why)
        if exp.sampling_rate is None and "pld" in used:  # exact closed form, below rdp
            return Bound(accountants.unamplified_epsilon(z, exp, q.delta), "pld")
        if accountants.any_noise_suffices(exp, q.delta):
            return Bound(0.0, "sampling")
        bound = _rigorous_bound(z, exp, neighbors, q.delta, used, coarseness, q.beyond)
        if not acc.smallest and bound.fallback:  # it could not answer: the next one does
            other = _rigorous_bound(z, exp, neighbors, q.delta, acc.order[1:], coarseness)
            bound = dataclasses.replace(other, fallback=f"{bound.fallback}; {other.accountant} answered")
        return bound

    return epsilon


def _gaussian_solve(mu: float, q: Question) -> float | None:
    """z of k unsampled Gaussian releases at GDP ``mu`` (exact), None with sampling or a head."""
    if q.exp.sampling_rate is not None or q.exp.head_steps is not None:
        return None
    return accountants.clt_noise_multiplier(mu, q.exp)


def _rigorous_note(bound: Bound, q: Question, threat: str, requested: str) -> tuple[bool, str]:
    exp, name = q.exp, bound.accountant
    how = (
        _HOW["mixture"]
        if exp.head_steps is not None
        else "exact closed form: k Gaussian releases compose to sqrt(k)/z-GDP"
        if exp.sampling_rate is None
        else _HOW["rdp-replace-one" if name == "rdp" and q.release.neighbors == "replace-one" else name]
    )
    chosen = " (best: the smallest rigorous bound)" if REGISTRY[requested].smallest else ""
    fell = f"; fallback: {bound.fallback}" if bound.fallback else ""
    return True, f"{name}{chosen} ({how}): {threat}; rigorous upper bound{fell}"


# ------------------------------------------------------------------ the GDP accountants
def _clt_epsilon(z: float, q: Question, coarseness: float) -> Bound:
    m = None if q.exp.head_steps is None else mixture_at(z, q.release, q.exp)
    mu = accountants.clt_mu(z, q.exp) if m is None else mixture.clt_mu(m)
    return Bound(accountants.gdp_epsilon(mu, q.delta), "gdp-clt", mu)


def _clt_solve(mu: float, q: Question) -> float | None:
    return None if q.exp.head_steps is not None else accountants.clt_noise_multiplier(mu, q.exp)


def _clt_note(bound: Bound, q: Question, threat: str, requested: str) -> tuple[bool, str]:
    exact = q.exp.sampling_rate is None and q.exp.head_steps is None
    return exact, (
        f"gdp-clt: {threat}; "
        + (
            "exact: k Gaussian releases compose to sqrt(k)/z-GDP"
            if exact
            else "APPROXIMATE central-limit value (Bu et al. 2020), not an upper bound"
        )
    )


def seed_rate(q: Question) -> tuple[int, float]:
    """(T, the seed formula's "sampling rate"): B/D, or for a ``sample_rate`` question (an
    eavesdropper's Poisson rate given directly) that rate."""
    rate = q.release.batch_size / q.schedule.dataset_size
    if q.schedule.threat == "eavesdropper" and q.exp.sampling_rate is not None:
        rate = q.exp.sampling_rate
    return q.schedule.steps, rate


def _seed_epsilon(z: float, q: Question, coarseness: float) -> Bound:
    steps, rate = seed_rate(q)
    mu = accountants.seed_mu(z, rate, steps)
    return Bound(accountants.gdp_epsilon(mu, q.delta), "seed", mu, shown=(steps, rate))


def _seed_solve(mu: float, q: Question) -> float:
    steps, rate = seed_rate(q)
    return accountants.seed_noise_multiplier(mu, rate, steps)


def _seed_note(bound: Bound, q: Question, threat: str, requested: str) -> tuple[bool, str]:
    return False, (
        "seed accountant (DPZV Theorem VI.5, sigma = 2C sqrt(T)/(D mu)): NOT a "
        "rigorous bound; it scales mu linearly by the sampling rate B/D and ignores "
        f"the threat and the devices (the threat here, {q.schedule.threat}, does not "
        "change it)"
    )


for _accountant in (
    Accountant(
        "best",
        True,
        _grid_epsilon("best"),
        _rigorous_note,
        _gaussian_solve,
        summary="the smaller of the rigorous pld and rdp bounds, naming which",
        table=False,
        coarse_start=True,
        order=("rdp", "pld"),
        smallest=True,
    ),
    Accountant(
        "pld",
        True,
        _grid_epsilon("pld"),
        _rigorous_note,
        _gaussian_solve,
        summary="privacy-loss distribution (dp-accounting's, tilted FFT)",
        fallback="best",
        coarse_start=True,
        order=("pld", "rdp"),
    ),
    Accountant(
        "rdp",
        True,
        _grid_epsilon("rdp"),
        _rigorous_note,
        summary="Renyi DP (dp-accounting's formulas and conversion)",
        fallback="best",
        order=("rdp", "pld"),
    ),
    Accountant(
        "gdp-clt",
        False,
        _clt_epsilon,
        _clt_note,
        _clt_solve,
        summary="Bu et al. 2020's central-limit mu: approximate, not a bound",
    ),
    Accountant(
        "seed",
        False,
        _seed_epsilon,
        _seed_note,
        _seed_solve,
        threats=None,
        summary="the DPZV paper's Theorem VI.5: not a bound, ignores the threat",
    ),
):
    register_accountant(_accountant)
