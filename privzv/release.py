"""A release is data: one kind of noisy message, described once.

The trainer draws noise from it, the ledger accounts it, the calibrator solves for its sigma and
the auditor attacks it (compare dp-accounting's ``DpEvent``).
"""
from __future__ import annotations

import dataclasses
import math

from privzv.errors import PrivzvError

NEIGHBORS = ("replace-one", "add-remove")
AGGREGATES = ("mean", "per-sample")
THREATS = ("device", "eavesdropper", "secret-subsampling")


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise PrivzvError(f"{name}={value!r}: must be a finite number > 0")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PrivzvError(f"{name}={value!r}: allowed are {', '.join(allowed)}")


@dataclasses.dataclass(frozen=True)
class Release:
    """One Gaussian release of clipped per-record contributions.

    ``aggregate="mean"``: the mean over a batch of ``batch_size`` records, each contribution clipped
    to L2 norm ``clip`` (DPZV's downlink scalar: the clipped batch mean of ZO deltas).
    ``aggregate="per-sample"``: each record's clipped contribution is sent on its own (per-sample
    gradients of fo-vector, per-sample losses of VFL-CZOFO, VAFL's forward embeddings).
    ``dim`` is the message's dimension per release (1 for a scalar); it does not enter the
    accounting, since a Gaussian mechanism's privacy depends only on L2 sensitivity / sigma.
    ``sigma`` is the per-coordinate noise std; ``None`` for a release still to be calibrated.
    """

    clip: float
    batch_size: int
    sigma: float | None = None
    aggregate: str = "mean"
    neighbors: str = "replace-one"
    dim: int = 1

    def __post_init__(self):
        _positive("clip", self.clip)
        if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise PrivzvError(f"batch_size={self.batch_size!r}: must be an integer >= 1")
        if self.sigma is not None and not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise PrivzvError(f"sigma={self.sigma!r}: must be a finite number >= 0")
        _choice("aggregate", self.aggregate, AGGREGATES)
        _choice("neighbors", self.neighbors, NEIGHBORS)

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of the un-noised message: 2C (replace-one) or C (add-remove), / B for a mean."""
        factor = 2.0 if self.neighbors == "replace-one" else 1.0
        per_record = factor * self.clip
        return per_record / self.batch_size if self.aggregate == "mean" else per_record

    @property
    def noise_multiplier(self) -> float:
        """sigma / sensitivity: the one number the accountants see."""
        if self.sigma is None:
            raise PrivzvError("this release has no sigma yet: calibrate it or give --sigma")
        return self.sigma / self.sensitivity

    def with_sigma(self, sigma: float) -> "Release":
        return dataclasses.replace(self, sigma=float(sigma))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How often a release is made and who observes it.

    ``steps`` is T, releases in total over the run (as in the seed paper); they are spread evenly
    over ``devices`` devices. ``dataset_size`` is D. ``threat`` names the observer:
    ``device`` (knows its batch, no amplification), ``eavesdropper`` (Poisson q=B/D over all T),
    ``secret-subsampling`` (the server keeps each record of a super-batch of ``super_batch`` with
    probability B/B' and tells nobody).
    """

    steps: int
    dataset_size: int
    devices: int = 1
    threat: str = "device"
    super_batch: int | None = None

    def __post_init__(self):
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise PrivzvError(f"steps={self.steps!r}: must be an integer >= 1")
        if not (isinstance(self.dataset_size, int) and self.dataset_size >= 1):
            raise PrivzvError(f"dataset_size={self.dataset_size!r}: must be an integer >= 1")
        if not (isinstance(self.devices, int) and self.devices >= 1):
            raise PrivzvError(f"devices={self.devices!r}: must be an integer >= 1")
        _choice("threat", self.threat, THREATS)
        if self.threat == "secret-subsampling" and self.super_batch is None:
            raise PrivzvError("threat='secret-subsampling' needs super_batch (B' >= B)")
