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

A sampled DP head (``HeadUpdate.sampling_rate`` = q_h) steps once per round on a Poisson sample
of the server's table drawn from its secret source, independent of the batches: no observer
knows who is in a step, so under every threat the record's exposure is the downlink's (above)
plus T_h = T head steps, each a Gaussian Poisson-sampled at q_h (``Exposure.head_steps``,
composed by :mod:`privzv.mixture`).

A pooled DP head (``HeadUpdate.window`` = q >= 1) makes one head step per window of the walk:
under round-robin activation release n is walk index j = n // M of device n mod M, and a window
is q consecutive walk indices of one epoch (the epoch's last window shorter), all M devices
(:func:`window_closes`). A record is in one batch per epoch, so it is in one window per epoch,
in c = #{m : j < n_m} of its batches. Without amplification every mechanism is Gaussian, and a
Gaussian of noise multiplier z' on a record composes to mu^2 = sum 1/z'^2 (Dong, Roth & Su
2022, Cor. 3.3), so with w = the head's share of the round's 1/z^2 (z_d^-2 = (1-w) z^-2, z_h^-2
= w z^-2 for the head's per-row sensitivity) record i has mu_i^2 = K_i / z^2 with

    K_i = sum over its windows of (1 - w) c + w c^2

(downlink rounds count once each, a window's head step c^2 times). The worst record is in the
first batch of every epoch: K = sum_e f(#{m : e s < n_m}) with f(c) = (1 - w) c + w c^2, the
``compositions`` of its Exposure (not an integer: an effective count of Gaussian releases at
noise multiplier z). Only ``device`` under round-robin is accounted this way; other threats and
activation orders are refused (:func:`check`). The ledger counts the same K from the batches
it records, whatever the order.
"""

from __future__ import annotations

import dataclasses

from privzv import checks
from privzv.errors import PrivzvError
from privzv.release import Release, Schedule


@dataclasses.dataclass(frozen=True)
class Exposure:
    """Releases composed per record (``compositions``; an effective, fractional count for a
    pooled head, see the module docstring) and the hiding sampling rate (or None). With a
    sampled head, ``head_steps`` = T_h, its steps (each Poisson-sampled at the head's own rate
    against every threat), composed with the downlink's (:mod:`privzv.mixture`); else None."""

    compositions: int | float
    sampling_rate: float | None
    head_steps: int | None = None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_objects(release: object, schedule: object) -> None:
    """PrivzvError unless ``release`` is a Release and ``schedule`` a Schedule."""
    checks.instance("release", release, Release, "a privzv.Release")
    checks.instance("schedule", schedule, Schedule, "a privzv.Schedule")


def check(release: Release, schedule: Schedule) -> None:
    """Raise PrivzvError unless the batch sizes fit the data (B <= D and, if used, B <= B' <= D)
    and the threat's amplification applies to the release.

    Amplification (``eavesdropper``, ``secret-subsampling``) is derived for the batch *mean*: a
    record that is not sampled changes nothing, one that is sampled shifts one noisy sum
    (dp-accounting's sampled-Gaussian pairs). A ``per-sample`` release shows each sampled
    record's own noisy row, so whether a record was sampled is not hidden by the noise on a sum
    (under add-remove the number of rows changes); only ``device`` (no amplification) holds.
    """
    check_objects(release, schedule)
    b, d = release.batch_size, schedule.dataset_size
    if pooled(release) and (schedule.threat != "device" or schedule.device_steps is not None):
        raise PrivzvError(
            f"head window={_window(release)}: a pooled DP head is accounted only "
            "under threat 'device' with round-robin activation (no --device-steps, "
            f"no activation probabilities); got threat {schedule.threat!r}"
            + ("" if schedule.device_steps is None else " and given device steps")
            + "; use head window 0 (a head step every round)"
        )
    if release.aggregate == "per-sample" and schedule.threat != "device":
        raise PrivzvError(
            f"threat={schedule.threat!r}: a per-sample release is accounted only "
            "under threat 'device' (subsampling amplification is derived for the "
            "batch mean)"
        )
    if b > d:
        raise PrivzvError(f"batch_size={b}: must be <= dataset_size={d}")
    if schedule.threat == "secret-subsampling":
        bp = schedule.super_batch
        if not (isinstance(bp, int) and b <= bp <= d):
            raise PrivzvError(
                f"super_batch={bp!r}: must be an integer with batch_size={b} <= "
                f"super_batch <= dataset_size={d}"
            )


def worst_record_rounds(schedule: Schedule, batch: int) -> int:
    """sum_m ceil(n_m / ceil(D / batch)): the rounds that contain the worst record when every
    device walks the same epoch permutations in batches of ``batch`` (module docstring)."""
    per_epoch = _ceil_div(schedule.dataset_size, batch)
    return sum(_ceil_div(n, per_epoch) for n in schedule.steps_per_device())


def _window(release: Release) -> int:
    """The DP head's window (0 without a head)."""
    return release.head.window if release.head is not None else 0


def pooled(release: Release) -> bool:
    """Whether the release's DP head pools windows (``HeadUpdate.window`` >= 1)."""
    return _window(release) > 0


def sampled_head(release: Release) -> bool:
    """Whether the release's DP head steps on a secret Poisson sample of the table
    (``HeadUpdate.sampling_rate``): one step per round, T_h = T."""
    return release.head is not None and release.head.sampled


def window_closes(index: int, devices: int, per_epoch: int, window: int) -> bool:
    """Whether release number ``index`` (0-based, served releases in order) ends a pooled head
    window: it is device M-1's (index mod M = M-1) walk index j = index // M, and j is the last
    of q = ``window`` consecutive walk indices of its epoch (s = ``per_epoch`` batches), or the
    epoch's last."""
    j, m = divmod(index, devices)
    pos = j % per_epoch
    return m == devices - 1 and (pos % window == window - 1 or pos == per_epoch - 1)


def window_load(c, weight: float):
    """f(c) = (1 - w) c + w c^2: a window in c of a record's batches, in units of 1/z^2."""
    return (1.0 - weight) * c + weight * c * c


def pooled_compositions(release: Release, schedule: Schedule) -> float:
    """K = sum_e f(#{m : e s < n_m}): the worst record's effective count under a pooled head
    (module docstring)."""
    per_epoch = _ceil_div(schedule.dataset_size, release.batch_size)
    n = schedule.steps_per_device()
    epochs = _ceil_div(max(n), per_epoch)
    if epochs > checks.MAX_POOLED_EPOCHS:
        raise PrivzvError(
            f"head window={_window(release)}: {epochs} epochs of a pooled DP head, "
            f"above the cap {checks.MAX_POOLED_EPOCHS:.0e} (K sums one term per "
            "epoch)"
        )
    return float(
        sum(window_load(sum(e * per_epoch < n_m for n_m in n), release.head_weight) for e in range(epochs))
    )


def exposure(release: Release, schedule: Schedule) -> Exposure:
    """The Exposure of one record under ``schedule.threat`` (see the module docstring)."""
    check(release, schedule)
    d, b = schedule.dataset_size, release.batch_size
    if sampled_head(release):  # the downlink's exposure, plus one head step per round
        plain = exposure(dataclasses.replace(release, head=None), schedule)
        return dataclasses.replace(plain, head_steps=schedule.steps)
    if pooled(release):
        return Exposure(pooled_compositions(release, schedule), None)
    if schedule.threat == "device":
        return Exposure(worst_record_rounds(schedule, b), None)
    if schedule.threat == "eavesdropper":
        return Exposure(schedule.steps, None if b == d else b / d)
    bp = schedule.super_batch
    assert bp is not None  # check(): secret-subsampling has a super-batch
    return Exposure(worst_record_rounds(schedule, bp), None if bp == b else b / bp)


def releases_per_record(release: Release, schedule: Schedule) -> int | float:
    """Rounds that contain the worst record under the threat (module docstring)."""
    if pooled(release):
        check(release, schedule)
        return worst_record_rounds(schedule, release.batch_size)
    return exposure(release, schedule).compositions
