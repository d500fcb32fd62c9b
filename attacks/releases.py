"""Simulate a ``privzv.release.Release``'s outputs (numpy), for audits against known mechanisms.

Each record's contribution is a vector of ``release.dim`` numbers clipped to L2 norm ``clip``
(NaN coordinates count as 0 and +-inf as +-clip before the norm clip, as the DPZV server
clips, privzv.training.zo); ``aggregate="mean"`` releases the clipped batch mean plus N(0, sigma^2) per
coordinate, ``"per-sample"`` releases each clipped contribution plus its own noise.
"""

from __future__ import annotations

import numpy as np

from privzv.errors import PrivzvError
from privzv.release import Release


def clip(values, bound: float) -> np.ndarray:
    """Clip each vector along the last axis to L2 norm ``bound`` (NaN -> 0, +-inf -> +-bound)."""
    x = np.nan_to_num(np.asarray(values, dtype=float), nan=0.0, posinf=bound, neginf=-bound)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x * np.minimum(1.0, bound / np.maximum(norm, np.finfo(float).tiny))


def noiseless(release: Release, contributions, rest_sum=None) -> np.ndarray:
    """The message before noise.

    ``aggregate="mean"``: ``contributions`` has shape (..., n, dim) with n <= B records; the other
    B - n records enter through ``rest_sum`` (..., dim), the sum of their already clipped
    contributions (a device that chose the batch knows it). Returns (..., dim).
    ``"per-sample"``: returns the clipped ``contributions`` (..., dim) unchanged in shape.
    """
    x = np.asarray(contributions, dtype=float)
    if x.shape[-1] != release.dim:
        raise PrivzvError(f"contributions: last axis {x.shape[-1]} != release dim {release.dim}")
    clipped = clip(x, release.clip)
    if release.aggregate == "per-sample":
        return clipped
    if x.ndim < 2 or x.shape[-2] > release.batch_size:
        raise PrivzvError(f"contributions: need shape (..., n <= {release.batch_size}, dim)")
    total = clipped.sum(axis=-2)
    if rest_sum is not None:
        total = total + np.asarray(rest_sum, dtype=float)
    elif x.shape[-2] != release.batch_size:
        raise PrivzvError("contributions: give all B records or rest_sum for the others")
    return total / release.batch_size


def sample(release: Release, contributions, rng: np.random.Generator, rest_sum=None) -> np.ndarray:
    """One noisy output per leading index: ``noiseless(...) + N(0, sigma^2 I)``."""
    if release.sigma is None:
        raise PrivzvError("release has no sigma: calibrate it or give --sigma")
    clean = noiseless(release, contributions, rest_sum)
    return clean + rng.normal(0.0, release.sigma, size=clean.shape)
