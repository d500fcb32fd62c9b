"""One-sided Clopper-Pearson (exact binomial) confidence bounds, vectorised.

Clopper & Pearson (1934): for k successes in n trials, the one-sided upper bound at level
1 - alpha is the (1 - alpha) quantile of Beta(k + 1, n - k) (1 when k = n), and the lower bound is
the alpha quantile of Beta(k, n - k + 1) (0 when k = 0). Same form as jax_privacy's
``auditing._clopper_pearson_upper``.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from privzv.errors import PrivzvError


def _check(k, n, alpha) -> tuple[np.ndarray, np.ndarray]:
    k, n = np.asarray(k), np.asarray(n)
    if not 0 < alpha < 1:
        raise PrivzvError(f"alpha={alpha!r}: must be in (0, 1)")
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise PrivzvError("counts: need 0 <= k <= n and n >= 1")
    return k, n


def upper(k, n, alpha: float) -> np.ndarray:
    """p_hi with P(p <= p_hi) >= 1 - alpha for k ~ Binomial(n, p)."""
    k, n = _check(k, n, alpha)
    with np.errstate(invalid="ignore"):
        p = stats.beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1))
    return np.where(k >= n, 1.0, p)


def lower(k, n, alpha: float) -> np.ndarray:
    """p_lo with P(p >= p_lo) >= 1 - alpha for k ~ Binomial(n, p)."""
    k, n = _check(k, n, alpha)
    with np.errstate(invalid="ignore"):
        p = stats.beta.ppf(alpha, np.maximum(k, 1), n - k + 1)
    return np.where(k <= 0, 0.0, p)
