"""The Python API, one shape for every call: keyword-only arguments, the defaults of
:mod:`privzv.defaults` (threat ``device``, neighbors ``replace-one``, accountant ``best``), a
:class:`privzv.accounting.Result` that names its threat and accountant and converts with
``float()`` (a calibration's to its noise multiplier, an accounting's to its epsilon).

The counterpart of Opacus's ``get_noise_multiplier(target_epsilon=, target_delta=,
sample_rate=, steps= or epochs=, accountant=)``: the same DP-SGD setting (Poisson sampling at
``sample_rate`` seen by an observer who does not know the batches, add-remove neighbours, noise
multiplier = noise std / clipping norm of the sum) is ``noise_multiplier(target_epsilon=e,
target_delta=d, sample_rate=q, steps=T, threat="eavesdropper", neighbors="add-remove")``.
Opacus's names are accepted beside privzv's (``target_epsilon`` for ``epsilon``,
``target_delta`` for ``delta``; giving both is refused). ``epochs`` gives steps = ceil(epochs /
q) with q = ``sample_rate`` or B/D (Opacus truncates, int(epochs / q); privzv never counts
fewer steps than the epochs make). A ``sample_rate`` under the default threat ``device`` is
refused: a device knows its batch, so Poisson sampling hides nothing from it; give
``dataset_size`` and ``batch_size`` (privzv's threats and devices) instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from privzv import accounting, checks
from privzv.accounting import Result, Unanswered
from privzv.defaults import ACCOUNTANT, NEIGHBORS, THREAT
from privzv.errors import PrivzvError
from privzv.release import THREATS, HeadUpdate, Release, Schedule
from privzv.threats import Exposure

__all__ = ["noise_multiplier", "epsilon", "calibrate", "account", "calibrate_all", "account_all"]

_NOT_WITH_SAMPLE_RATE = ("dataset_size", "batch_size", "device_steps", "super_batch", "head_clip")


def _steps(steps: object, epochs: object, rate: float) -> int:
    """T from ``steps``, or from ``epochs`` at sampling rate ``rate``: ceil(epochs / rate) (a
    quotient within 1e-9 of an integer is that integer)."""
    if (steps is None) == (epochs is None):
        raise PrivzvError("give steps or epochs (one of them)")
    if steps is not None:
        return checks.integer("steps", steps, lo=1, cap=checks.MAX_STEPS)
    x = checks.number("epochs", epochs, lo=0, lo_open=True) / rate
    if not x <= checks.MAX_STEPS:
        raise PrivzvError(f"epochs={epochs!r}: {x:.3g} steps, above the cap {checks.MAX_STEPS:.0e}")
    near = round(x)
    return max(1, near if abs(x - near) <= 1e-9 * x else math.ceil(x))


def describe(
    *,
    steps: int | None = None,
    epochs: float | None = None,
    sample_rate: float | None = None,
    threat: str = THREAT,
    neighbors: str = NEIGHBORS,
    dataset_size: int | None = None,
    batch_size: int | None = None,
    devices: int = 1,
    device_steps: Sequence[int] | None = None,
    super_batch: int | None = None,
    clip: float | None = None,
    head_clip: float | None = None,
    head_share: float = 0.5,
    head_window: int = 0,
    head_sampling: str = "batch",
) -> tuple[Release, Schedule, Exposure]:
    """(release, schedule, exposure) of a question (clip 1 when not given: a noise multiplier
    does not depend on it). ``head_window`` and ``head_sampling`` ("batch" or "table") describe
    the DP head as ``privzv calibrate --head-window / --head-sampling`` do."""
    checks.choice("threat", threat, THREATS)
    checks.choice("head_sampling", head_sampling, ("batch", "table"))
    devices = checks.integer("devices", devices, lo=1, cap=checks.MAX_DEVICES)
    clip = 1.0 if clip is None else clip
    if sample_rate is not None:
        given = [
            n
            for n, v in zip(
                _NOT_WITH_SAMPLE_RATE, (dataset_size, batch_size, device_steps, super_batch, head_clip)
            )
            if v is not None
        ] + (["devices"] if devices != 1 else [])
        if given:
            raise PrivzvError(
                f"sample_rate with {', '.join(given)}: give sample_rate (an "
                "eavesdropper's Poisson rate), or dataset_size and batch_size"
            )
        if threat != "eavesdropper":
            raise PrivzvError(
                f"sample_rate={sample_rate!r} with threat={threat!r}: Poisson "
                "sampling hides nothing from a device that chose its batch; pass "
                'threat="eavesdropper" (what Opacus assumes, with '
                'neighbors="add-remove"), or dataset_size and batch_size'
            )
        q = checks.number("sample_rate", sample_rate, lo=0, hi=1, lo_open=True)
        t = _steps(steps, epochs, q)
        release = Release(clip=clip, batch_size=1, neighbors=neighbors)
        schedule = Schedule(steps=t, dataset_size=1, threat="eavesdropper")
        return release, schedule, Exposure(t, None if q == 1 else q)
    if dataset_size is None or batch_size is None:
        raise PrivzvError("give sample_rate, or dataset_size and batch_size")
    b = checks.integer("batch_size", batch_size, lo=1, cap=checks.MAX_DATASET)
    d = checks.integer("dataset_size", dataset_size, lo=1, cap=checks.MAX_DATASET)
    window = checks.integer("head_window", head_window, lo=0, cap=checks.MAX_STEPS)
    head = (
        None
        if head_clip is None
        else HeadUpdate(
            clip=head_clip,
            batch_size=b * (window * devices if window else 1),
            neighbors=neighbors,
            window=window,
            sampling_rate=b / d if head_sampling == "table" else None,
        )
    )
    release = Release(clip=clip, batch_size=b, neighbors=neighbors, head=head, head_share=head_share)
    schedule = Schedule(
        steps=_steps(steps, epochs, b / d),
        dataset_size=d,
        devices=devices,
        threat=threat,
        super_batch=super_batch,
        device_steps=device_steps,
    )
    return release, schedule, accounting.exposure(release, schedule)


def noise_multiplier(
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    target_epsilon: float | None = None,
    target_delta: float | None = None,
    steps: int | None = None,
    epochs: float | None = None,
    sample_rate: float | None = None,
    threat: str = THREAT,
    neighbors: str = NEIGHBORS,
    accountant: str = ACCOUNTANT,
    dataset_size: int | None = None,
    batch_size: int | None = None,
    devices: int = 1,
    device_steps: Sequence[int] | None = None,
    super_batch: int | None = None,
    head_clip: float | None = None,
    head_share: float = 0.5,
) -> Result:
    """The smallest noise multiplier (noise std / sensitivity of one record; with a DP head the
    round's combined one) whose epsilon at ``delta`` is at most ``epsilon``;
    ``float(result)`` is that noise multiplier.

    >>> import privzv
    >>> r = privzv.noise_multiplier(target_epsilon=1.0, target_delta=1e-5,
    ...                             sample_rate=256 / 60000, steps=14062,
    ...                             threat="eavesdropper", neighbors="add-remove")
    >>> round(float(r), 3), r.accountant, r.epsilon <= 1.0
    (2.025, 'pld', True)
    """
    target, d = _target(epsilon, target_epsilon, delta, target_delta)
    release, schedule, exp = describe(
        steps=steps,
        epochs=epochs,
        sample_rate=sample_rate,
        threat=threat,
        neighbors=neighbors,
        dataset_size=dataset_size,
        batch_size=batch_size,
        devices=devices,
        device_steps=device_steps,
        super_batch=super_batch,
        head_clip=head_clip,
        head_share=head_share,
    )
    return accounting.calibrate_exposure(target, d, release, schedule, exp, accountant)


def epsilon(
    *,
    noise_multiplier: float | None = None,
    delta: float | None = None,
    steps: int | None = None,
    epochs: float | None = None,
    sample_rate: float | None = None,
    threat: str = THREAT,
    neighbors: str = NEIGHBORS,
    accountant: str = ACCOUNTANT,
    dataset_size: int | None = None,
    batch_size: int | None = None,
    devices: int = 1,
    device_steps: Sequence[int] | None = None,
    super_batch: int | None = None,
    head_clip: float | None = None,
    head_share: float = 0.5,
) -> Result:
    """The epsilon at ``delta`` of a noise multiplier (arguments as :func:`noise_multiplier`);
    ``float(result)`` is that epsilon.

    >>> import privzv
    >>> r = privzv.epsilon(noise_multiplier=1.1, delta=1e-5, sample_rate=256 / 60000,
    ...                    steps=14062, threat="eavesdropper", neighbors="add-remove")
    >>> r.accountant, round(float(r), 2)
    ('pld', 2.38)
    """
    if noise_multiplier is None or delta is None:
        raise PrivzvError("give noise_multiplier and delta")
    z = checks.number("noise_multiplier", noise_multiplier, lo=0, lo_open=True)
    release, schedule, exp = describe(
        steps=steps,
        epochs=epochs,
        sample_rate=sample_rate,
        threat=threat,
        neighbors=neighbors,
        dataset_size=dataset_size,
        batch_size=batch_size,
        devices=devices,
        device_steps=device_steps,
        super_batch=super_batch,
        head_clip=head_clip,
        head_share=head_share,
    )
    return accounting.account_exposure(release.with_noise_multiplier(z), schedule, exp, delta, accountant)


def _target(
    epsilon: float | None, target_epsilon: float | None, delta: float | None, target_delta: float | None
) -> tuple[float, float]:
    """(epsilon, delta) from privzv's or Opacus's names (one of each)."""
    e = checks.one_of(("epsilon", "target_epsilon"), (epsilon, target_epsilon))
    d = checks.one_of(("delta", "target_delta"), (delta, target_delta))
    if e is None or d is None:
        raise PrivzvError("give epsilon (or target_epsilon) and delta (or target_delta)")
    return e, d


def calibrate(
    *,
    release: Release,
    schedule: Schedule,
    epsilon: float | None = None,
    delta: float | None = None,
    target_epsilon: float | None = None,
    target_delta: float | None = None,
    accountant: str = ACCOUNTANT,
) -> Result:
    """The smallest sigma for ``release`` whose epsilon under ``schedule`` is at most
    ``epsilon`` (:func:`privzv.accounting.calibrate`); ``float(result)`` is the noise
    multiplier, ``result.sigma`` the noise std."""
    e, d = _target(epsilon, target_epsilon, delta, target_delta)
    return accounting.calibrate(e, d, release, schedule, accountant)


def account(*, release: Release, schedule: Schedule, delta: float, accountant: str = ACCOUNTANT) -> Result:
    """The epsilon at ``delta`` of ``release`` (with its sigma) under ``schedule``
    (:func:`privzv.accounting.account`); ``float(result)`` is that epsilon."""
    return accounting.account(release, schedule, delta, accountant)


def calibrate_all(
    *,
    release: Release,
    schedule: Schedule,
    epsilon: float | None = None,
    delta: float | None = None,
    target_epsilon: float | None = None,
    target_delta: float | None = None,
) -> list[Result | Unanswered]:
    """:func:`calibrate` for every accountant and threat, side by side
    (:func:`privzv.accounting.calibrate_all`)."""
    e, d = _target(epsilon, target_epsilon, delta, target_delta)
    return accounting.calibrate_all(e, d, release, schedule)


def account_all(*, release: Release, schedule: Schedule, delta: float) -> list[Result | Unanswered]:
    """:func:`account` for every accountant and threat, side by side
    (:func:`privzv.accounting.account_all`)."""
    return accounting.account_all(release, schedule, delta)
