"""Accounting and calibration of the DPZV downlink release, per threat model and accountant.

``account`` gives the epsilon that a release's sigma buys; ``calibrate`` gives the smallest sigma
(and noise multiplier sigma / sensitivity) whose epsilon is at most a target. Every answer is a
:class:`Result` that names its threat, accountant and neighbouring relation and says whether it
is a rigorous upper bound. Threats: :mod:`privzv.threats`; accountants: :mod:`privzv.accountants`.
"""
from __future__ import annotations

import dataclasses
import math

from privzv import accountants, gdp
from privzv.accountants import ACCOUNTANTS
from privzv.calibration import smallest_feasible
from privzv.errors import PrivzvError
from privzv.release import THREATS, Release, Schedule
from privzv.threats import Exposure, exposure, releases_per_record

__all__ = ["ACCOUNTANTS", "Result", "account", "calibrate", "account_all", "calibrate_all",
           "releases_per_record"]

# Calibration under pld: a cheap first solve at this many times the account() discretisation.
COARSE_FACTOR = 10.0


@dataclasses.dataclass(frozen=True)
class Result:
    """One accounting answer. ``compositions``: releases composed per record; ``sampling_rate``:
    the Poisson rate that amplifies them (None: no amplification); ``mu``: the GDP parameter for
    the GDP-based accountants (None for pld and rdp). ``sigma`` is the downlink's noise std,
    ``head_sigma`` the head update's (None without a DP head); ``noise_multiplier`` is the
    round's, both combined (:attr:`privzv.release.Release.noise_multiplier`)."""

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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check(delta: float, accountant: str) -> None:
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise PrivzvError(f"delta={delta!r}: must be a number with 0 < delta < 1")
    if accountant not in ACCOUNTANTS:
        raise PrivzvError(f"accountant={accountant!r}: allowed are {', '.join(ACCOUNTANTS)}")


def _threat_text(schedule: Schedule, exp: Exposure) -> str:
    k, q = exp.compositions, exp.sampling_rate
    amp = "no amplification" if q is None else f"Poisson amplification q={q:.6g}"
    return {
        "device": f"device threat: the device chose its batch; record in {k} of its releases, "
                  f"{amp}",
        "eavesdropper": f"eavesdropper threat: all {k} releases, {amp}",
        "secret-subsampling": f"secret-subsampling threat: record in {k} super-batches, "
                              f"server keeps it with {amp}",
    }[schedule.threat]


def epsilon_for_exposure(z: float, release: Release, schedule: Schedule, exp: Exposure,
                         delta: float, accountant: str, discretization: float | None = None
                         ) -> tuple[float, float | None]:
    """(epsilon, mu or None) of noise multiplier z for an exposure (the seed reads the schedule)."""
    if accountant == "seed":
        mu = accountants.seed_mu(z, release.batch_size, schedule.dataset_size, schedule.steps)
        return accountants.gdp_epsilon(mu, delta), mu
    if accountant == "gdp-clt":
        mu = accountants.clt_mu(z, exp)
        return accountants.gdp_epsilon(mu, delta), mu
    if accountant == "rdp":
        return accountants.rdp_epsilon(z, exp, release.neighbors, delta), None
    return accountants.pld_epsilon(z, exp, release.neighbors, delta, discretization), None


def _result(z: float, eps: float, mu: float | None, release: Release, schedule: Schedule,
            exp: Exposure, delta: float, accountant: str) -> Result:
    threat = _threat_text(schedule, exp)
    if accountant == "seed":
        rigorous = False
        note = ("seed accountant (DPZV Theorem VI.5, sigma = 2C sqrt(T)/(D mu)): NOT a rigorous "
                "bound; it scales mu linearly by the sampling rate B/D and ignores the threat "
                f"and the devices (the threat here, {schedule.threat}, does not change it)")
    elif accountant == "gdp-clt":
        rigorous = exp.sampling_rate is None
        note = (f"gdp-clt: {threat}; " + (
            "exact: k Gaussian releases compose to sqrt(k)/z-GDP" if rigorous else
            "APPROXIMATE central-limit value (Bu et al. 2020), not an upper bound"))
    elif accountant == "rdp":
        rigorous = True
        extra = ("; replace-one with sampling bounded by Mironov's weak triangle inequality"
                 if exp.sampling_rate is not None and release.neighbors == "replace-one" else "")
        note = f"rdp (dp-accounting RdpAccountant): {threat}; rigorous upper bound{extra}"
    else:
        rigorous = True
        how = ("exact closed form: k Gaussian releases compose to sqrt(k)/z-GDP"
               if exp.sampling_rate is None else "dp-accounting PLDAccountant, pessimistic")
        note = f"pld ({how}): {threat}; rigorous upper bound"
    k, q = exp.compositions, exp.sampling_rate
    if accountant == "seed":  # the formula composes all T releases at "sampling rate" B/D
        k, q = schedule.steps, release.batch_size / schedule.dataset_size
    noised = release.with_noise_multiplier(z)
    return Result(sigma=noised.sigma, head_sigma=noised.head and noised.head.sigma,
                  noise_multiplier=z, epsilon=eps, delta=delta,
                  accountant=accountant, threat=schedule.threat, neighbors=release.neighbors,
                  rigorous=rigorous, compositions=k, sampling_rate=q, mu=mu, note=note)


def checked_exposure(release: Release, schedule: Schedule, delta: float,
                     accountant: str) -> Exposure:
    """The record's Exposure, after the checks of :func:`account` (PrivzvError on bad input)."""
    _check(delta, accountant)
    if release.sigma is None or not release.sigma > 0:
        raise PrivzvError(f"sigma={release.sigma!r}: must be a number > 0 (sigma 0 gives no "
                          "privacy)")
    return exposure(release, schedule)


def account(release: Release, schedule: Schedule, delta: float,
            accountant: str = "pld") -> Result:
    """The epsilon at ``delta`` that ``release.sigma`` gives under the schedule's threat."""
    exp = checked_exposure(release, schedule, delta, accountant)
    z = release.noise_multiplier
    eps, mu = epsilon_for_exposure(z, release, schedule, exp, delta, accountant)
    return _result(z, eps, mu, release, schedule, exp, delta, accountant)


def calibrate(epsilon: float, delta: float, release: Release, schedule: Schedule,
              accountant: str = "pld") -> Result:
    """The smallest sigma with epsilon(sigma) <= ``epsilon`` at ``delta`` (release.sigma ignored).

    One-sided: the returned Result's epsilon is the accountant's value at the returned sigma,
    re-evaluated, and is <= the target. seed, gdp-clt and unsampled pld are solved in closed
    form; sampled pld and rdp
    by :func:`privzv.calibration.smallest_feasible` (pld: a coarse solve at COARSE_FACTOR times
    the discretisation first, then the account() discretisation; relative precision ~1e-4).
    """
    _check(delta, accountant)
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise PrivzvError(f"epsilon={epsilon!r}: must be a finite number > 0")
    exp = exposure(release, schedule)
    b, d, t = release.batch_size, schedule.dataset_size, schedule.steps

    def evaluate(z, discretization=None):
        return epsilon_for_exposure(z, release, schedule, exp, delta, accountant, discretization)

    if accountant in ("seed", "gdp-clt") or (accountant == "pld" and exp.sampling_rate is None):
        # closed forms; pld without sampling is the exact Gaussian composition (accountants.py)
        mu_target = gdp.mu_from_epsilon(epsilon, delta)
        z = (accountants.seed_noise_multiplier(mu_target, b, d, t) if accountant == "seed"
             else accountants.clt_noise_multiplier(mu_target, exp))
        eps, mu = evaluate(z)
        while eps > epsilon:  # closed forms can land a rounding error above the target
            z *= 1.0 + 1e-12
            eps, mu = evaluate(z)
        return _result(z, eps, mu, release, schedule, exp, delta, accountant)

    def model_mu(z):
        return accountants.clt_mu(z, exp)

    def model_inverse(mu):
        return accountants.clt_noise_multiplier(mu, exp)

    start = None
    if accountant == "pld":
        mu_target = gdp.mu_from_epsilon(epsilon, delta)
        coarse = COARSE_FACTOR * accountants.PLD_DISCRETIZATION * max(1.0, mu_target ** 2)
        start, _ = smallest_feasible(lambda z: evaluate(z, coarse)[0], epsilon, delta, model_mu,
                                     model_inverse, eps_rtol=2e-3)
    z, eps = smallest_feasible(lambda z: evaluate(z)[0], epsilon, delta, model_mu, model_inverse,
                               start=start)
    return _result(z, eps, None, release, schedule, exp, delta, accountant)


def _side_by_side(release: Release, schedule: Schedule, run) -> list[Result]:
    """``run(release, schedule, accountant)`` for seed once, then every threat x rigorous/CLT
    accountant (secret-subsampling only when the schedule has a super_batch)."""
    results = [run(release, schedule, "seed")]
    for threat in THREATS:
        if threat == "secret-subsampling" and schedule.super_batch is None:
            continue
        sched = dataclasses.replace(schedule, threat=threat)
        results.extend(run(release, sched, name) for name in ("pld", "rdp", "gdp-clt"))
    return results


def account_all(release: Release, schedule: Schedule, delta: float) -> list[Result]:
    """:func:`account` for the seed and for every threat x accountant, side by side."""
    return _side_by_side(release, schedule, lambda r, s, a: account(r, s, delta, a))


def calibrate_all(epsilon: float, delta: float, release: Release,
                  schedule: Schedule) -> list[Result]:
    """:func:`calibrate` for the seed and for every threat x accountant, side by side."""
    return _side_by_side(release, schedule, lambda r, s, a: calibrate(epsilon, delta, r, s, a))
