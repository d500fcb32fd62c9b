"""Who observes a release, and so which releases a record's privacy loss composes.

A threat turns a (Release, Schedule) pair into an :class:`Exposure`: how many Gaussian releases
contain a given record (``compositions``) and, when the observer does not know the batches, the
Poisson sampling rate that hides the record's presence (``sampling_rate``; ``None`` = no
amplification). The accountants only see an Exposure and a noise multiplier.

- ``device``: the device that receives the downlink chose its batch, so there is no
  amplification. Each device makes T/M releases over epoch-shuffled batches of B out of D
  records, so a record is in ceil((T/M) * B / D) of *each* device's releases. The receiving
  device's view depends on the other devices' releases too: the server computes its deltas with
  the stale embeddings of the other devices, whose models were trained on their own releases. So
  a record's loss is the composition of the releases that contain it on every device,
  k = M * ceil((T/M) * B / D) (post-processing; counting only the receiving device's releases,
  ceil((T/M) * B / D), undercounts by M whenever M > 1).
- ``eavesdropper``: sees every downlink but not the batches: Poisson amplification with
  q = B/D over all T releases (the usual DP-SGD analysis).
- ``secret-subsampling``: the device sends embeddings for a super-batch of B' records (it knows
  them); the server keeps each with probability p = B/B' and tells nobody. A record is in
  ceil((T/M) * B' / D) super-batches of each device, M times that in all (as for ``device``),
  each amplified with p.
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


def exposure(release: Release, schedule: Schedule) -> Exposure:
    """The Exposure of one record under ``schedule.threat`` (see the module docstring)."""
    check(release, schedule)
    t, m, d, b = schedule.steps, schedule.devices, schedule.dataset_size, release.batch_size
    if schedule.threat == "device":
        return Exposure(m * _ceil_div(t * b, m * d), None)
    if schedule.threat == "eavesdropper":
        return Exposure(t, None if b == d else b / d)
    bp = schedule.super_batch
    return Exposure(m * _ceil_div(t * bp, m * d), None if bp == b else b / bp)


def releases_per_record(release: Release, schedule: Schedule) -> int:
    """Releases that contain a given record under the threat: M*ceil((T/M)*B/D) for ``device``."""
    return exposure(release, schedule).compositions
