"""One call each: the noise multiplier for a target (epsilon, delta), and the epsilon of one.

The counterpart of Opacus's ``opacus.accountants.utils.get_noise_multiplier(target_epsilon=,
target_delta=, sample_rate=, steps=, accountant=)``: the same DP-SGD setting (Poisson sampling
at ``sample_rate`` over ``steps`` releases, add-remove neighbours, noise multiplier = noise std /
clipping norm of the sum) is ``noise_multiplier(epsilon, delta, sample_rate=q, steps=T)``. Give
``dataset_size`` and ``batch_size`` instead of ``sample_rate`` for privzv's threats (``device``,
``secret-subsampling``) and devices. Both return a :class:`privzv.accounting.Result`, which names
the accountant that produced it; ``.noise_multiplier`` and ``.epsilon`` are the numbers.
"""
from __future__ import annotations

from privzv import accounting
from privzv.errors import PrivzvError
from privzv.release import HeadUpdate, Release, Schedule
from privzv.threats import Exposure

__all__ = ["noise_multiplier", "epsilon"]


def _describe(sample_rate, steps, threat, neighbors, dataset_size, batch_size, devices,
              device_steps, super_batch, head_clip, head_share):
    """(release, schedule, exposure) of the one-call arguments."""
    if sample_rate is not None:
        if dataset_size is not None or batch_size is not None:
            raise PrivzvError("give sample_rate or (dataset_size, batch_size), not both")
        if threat != "eavesdropper":
            raise PrivzvError(f"threat={threat!r}: sample_rate describes Poisson sampling seen by "
                              "an eavesdropper; give dataset_size and batch_size for other threats")
        if not (isinstance(sample_rate, (int, float)) and 0 < sample_rate <= 1):
            raise PrivzvError(f"sample_rate={sample_rate!r}: must be a number with 0 < q <= 1")
        release = Release(clip=1.0, batch_size=1, neighbors=neighbors)
        schedule = Schedule(steps=steps, dataset_size=1, threat="eavesdropper")
        return release, schedule, Exposure(steps, None if sample_rate == 1 else float(sample_rate))
    if dataset_size is None or batch_size is None:
        raise PrivzvError("give sample_rate, or dataset_size and batch_size")
    head = None if head_clip is None else HeadUpdate(head_clip, batch_size, neighbors)
    release = Release(clip=1.0, batch_size=batch_size, neighbors=neighbors, head=head,
                      head_share=head_share)
    schedule = Schedule(steps=steps, dataset_size=dataset_size, devices=devices, threat=threat,
                        super_batch=super_batch, device_steps=device_steps)
    return release, schedule, accounting.exposure(release, schedule)


def noise_multiplier(epsilon: float, delta: float, *, steps: int,
                     sample_rate: float | None = None, threat: str = "eavesdropper",
                     neighbors: str = "add-remove", accountant: str = "best",
                     dataset_size: int | None = None, batch_size: int | None = None,
                     devices: int = 1, device_steps: tuple[int, ...] | None = None,
                     super_batch: int | None = None, head_clip: float | None = None,
                     head_share: float = 0.5) -> accounting.Result:
    """The smallest noise multiplier (noise std / sensitivity of one record; with a DP head the
    round's combined one) whose epsilon at ``delta`` is at most ``epsilon``.

    >>> import privzv
    >>> r = privzv.noise_multiplier(1.0, 1e-5, sample_rate=256 / 60000, steps=14062)
    >>> round(r.noise_multiplier, 3), r.accountant, r.epsilon <= 1.0
    (2.025, 'pld', True)
    """
    release, schedule, exp = _describe(sample_rate, steps, threat, neighbors, dataset_size,
                                       batch_size, devices, device_steps, super_batch,
                                       head_clip, head_share)
    return accounting.calibrate_exposure(epsilon, delta, release, schedule, exp, accountant)


def epsilon(noise_multiplier: float, delta: float, *, steps: int,
            sample_rate: float | None = None, threat: str = "eavesdropper",
            neighbors: str = "add-remove", accountant: str = "best",
            dataset_size: int | None = None, batch_size: int | None = None, devices: int = 1,
            device_steps: tuple[int, ...] | None = None, super_batch: int | None = None,
            head_clip: float | None = None, head_share: float = 0.5) -> accounting.Result:
    """The epsilon at ``delta`` of a noise multiplier (arguments as :func:`noise_multiplier`).

    >>> import privzv
    >>> r = privzv.epsilon(1.1, 1e-5, sample_rate=256 / 60000, steps=14062)
    >>> r.accountant, round(r.epsilon, 2)
    ('pld', 2.38)
    """
    if not (isinstance(noise_multiplier, (int, float)) and noise_multiplier > 0):
        raise PrivzvError(f"noise_multiplier={noise_multiplier!r}: must be a number > 0")
    release, schedule, exp = _describe(sample_rate, steps, threat, neighbors, dataset_size,
                                       batch_size, devices, device_steps, super_batch,
                                       head_clip, head_share)
    return accounting.account_exposure(release.with_noise_multiplier(noise_multiplier), schedule,
                                       exp, delta, accountant)
