"""Audit one release under a schedule: the LR attacker's lower bound beside privzv's upper bound."""
from __future__ import annotations

import numpy as np

from privzv.attacks import audit, likelihood_ratio
from privzv import accounting, gdp
from privzv.errors import PrivzvError
from privzv.release import Release, Schedule

# Bonferroni candidates for z (N(0,1) when out): fixed before any trial is run.
Z_THRESHOLDS = np.linspace(-3.0, 12.0, 151)


def audit_release(release: Release, schedule: Schedule, delta: float, *, accountant: str = "pld",
                  trials: int = 20000, alpha: float = 0.05, method: str = "bonferroni",
                  seed: int = 0) -> dict:
    """Simulate the optimal attacker on one record's releases and bound (eps, mu) from below.

    Only the ``device`` threat is simulated (the attacker knows which k releases hold the record);
    other threats amplify by subsampling and need a different attacker. The upper bound is
    ``privzv.accounting.account`` for the same release, schedule, delta and accountant;
    ``mu_exact`` is the simulated mechanism's GDP parameter sqrt(k)*sensitivity/sigma.
    """
    if schedule.threat != "device":
        raise PrivzvError(f"--threat {schedule.threat}: the likelihood-ratio audit simulates "
                          "the device threat only")
    k = int(accounting.releases_per_record(release, schedule))
    upper = accounting.account(release, schedule, delta, accountant)
    trial_set = likelihood_ratio.simulate(release, k, trials, seed=seed)
    bound = audit.audit_scores(trial_set.scores_in, trial_set.scores_out, delta, alpha=alpha,
                               method=method, thresholds=Z_THRESHOLDS, seed=seed)
    return {
        "lower": bound.to_dict(),
        "upper": upper.to_dict(),
        "mu_exact": trial_set.mu,
        "releases_per_record": k,
        "sigma": release.sigma,
        "sensitivity": release.sensitivity,
        "noise": "scalar" if release.dim == 1 else "vector",
        "dim": release.dim,
        "aggregate": release.aggregate,
        "trials": trials,
        "seed": seed,
    }


def claimed_mu(upper: dict, delta: float) -> float | None:
    """The claim as a GDP parameter: the accountant's mu, else the mu whose (eps, delta) curve
    passes through the claimed (eps, delta) (``privzv.gdp.mu_from_epsilon``; exact under the
    device threat, where the release is a composition of Gaussians and so exactly GDP)."""
    if upper.get("mu") is not None:
        return float(upper["mu"])
    eps = upper.get("epsilon")
    if eps is None or not np.isfinite(eps):
        return None
    return float(gdp.mu_from_epsilon(eps, delta))


def refutation(lower: dict, upper: dict, delta: float) -> dict:
    """Is the claimed guarantee refuted? Yes when eps_lb > claimed eps OR mu_lb > claimed mu.

    With ``method="bonferroni"`` both lower bounds come from the same family of Clopper-Pearson
    bounds, which hold all at once with probability 1 - alpha, so the decision has confidence
    1 - alpha; with ``"split"`` the two thresholds differ and a union bound gives 1 - 2 alpha.
    (At many trials eps_lb saturates -- no false positive left to count -- long before mu_lb does,
    so deciding on eps_lb alone misses refutations the mu bound proves.)
    """
    mu_claim = claimed_mu(upper, delta)
    by = []
    if upper.get("epsilon") is not None and lower["eps_lb"] > upper["epsilon"]:
        by.append("epsilon")
    if mu_claim is not None and lower["mu_lb"] > mu_claim:
        by.append("mu")
    alpha = lower["alpha"] * (1 if lower["method"] == "bonferroni" else 2)
    return {"refuted": bool(by), "refuted_by": by, "claimed_mu": mu_claim,
            "decision_confidence": 1 - alpha}
