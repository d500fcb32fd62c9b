"""The optimal likelihood-ratio attacker on one record's releases, under the ``device`` threat.

The attacking device chose every batch, so it knows which k releases contain the target record
(k = ``privzv.accounting.releases_per_record``) and the other records' clipped contributions. Per
release i it sees y_i = m_i + N(0, sigma^2 I) with m_i = m_i^out (record replaced, or removed) or
m_i^out + Delta_i (record in). By Neyman-Pearson the most powerful test of "out" against "in"
thresholds the log likelihood ratio, which for Gaussian shifts is an affine function of

    z = sum_i <y_i - m_i^out, Delta_i> / (sigma * sqrt(sum_i ||Delta_i||^2)),

distributed N(0, 1) when out and N(mu, 1) when in, mu = sqrt(sum_i ||Delta_i||^2) / sigma
(Dong, Roth & Su 2022, Cor. 3.3: k Gaussian releases compose to sqrt(k)*sensitivity/sigma-GDP
when every ||Delta_i|| equals the sensitivity). The canary's raw contributions are +-10 C along a
random unit direction per release (in: +, out: - for replace-one, 0 for add-remove), so clipping
makes ||Delta_i|| the release's sensitivity. z depends on the dimension only through ||Delta_i||:
a scalar and a vector release with the same sensitivity/sigma give the same attacker power.

Under the ``eavesdropper`` and ``secret-subsampling`` threats the attacker does not know which
releases hold the record: each of the k releases includes it independently with probability q
(Poisson; ``privzv.threats.exposure``). ``simulate_subsampled`` runs that mechanism for a canary
whose other records are known (the audit picks the neighbouring datasets; the DP claim covers
them): projected on the canary's direction the release is y_i = b_i c + N(0, sigma^2), b_i ~
Bernoulli(q), with c = +s/2 in and -s/2 out for replace-one (the record and its replacement
occupy the same sampled slot) and c = s in, 0 out for add-remove (s the sensitivity; the other
coordinates are independent of the hypothesis and drop out). The Neyman-Pearson statistic is the
exact log likelihood ratio of the two mixtures, sum_i log((1-q) phi(y_i) + q phi(y_i - c_in))
- log((1-q) phi(y_i) + q phi(y_i - c_out)) (phi the N(0, sigma^2) density): the privacy loss
random variable whose distribution the PLD accountant composes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from privzv.attacks import releases
from privzv.errors import PrivzvError
from privzv.release import Release

CANARY_SCALE = 10.0  # raw canary contribution, in units of the clip bound (clipped to C)
CHUNK_FLOATS = 4_000_000  # numbers drawn per chunk (memory ~ 32 MB per array)


@dataclasses.dataclass(frozen=True)
class Trials:
    """LR scores of trials with the record in (label 1) and out (label 0); ``mu`` is the exact
    GDP parameter of the simulated releases, against which the audit's mu_lb can be checked."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    mu: float


def _unit_directions(rng: np.random.Generator, k: int, dim: int) -> np.ndarray:
    v = rng.normal(size=(k, dim))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def simulate(release: Release, k: int, trials: int, seed: int = 0) -> Trials:
    """Run ``trials`` "in" and ``trials`` "out" experiments of k releases each; score them by z."""
    if release.sigma is None or release.sigma <= 0:
        raise PrivzvError("release sigma: must be > 0 for a likelihood-ratio audit")
    if not (isinstance(k, int) and k >= 1):
        raise PrivzvError(f"releases per record k={k!r}: must be an integer >= 1")
    if not (isinstance(trials, int) and trials >= 2):
        raise PrivzvError(f"--trials {trials!r}: must be an integer >= 2")
    rng = np.random.default_rng(seed)
    direction = _unit_directions(rng, k, release.dim)  # (k, dim)
    raw_in = CANARY_SCALE * release.clip * direction
    raw_out = -raw_in if release.neighbors == "replace-one" else np.zeros_like(raw_in)
    rest_sum = None
    if release.aggregate == "mean":  # the other B-1 records, known to the device
        per_release = max(1, (release.batch_size - 1) * release.dim)
        step = max(1, CHUNK_FLOATS // per_release)
        rest_sum = np.concatenate(
            [
                releases.clip(
                    rng.uniform(
                        -2 * release.clip,
                        2 * release.clip,
                        size=(min(step, k - i), release.batch_size - 1, release.dim),
                    ),
                    release.clip,
                ).sum(axis=1)
                for i in range(0, k, step)
            ]
        )
        raw_in, raw_out = raw_in[:, None, :], raw_out[:, None, :]
    mean_out = releases.noiseless(release, raw_out, rest_sum)  # (k, dim)
    shift = releases.noiseless(release, raw_in, rest_sum) - mean_out  # Delta_i
    norm = math.sqrt(float((shift**2).sum()))
    chunk = max(1, CHUNK_FLOATS // (k * release.dim))
    scores = {}
    for label, raw in (("in", raw_in), ("out", raw_out)):
        parts = []
        for start in range(0, trials, chunk):
            n = min(chunk, trials - start)
            y = releases.sample(release, np.broadcast_to(raw, (n, *raw.shape)), rng, rest_sum)
            parts.append(np.einsum("nkd,kd->n", y - mean_out, shift) / (release.sigma * norm))
        scores[label] = np.concatenate(parts)
    return Trials(scores["in"], scores["out"], norm / release.sigma)


def simulate_subsampled(release: Release, k: int, q: float, trials: int, seed: int = 0) -> Trials:
    """``trials`` "in" and "out" experiments of k Poisson-subsampled releases (rate q), scored by
    the exact log likelihood ratio (module docstring). ``mu`` is NaN: no exact GDP parameter."""
    if release.sigma is None or release.sigma <= 0:
        raise PrivzvError("release sigma: must be > 0 for a likelihood-ratio audit")
    if not (isinstance(k, int) and k >= 1):
        raise PrivzvError(f"releases per record k={k!r}: must be an integer >= 1")
    if not 0 < q <= 1:
        raise PrivzvError(f"sampling rate q={q!r}: must be in (0, 1]")
    if not (isinstance(trials, int) and trials >= 2):
        raise PrivzvError(f"--trials {trials!r}: must be an integer >= 2")
    s, sigma = release.sensitivity, release.sigma
    c_in, c_out = (s / 2, -s / 2) if release.neighbors == "replace-one" else (s, 0.0)
    rng = np.random.default_rng(seed)
    log_keep, log_skip = math.log(q), math.log1p(-q) if q < 1 else -math.inf

    def llr(y):
        base = -0.5 * (y / sigma) ** 2
        mix = lambda c: np.logaddexp(log_skip + base, log_keep - 0.5 * ((y - c) / sigma) ** 2)  # noqa: E731
        return (mix(c_in) - mix(c_out)).sum(axis=1)

    chunk = max(1, CHUNK_FLOATS // k)
    scores = {}
    for label, c in (("in", c_in), ("out", c_out)):
        parts = []
        for start in range(0, trials, chunk):
            n = min(chunk, trials - start)
            kept = rng.random((n, k)) < q
            parts.append(llr(kept * c + rng.normal(0.0, sigma, size=(n, k))))
        scores[label] = np.concatenate(parts)
    return Trials(scores["in"], scores["out"], math.nan)
