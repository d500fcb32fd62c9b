"""Attack metrics, each against its trivial baseline, and confidence intervals over seeds.

Conventions (stable API, used by every attack):

- classification (label inference): ``classification_metrics(y_true, y_pred)`` gives accuracy,
  the prior (accuracy of always guessing the most frequent true label) and the advantage
  ``accuracy - prior`` (0 for a useless attack, ``1 - prior`` for a perfect one); ``n`` records
  and ``accuracy_ci``, the two-sided 95% Clopper-Pearson interval of the accuracy over them.
- binary scoring attacks (membership, norm/cosine scoring): ``scoring_metrics(labels, scores)``
  gives ROC AUC (scikit-learn; 0.5 = chance) and TPR at FPR = 1e-3 and 1e-2 (chance = the FPR).
  Higher score means "positive" (label 1). ``auc_ci``: a 95% percentile bootstrap over records.
- regression (feature inference): ``regression_metrics(y_true, y_pred, baseline_pred)`` gives MSE
  and R^2 of the attack and of its baseline (own-features-only regression, or the mean guess);
  ``mse_gain_ci``: a 95% percentile bootstrap over records of ``baseline_mse - mse``.
- intervals over records treat the evaluated records as independent draws; the bootstrap draws
  ``BOOTSTRAP`` resamples from a fixed seed, so a result is reproducible.
- over seeds: ``mean_ci(values)`` is the mean with a two-sided Student-t interval
  (``mean +- t_{n-1, 1-a/2} * s / sqrt(n)``, s the sample std with ddof=1); ``summarize`` applies it
  to every numeric key of a list of per-seed metric dicts. With one seed the interval is
  (-inf, inf): one run says nothing about spread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from scipy import sparse, stats
from sklearn import metrics as skm

from privzv.attacks import clopper_pearson
from privzv.errors import PrivzvError

FPR_TARGETS = (1e-3, 1e-2)
CONFIDENCE = 0.95  # of every interval over records
BOOTSTRAP = 1000  # resamples of a bootstrap interval over records
_CHUNK = 50  # resamples drawn at once (memory: _CHUNK x records)


def _1d(name: str, values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise PrivzvError(f"{name}: must be a non-empty 1-D array, got shape {arr.shape}")
    return arr


def _same_length(a: np.ndarray, b: np.ndarray, names: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise PrivzvError(f"{names}: lengths differ ({a.shape[0]} vs {b.shape[0]})")


# ---- classification -------------------------------------------------------------------------


def accuracy(y_true, y_pred) -> float:
    """Fraction of exact matches."""
    t, p = _1d("y_true", y_true), _1d("y_pred", y_pred)
    _same_length(t, p, "y_true, y_pred")
    return float(np.mean(t == p))


def prior_accuracy(y_true) -> float:
    """Accuracy of the trivial attacker that always guesses the most frequent true label."""
    _, counts = np.unique(_1d("y_true", y_true), return_counts=True)
    return float(counts.max() / counts.sum())


def classification_metrics(y_true, y_pred) -> dict:
    """``{"accuracy", "prior", "advantage", "n", "accuracy_ci"}`` with advantage = accuracy -
    prior and ``accuracy_ci`` the Clopper-Pearson interval of the accuracy over the n records."""
    acc, prior = accuracy(y_true, y_pred), prior_accuracy(y_true)
    n = len(y_true)
    return {
        "accuracy": acc,
        "prior": prior,
        "advantage": acc - prior,
        "n": n,
        "accuracy_ci": accuracy_interval(round(acc * n), n),
    }


def accuracy_interval(correct: int, n: int, confidence: float = CONFIDENCE) -> list[float]:
    """Two-sided Clopper-Pearson interval ``[low, high]`` of a rate of ``correct`` in ``n``."""
    alpha = (1 - confidence) / 2
    return [float(clopper_pearson.lower(correct, n, alpha)), float(clopper_pearson.upper(correct, n, alpha))]


# ---- binary scoring -------------------------------------------------------------------------


def _binary(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    y, s = _1d("labels", labels).astype(int), _1d("scores", scores).astype(float)
    _same_length(y, s, "labels, scores")
    if not np.isin(y, (0, 1)).all() or np.unique(y).size != 2:
        raise PrivzvError("labels: must contain both 0 and 1 and nothing else")
    if not np.isfinite(s).all():
        raise PrivzvError("scores: must be finite")
    return y, s


def roc_auc(labels, scores) -> float:
    """Area under the ROC curve (scikit-learn ``roc_auc_score``); 0.5 is chance."""
    y, s = _binary(labels, scores)
    return float(skm.roc_auc_score(y, s))


def tpr_at_fpr(labels, scores, fpr: float) -> float:
    """Largest TPR among thresholds whose empirical FPR is <= ``fpr`` (no interpolation).

    With fewer than ``1/fpr`` negatives only the threshold with FPR = 0 qualifies, so the value is
    conservative; report the number of negatives beside it.
    """
    if not 0 <= fpr <= 1:
        raise PrivzvError(f"fpr={fpr!r}: must be in [0, 1]")
    y, s = _binary(labels, scores)
    fprs, tprs, _ = skm.roc_curve(y, s, drop_intermediate=False)
    return float(tprs[fprs <= fpr].max())


def scoring_metrics(labels, scores, fpr_targets: Sequence[float] = FPR_TARGETS) -> dict:
    """``{"auc", "tpr@fpr=0.001", "tpr@fpr=0.01", "negatives", "positives"}`` (chance: 0.5, fpr)."""
    y, s = _binary(labels, scores)
    out = {"auc": roc_auc(y, s)}
    for f in fpr_targets:
        out[f"tpr@fpr={f:g}"] = tpr_at_fpr(y, s, f)
    out["negatives"], out["positives"] = int((y == 0).sum()), int((y == 1).sum())
    out["auc_ci"] = _bootstrap(len(y), lambda w: _weighted_auc(y, s, w))
    return out


def _weighted_auc(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ROC AUC (ties count 1/2) of each row of record ``weights`` [resamples, n]: P(a positive
    outscores a negative) under the weighted empirical distribution; rows of ones give roc_auc."""
    levels, where = np.unique(scores, return_inverse=True)
    n = len(scores)
    group = sparse.csr_matrix((np.ones(n), (where, np.arange(n))), shape=(len(levels), n))
    pos, neg = group @ (weights * (labels == 1)).T, group @ (weights * (labels == 0)).T
    below = np.cumsum(neg, axis=0) - neg
    with np.errstate(invalid="ignore", divide="ignore"):
        return (pos * (below + neg / 2)).sum(axis=0) / (pos.sum(axis=0) * neg.sum(axis=0))


def _bootstrap(n: int, statistic, confidence: float = CONFIDENCE) -> list[float]:
    """Percentile bootstrap interval over ``n`` records: ``statistic(weights)`` maps record
    multiplicities [resamples, n] to one value per resample (NaN: undefined, dropped)."""
    rng = np.random.default_rng(0)
    offsets = n * np.arange(_CHUNK)[:, None]
    draws = (
        np.bincount((rng.integers(0, n, (_CHUNK, n)) + offsets).ravel(), minlength=_CHUNK * n).reshape(
            _CHUNK, n
        )
        for _ in range(BOOTSTRAP // _CHUNK)
    )
    values = np.concatenate([statistic(w) for w in draws])
    values = values[np.isfinite(values)]
    tail = 100 * (1 - confidence) / 2
    return [float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))]


# ---- regression -----------------------------------------------------------------------------


def _2d(name: str, values) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.size == 0:
        raise PrivzvError(f"{name}: must be a non-empty 1-D or 2-D array, got shape {arr.shape}")
    return arr


def _same_shape(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t, p = _2d("y_true", y_true), _2d("y_pred", y_pred)
    if t.shape != p.shape:
        raise PrivzvError(f"y_true, y_pred: shapes differ ({t.shape} vs {p.shape})")
    return t, p


def mse(y_true, y_pred) -> float:
    """Mean squared error over all records and coordinates."""
    t, p = _same_shape(y_true, y_pred)
    return float(np.mean((t - p) ** 2))


def r2(y_true, y_pred) -> float:
    """Coefficient of determination, uniform average over coordinates (scikit-learn r2_score).

    0 = as good as predicting each coordinate's mean on the evaluated records; < 0 is worse.
    """
    t, p = _same_shape(y_true, y_pred)
    return float(skm.r2_score(t, p))


def regression_metrics(y_true, y_pred, baseline_pred=None) -> dict:
    """MSE and R^2 of the attack and of its baseline.

    ``baseline_pred`` is the trivial or own-features-only prediction; ``None`` uses the mean of
    ``y_true`` (the random-guess baseline, R^2 = 0). ``mse_gain = baseline_mse - mse`` (> 0: the
    attack learns more than the baseline).
    """
    t = _2d("y_true", y_true)
    base = np.broadcast_to(t.mean(axis=0), t.shape) if baseline_pred is None else baseline_pred
    out = {
        "mse": mse(t, y_pred),
        "r2": r2(t, y_pred),
        "baseline_mse": mse(t, base),
        "baseline_r2": r2(t, base),
    }
    out["mse_gain"] = out["baseline_mse"] - out["mse"]
    gain = np.mean((t - _2d("baseline_pred", base)) ** 2, axis=1) - np.mean(
        (t - _2d("y_pred", y_pred)) ** 2, axis=1
    )  # per record
    out["mse_gain_ci"] = _bootstrap(len(t), lambda w: w @ gain / len(t))
    return out


# ---- over seeds -----------------------------------------------------------------------------


def mean_ci(values: Iterable[float], confidence: float = 0.95) -> dict:
    """Mean and two-sided Student-t confidence interval: ``{"mean", "low", "high", "n"}``.

    ``mean +- t_{n-1,(1+confidence)/2} * s / sqrt(n)`` (s: sample std, ddof=1). Assumes
    independent seeds and roughly normal per-seed values; with n = 1 the interval is (-inf, inf).
    Non-finite values are rejected (filter them and say so).
    """
    if not 0 < confidence < 1:
        raise PrivzvError(f"confidence={confidence!r}: must be in (0, 1)")
    x = np.asarray(list(values), dtype=float)
    if x.size == 0 or not np.isfinite(x).all():
        raise PrivzvError("values: must be a non-empty list of finite numbers")
    mean = float(x.mean())
    if x.size == 1:
        return {"mean": mean, "low": -math.inf, "high": math.inf, "n": 1}
    half = float(stats.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": int(x.size)}


def summarize(per_seed: Sequence[Mapping], confidence: float = 0.95) -> dict:
    """``{key: mean_ci([...])}`` for every key whose value is a finite number in every run."""
    if not per_seed:
        raise PrivzvError("per_seed: needs at least one run")
    keys = [
        k
        for k in per_seed[0]
        if all(
            isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) and math.isfinite(r[k])
            for r in per_seed
        )
    ]
    return {k: mean_ci([r[k] for r in per_seed], confidence) for k in keys}
