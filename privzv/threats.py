"""Who observes a release, and so which releases a record's privacy loss composes.

A threat turns a (Release, Schedule) pair into an :class:`Exposure`: how many rounds contain a
given record (``compositions``) and, when the observer does not know the batches, the Poisson
sampling rate that hides the record's presence (``sampling_rate``; ``None`` = no amplification).
The accountants only see an Exposure and the round's noise multiplier (downlink and head update
combined, :attr:`privzv.release.Release.noise_multiplier`).

Batches as the trainer draws them (``privzv.training.sampling``): under ``device`` and
``secret-subsampling`` every device walks the same epoch permutations in batches of b records
(b = B, or B' for a super-batch), the last batch of an epoch smaller, s = ceil(D / b) batches per
epoch. A device that makes n_m rounds has put every record into floor(n_m / s) or
ceil(n_m / s) of them, and because all devices walk the same permutations (the rounds of the
devices differ by at most one epoch position) some record reaches ceil(n_m / s) on every device
at once. So the worst record is in exactly

    k = sum_m ceil(n_m / ceil(D / b))

rounds, with n_m from ``Schedule.steps_per_device`` (round-robin unless the activation order is
given). The ledger counts the same number from the batches actually sent.

- ``device``: the device that receives the downlink chose its batch, so there is no
  amplification. Its view depends on the other devices' releases too (the server computes its
  deltas with the other devices' embeddings, trained on their releases, and with the head), so a
  record's loss composes the rounds that contain it on every device: k above with b = B.
- ``eavesdropper``: sees every downlink but not the batches, which the server draws by Poisson
  sampling with q = B/D from its secret generator: all T rounds, amplified with q.
- ``secret-subsampling``: the device sends embeddings for a super-batch of B' records (it knows
  them); the server keeps each with probability p = B/B' and tells nobody: k above with b = B',
  each round amplified with p.
"""
from __future__ import annotations

import dataclasses

from privzv.errors import PrivzvError
from privzv.release import Release, Schedule


@dataclasses.dataclass(frozen=True)
class Exposure:
    """Releases composed per record (``compositions``) and the hiding sampling rate (or None)."""

    compositions: int
    sampling_rate: float | None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check(release: Release, schedule: Schedule) -> None:
    """Raise PrivzvError unless the batch sizes fit the data (B <= D and, if used, B <= B' <= D)
    and the threat's amplification applies to the release.

    Amplification (``eavesdropper``, ``secret-subsampling``) is derived for the batch *mean*: a
    record that is not sampled changes nothing, one that is sampled shifts one noisy sum
    (dp-accounting's sampled-Gaussian pairs). A ``per-sample`` release shows each sampled
    record's own noisy row, so whether a record was sampled is not hidden by the noise on a sum
    (under add-remove the number of rows changes); only ``device`` (no amplification) holds.
    """
    b, d = release.batch_size, schedule.dataset_size
    if release.aggregate == "per-sample" and schedule.threat != "device":
        raise PrivzvError(f"threat={schedule.threat!r}: a per-sample release is accounted only "
                          "under threat 'device' (subsampling amplification is derived for the "
                          "batch mean)")
    if b > d:
        raise PrivzvError(f"batch_size={b}: must be <= dataset_size={d}")
    if schedule.threat == "secret-subsampling":
        bp = schedule.super_batch
        if not (isinstance(bp, int) and b <= bp <= d):
            raise PrivzvError(f"super_batch={bp!r}: must be an integer with batch_size={b} <= "
                              f"super_batch <= dataset_size={d}")


def worst_record_rounds(schedule: Schedule, batch: int) -> int:
    """sum_m ceil(n_m / ceil(D / batch)): the rounds that contain the worst record when every
    device walks the same epoch permutations in batches of ``batch`` (module docstring)."""
    per_epoch = _ceil_div(schedule.dataset_size, batch)
    return sum(_ceil_div(n, per_epoch) for n in schedule.steps_per_device())


def exposure(release: Release, schedule: Schedule) -> Exposure:
    """The Exposure of one record under ``schedule.threat`` (see the module docstring)."""
    check(release, schedule)
    d, b = schedule.dataset_size, release.batch_size
    if schedule.threat == "device":
        return Exposure(worst_record_rounds(schedule, b), None)
    if schedule.threat == "eavesdropper":
        return Exposure(schedule.steps, None if b == d else b / d)
    bp = schedule.super_batch
    return Exposure(worst_record_rounds(schedule, bp), None if bp == b else b / bp)


def releases_per_record(release: Release, schedule: Schedule) -> int:
    """Rounds that contain the worst record under the threat (module docstring)."""
    return exposure(release, schedule).compositions
