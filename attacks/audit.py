"""Empirical privacy audits: attack scores on known trials in, (epsilon, mu) lower bounds out.

A trial is one run of the mechanism where the auditor knows whether the target record was "in"
(label 1) or replaced / removed (label 0); the attack outputs a score, higher meaning "in".
For a threshold t the attack says "in" when score >= t. If the mechanism is (eps, delta)-DP,
every such test satisfies (Kairouz, Oh & Viswanath 2015, Thm. 2.1; the hypothesis-testing view
used by Jagielski et al. 2020, "Auditing Differentially Private Machine Learning", and Nasr et al.
2021/2023):

    TPR <= e^eps FPR + delta      and      TNR <= e^eps FNR + delta,

so with Clopper-Pearson bounds FPR_ub and FNR_ub (= 1 - TPR_lb)

    eps_lb = max( log((1 - FNR_ub - delta) / FPR_ub),  log((1 - FPR_ub - delta) / FNR_ub) ).

If it is mu-GDP (Dong, Roth & Su 2022, Def. 2.3: TPR <= Phi(Phi^-1(FPR) + mu)), then

    mu_lb = Phi^-1(TPR_lb) - Phi^-1(FPR_ub) = Phi^-1(1 - FNR_ub) - Phi^-1(FPR_ub).

Both hold with probability >= 1 - alpha: each of the two one-sided Clopper-Pearson bounds is taken
at alpha/2, and the threshold is either chosen on held-out trials (``method="split"``: the
threshold maximising the bound on a random ``split`` fraction of the trials, the bound reported on
the rest) or fixed in advance from a list of m candidates with a Bonferroni correction
(``method="bonferroni"``: every bound at alpha/(2m)). Choosing the best of many thresholds on the
same trials without a correction would not be a valid bound. Both bounds are clipped at 0.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats

from privzv.attacks import clopper_pearson
from privzv.errors import PrivzvError

METHODS = ("split", "bonferroni")


@dataclasses.dataclass(frozen=True)
class AuditBound:
    """Lower bounds at confidence 1 - alpha, the thresholds that gave them and the trial counts."""

    eps_lb: float
    mu_lb: float
    threshold_eps: float
    threshold_mu: float
    alpha: float
    delta: float
    method: str
    positives: int
    negatives: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _counts(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray):
    """(false negatives, false positives) of the test ``score >= t`` for every t."""
    fn = np.searchsorted(np.sort(scores_in), thresholds, side="left")
    fp = scores_out.size - np.searchsorted(np.sort(scores_out), thresholds, side="left")
    return fn, fp


def bounds_at(scores_in, scores_out, thresholds, delta: float, alpha_each: float):
    """(eps_lb, mu_lb) per threshold, each CP bound at one-sided level ``alpha_each``; unclipped."""
    scores_in, scores_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    thresholds = np.atleast_1d(np.asarray(thresholds, float))
    fn, fp = _counts(scores_in, scores_out, thresholds)
    fnr_ub = clopper_pearson.upper(fn, scores_in.size, alpha_each)
    fpr_ub = clopper_pearson.upper(fp, scores_out.size, alpha_each)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps_a = np.log(np.clip(1 - fnr_ub - delta, 0, None)) - np.log(fpr_ub)
        eps_b = np.log(np.clip(1 - fpr_ub - delta, 0, None)) - np.log(fnr_ub)
    eps = np.nan_to_num(np.maximum(eps_a, eps_b), nan=-np.inf)
    mu = stats.norm.isf(fnr_ub) - stats.norm.ppf(fpr_ub)
    return eps, np.nan_to_num(mu, nan=-np.inf)


def _best(values: np.ndarray, thresholds: np.ndarray) -> tuple[float, float]:
    i = int(np.argmax(values))
    return max(0.0, float(values[i])), float(thresholds[i])


def audit_scores(
    scores_in,
    scores_out,
    delta: float,
    *,
    alpha: float = 0.05,
    method: str = "split",
    split: float = 0.5,
    thresholds=None,
    seed: int = 0,
) -> AuditBound:
    """Lower bounds on (eps at ``delta``) and mu from scores of "in" and "out" trials.

    ``split``: fraction of each class used only to pick the threshold (method "split");
    candidate thresholds default to the held-out trials' scores. ``thresholds``: the candidates
    fixed before the trials were run (required for "bonferroni"). Returns an ``AuditBound``.
    """
    s_in, s_out = np.asarray(scores_in, float).ravel(), np.asarray(scores_out, float).ravel()
    finite = np.isfinite(s_in).all() and np.isfinite(s_out).all()
    if s_in.size < 2 or s_out.size < 2 or not finite:
        raise PrivzvError("scores: need at least 2 finite scores for each of in and out")
    if not 0 <= delta < 1:
        raise PrivzvError(f"delta={delta!r}: must be in [0, 1)")
    if not 0 < alpha < 1:
        raise PrivzvError(f"alpha={alpha!r}: must be in (0, 1)")
    if method not in METHODS:
        raise PrivzvError(f"method={method!r}: allowed are {', '.join(METHODS)}")
    if method == "bonferroni":
        if thresholds is None or np.size(thresholds) == 0:
            raise PrivzvError("method='bonferroni' needs thresholds fixed before the trials")
        cand = np.atleast_1d(np.asarray(thresholds, float))
        eps, mu = bounds_at(s_in, s_out, cand, delta, alpha / (2 * cand.size))
        (eps_lb, t_eps), (mu_lb, t_mu) = _best(eps, cand), _best(mu, cand)
    else:
        if not 0 < split < 1:
            raise PrivzvError(f"split={split!r}: must be in (0, 1)")
        rng = np.random.default_rng(seed)
        in_pick, in_eval = _split(rng.permutation(s_in), split)
        out_pick, out_eval = _split(rng.permutation(s_out), split)
        cand = (
            np.unique(np.concatenate([in_pick, out_pick]))
            if thresholds is None
            else np.atleast_1d(np.asarray(thresholds, float))
        )
        eps_pick, mu_pick = bounds_at(in_pick, out_pick, cand, delta, alpha / 2)
        t_eps, t_mu = cand[int(np.argmax(eps_pick))], cand[int(np.argmax(mu_pick))]
        eps, _ = bounds_at(in_eval, out_eval, t_eps, delta, alpha / 2)
        _, mu = bounds_at(in_eval, out_eval, t_mu, delta, alpha / 2)
        eps_lb, mu_lb = max(0.0, float(eps[0])), max(0.0, float(mu[0]))
        s_in, s_out = in_eval, out_eval
    return AuditBound(
        eps_lb=eps_lb,
        mu_lb=mu_lb,
        threshold_eps=float(t_eps),
        threshold_mu=float(t_mu),
        alpha=alpha,
        delta=delta,
        method=method,
        positives=int(s_in.size),
        negatives=int(s_out.size),
    )


def _split(x: np.ndarray, frac: float) -> tuple[np.ndarray, np.ndarray]:
    cut = min(max(1, int(round(x.size * frac))), x.size - 1)
    return x[:cut], x[cut:]
