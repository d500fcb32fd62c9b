"""Audit one release under a schedule: the LR attacker's lower bound beside privzv's upper bound."""

from __future__ import annotations

import numpy as np

from privzv import accounting, gdp
from privzv.attacks import audit, likelihood_ratio
from privzv.errors import PrivzvError
from privzv.release import Release, Schedule

# Bonferroni candidates for z (N(0,1) when out): fixed before any trial is run.
Z_THRESHOLDS = np.linspace(-3.0, 12.0, 151)
MAX_SUBSAMPLED_DRAWS = 2e9  # k x trials per class under subsampling (chunked, ~minutes at most)


def audit_release(
    release: Release,
    schedule: Schedule,
    delta: float,
    *,
    accountant: str = "pld",
    trials: int = 20000,
    alpha: float = 0.05,
    method: str = "bonferroni",
    seed: int = 0,
) -> dict:
    """Simulate the optimal attacker on one record's releases and bound (eps, mu) from below.

    ``device`` threat: the attacker knows which k releases hold the record
    (``likelihood_ratio.simulate``; ``mu_exact`` = sqrt(k)*sensitivity/sigma). ``eavesdropper``
    and ``secret-subsampling``: each of the k releases holds it with probability q, unknown to
    the attacker (``likelihood_ratio.simulate_subsampled``, the exact LR of the mixtures; its
    threshold is chosen on held-out trials, method "split"; ``mu_exact`` None). The upper bound
    is ``privzv.accounting.account`` for the same release, schedule, delta and accountant.
    """
    exp = accounting.checked_exposure(release, schedule, delta, accountant)
    if not float(exp.compositions).is_integer():  # a pooled DP head (privzv.threats)
        raise PrivzvError(
            f"effective count {exp.compositions:g}: the release audit simulates k "
            "identical releases; a pooled DP head (head window >= 1) composes "
            "unequal ones, so audit it with head window 0"
        )
    k, q = int(exp.compositions), exp.sampling_rate
    upper = accounting.account(release, schedule, delta, accountant)
    if schedule.threat == "device" or q is None:
        trial_set = likelihood_ratio.simulate(release, k, trials, seed=seed)
        bound = audit.audit_scores(
            trial_set.scores_in,
            trial_set.scores_out,
            delta,
            alpha=alpha,
            method=method,
            thresholds=Z_THRESHOLDS,
            seed=seed,
        )
    else:
        if k * trials > MAX_SUBSAMPLED_DRAWS:
            raise PrivzvError(
                f"--trials {trials}: {k} releases per trial x {trials} trials is over "
                f"{MAX_SUBSAMPLED_DRAWS:.0e} draws per class; use fewer trials"
            )
        trial_set = likelihood_ratio.simulate_subsampled(release, k, q, trials, seed=seed)
        bound = audit.audit_scores(
            trial_set.scores_in, trial_set.scores_out, delta, alpha=alpha, method="split", seed=seed
        )
    return {
        "lower": bound.to_dict(),
        "upper": upper.to_dict(),
        "mu_exact": None if np.isnan(trial_set.mu) else trial_set.mu,
        "threat": schedule.threat,
        "sampling_rate": q,
        "releases_per_record": k,
        "sigma": release.sigma,
        "sensitivity": release.sensitivity,
        "noise": "scalar" if release.dim == 1 else "vector",
        "dim": release.dim,
        "aggregate": release.aggregate,
        "protects": release.protects,
        "trials": trials,
        "seed": seed,
    }


def claimed_mu(upper: dict, delta: float, convert: bool = True) -> float | None:
    """The claim as a GDP parameter: the accountant's mu, else (``convert``) the mu whose
    (eps, delta) curve passes through the claimed (eps, delta) (``privzv.gdp.mu_from_epsilon``).
    The conversion is exact under the device threat, where the release is a composition of
    Gaussians and so exactly GDP; a subsampled release is not GDP, so there it is not made."""
    if upper.get("mu") is not None:
        return float(upper["mu"])
    eps = upper.get("epsilon")
    if not convert or eps is None or not np.isfinite(eps):
        return None
    return float(gdp.mu_from_epsilon(eps, delta))


def refutation(lower: dict, upper: dict, delta: float, threat: str = "device") -> dict:
    """Is the claimed guarantee refuted? Yes when eps_lb > claimed eps OR mu_lb > claimed mu.

    With ``method="bonferroni"`` both lower bounds come from the same family of Clopper-Pearson
    bounds, which hold all at once with probability 1 - alpha, so the decision has confidence
    1 - alpha; with ``"split"`` the two thresholds differ and a union bound gives 1 - 2 alpha.
    (At many trials eps_lb saturates -- no false positive left to count -- long before mu_lb does,
    so deciding on eps_lb alone misses refutations the mu bound proves.)
    """
    mu_claim = claimed_mu(upper, delta, convert=threat == "device")
    by = []
    if upper.get("epsilon") is not None and lower["eps_lb"] > upper["epsilon"]:
        by.append("epsilon")
    if mu_claim is not None and lower["mu_lb"] > mu_claim:
        by.append("mu")
    alpha = lower["alpha"] * (1 if lower["method"] == "bonferroni" else 2)
    return {"refuted": bool(by), "refuted_by": by, "claimed_mu": mu_claim, "decision_confidence": 1 - alpha}
