"""A release is data: one kind of noisy message, described once.

The trainer draws noise from it, the ledger accounts it, the calibrator solves for its sigma and
the auditor attacks it (compare dp-accounting's ``DpEvent``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from privzv import checks
from privzv.defaults import NEIGHBORS as DEFAULT_NEIGHBORS
from privzv.defaults import THREAT as DEFAULT_THREAT
from privzv.errors import PrivzvError

NEIGHBORS = ("replace-one", "add-remove")
AGGREGATES = ("mean", "per-sample")
THREATS = ("device", "eavesdropper", "secret-subsampling")
# What a release's epsilon covers over the whole run (docs/accounting.md "Threat model contract"):
# the neighbour relation it is proven for. Two datasets are neighbours when they differ in
PROTECTS = {
    "record": "record-level (one record's features and label)",
    "label": "labels only (one record's label; its features are not protected)",
    "none": "no whole-run guarantee (each release alone; earlier records' features reach later "
    "releases through first-order device updates)",
}


def covers(protects: str) -> str:
    """The phrase printed beside every epsilon: what it covers (``PROTECTS``)."""
    return f"covers {PROTECTS[protects]}"


def _set(obj, name: str, value):
    """Store a checked (normalised) field of a frozen dataclass; returns ``value``."""
    object.__setattr__(obj, name, value)
    return value


def _sigma(name: str, value) -> float | None:
    """A noise std: None (still to be calibrated) or a finite number >= 0."""
    return None if value is None else checks.number(name, value, lo=0)


def _neighbor_factor(neighbors: str) -> float:
    """A record's L2 reach: 2C when one record is replaced by another, C when it is added/removed."""
    return 2.0 if neighbors == "replace-one" else 1.0


@dataclasses.dataclass(frozen=True)
class HeadUpdate:
    """The server head's DP-SGD step.

    Per-example gradients of the head's loss are clipped to L2 norm ``clip``, summed and divided
    by the fixed divisor ``batch_size`` (also under Poisson sampling); Gaussian noise of std
    ``sigma`` is added to each coordinate of that mean (Abadi et al. 2016, "Deep Learning with
    Differential Privacy", Alg. 1). Sensitivity of one clipped row: 2C_h/divisor (replace-one)
    or C_h/divisor (add-remove).

    ``window`` = 0: one step per round on the round's batch (divisor B), made in the same round
    as the downlink release. ``window`` = q >= 1: one step per pooled window of the shared walk
    (:func:`privzv.threats.window_closes`: q batches of every device, windows restarting at each
    epoch; divisor q M B), summing the clipped rows of every round in the window. A record in c
    of the window's batches moves the sum by c times a row's reach, so the window is one
    Gaussian mechanism of noise multiplier sigma / (c * sensitivity) for it
    (:mod:`privzv.threats`).

    ``sampling_rate`` = q_h (the sampled head, ``--head-sampling table``): one step per round on
    a Poisson sample of the server's embedding table drawn at rate q_h from its secret source,
    independent of the downlink's batch, divisor ``batch_size`` = q_h D. No party knows who is
    in a step, so each step is a Poisson-subsampled Gaussian against every threat, composed with
    the downlink releases per record (:mod:`privzv.mixture`); None: the head steps on the
    round's batch (above).
    """

    clip: float
    batch_size: int
    neighbors: str = DEFAULT_NEIGHBORS
    sigma: float | None = None
    window: int = 0
    sampling_rate: float | None = None

    def __post_init__(self):
        _set(self, "clip", checks.number("head clip", self.clip, lo=0, lo_open=True))
        _set(self, "batch_size", checks.integer("head batch_size", self.batch_size, lo=1))
        checks.choice("neighbors", self.neighbors, NEIGHBORS)
        _set(self, "sigma", _sigma("head sigma", self.sigma))
        _set(self, "window", checks.integer("head window", self.window, lo=0, cap=checks.MAX_STEPS))
        q = self.sampling_rate
        if q is not None:
            q = _set(self, "sampling_rate", checks.number("head sampling_rate", q, lo=0, hi=1, lo_open=True))
        if q is not None and self.window:
            raise PrivzvError(
                f"head window={self.window}: a sampled head (sampling_rate {q:g}) "
                "steps every round; use window 0"
            )
        checks.representable("head clip", self.clip, self.sensitivity, "the head's sensitivity")

    @property
    def sampled(self) -> bool:
        """Whether the head steps on a secret Poisson sample of the table."""
        return self.sampling_rate is not None

    @property
    def sensitivity(self) -> float:
        """L2 reach of one clipped row on the released mean: 2C_h or C_h over the divisor."""
        return _neighbor_factor(self.neighbors) * self.clip / self.batch_size


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

    ``head``: the server head's DP update made in the same round from the same records
    (:class:`HeadUpdate`), or None when the head is frozen. A round is then two Gaussian
    mechanisms on the same records; with noise multipliers z_d (downlink) and z_h (head) it is
    exactly one Gaussian mechanism with z = (z_d^-2 + z_h^-2)^(-1/2) (the pair's privacy loss
    depends only on the L2 norm of the sensitivity vector over the noise, per coordinate; this
    holds also under Poisson sampling, which includes or drops a record from both at once).
    ``noise_multiplier`` is that round-level z; ``head_share`` is the fraction of the round's
    1/z^2 spent on the head: z_h = z / sqrt(share), z_d = z / sqrt(1 - share) (0.5: one noise
    multiplier for both, z_d = z_h = sqrt(2) z). ``head_share`` = 1 (with a head): the whole
    budget on the head and NO downlink release: the server sends zeros in its place
    (``withholds``; the frozen-devices control), the round is the head's mechanism alone, z = z_h,
    and ``sigma`` is the std of a downlink value computed at z but never sent.

    ``protects``: the neighbour relation the run's epsilon is proven for (a key of ``PROTECTS``),
    the method's own declaration (``Method.PROTECTS``). ``"label"`` where a record's features
    reach releases whose batch does not hold it (first-order device updates J(x)^T g), so only
    its label is covered; ``"record"`` where no release moves without the record in its batch
    (``tests/training/test_neighbours.py`` checks both for every method).

    With a sampled head (``head.sampled``) the two mechanisms no longer act on the same records
    and z is not one Gaussian: it is the one parameter calibration solves for, split at the fixed
    ratio above (z_h / z_d = sqrt((1 - share) / share)), and the accountants compose the two
    (:mod:`privzv.mixture`).
    """

    clip: float
    batch_size: int
    sigma: float | None = None
    aggregate: str = "mean"
    neighbors: str = DEFAULT_NEIGHBORS
    dim: int = 1
    head: HeadUpdate | None = None
    head_share: float = 0.5
    protects: str = "record"

    def __post_init__(self):
        if isinstance(self.head, dict):  # from a JSON state
            try:
                _set(self, "head", HeadUpdate(**self.head))
            except TypeError as exc:
                raise PrivzvError(f"head: {exc}") from None
        if self.head is not None:
            checks.instance("head", self.head, HeadUpdate, "a HeadUpdate, its dict, or None")
        _set(self, "clip", checks.number("clip", self.clip, lo=0, lo_open=True))
        _set(self, "batch_size", checks.integer("batch_size", self.batch_size, lo=1, cap=checks.MAX_DATASET))
        _set(self, "sigma", _sigma("sigma", self.sigma))
        checks.choice("aggregate", self.aggregate, AGGREGATES)
        checks.choice("neighbors", self.neighbors, NEIGHBORS)
        checks.choice("protects", self.protects, tuple(PROTECTS))
        _set(self, "dim", checks.integer("dim", self.dim, lo=1))
        _set(self, "head_share", checks.number("head_share", self.head_share, lo=0, hi=1, lo_open=True))
        if self.head is not None and self.head.neighbors != self.neighbors:
            raise PrivzvError(
                f"head neighbors={self.head.neighbors!r}: must equal the release's {self.neighbors!r}"
            )
        checks.representable("clip", self.clip, self.sensitivity, "the sensitivity")
        if self.sigma:
            checks.representable(
                "sigma", self.sigma, self.sigma / self.sensitivity, "the noise multiplier sigma / sensitivity"
            )
        if self.head is not None and self.head.sigma:
            checks.representable(
                "head sigma",
                self.head.sigma,
                self.head.sigma / self.head.sensitivity,
                "the head's noise multiplier",
            )

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of the un-noised message: 2C (replace-one) or C (add-remove), / B for a mean."""
        per_record = _neighbor_factor(self.neighbors) * self.clip
        return per_record / self.batch_size if self.aggregate == "mean" else per_record

    def split(self, z: float) -> tuple[float, float | None]:
        """(z_downlink, z_head) of a round-level noise multiplier z (z_head None without a head)."""
        if self.head is None:
            return z, None
        if self.withholds:
            return z, z
        return z / math.sqrt(1.0 - self.head_share), z / math.sqrt(self.head_share)

    @property
    def withholds(self) -> bool:
        """Whether no downlink is released (a head with ``head_share`` 1: zeros are sent)."""
        return self.head is not None and self.head_share == 1

    @property
    def head_weight(self) -> float:
        """The head's fraction of the round's 1/z^2: from the two sigmas when both are set
        (z^2 / z_h^2), else ``head_share``; 0 without a head."""
        if self.head is None:
            return 0.0
        if self.withholds:
            return 1.0
        if self.sigma is None or self.head.sigma is None or not self.sigma or not self.head.sigma:
            return self.head_share
        z = self.noise_multiplier
        return (z * self.head.sensitivity / self.head.sigma) ** 2

    @property
    def noise_multiplier(self) -> float:
        """The round's noise multiplier (sigma / sensitivity, combined with the head's): the one
        number the accountants see."""
        if self.sigma is None:
            raise PrivzvError("this release has no sigma yet: calibrate it or give --sigma")
        z = self.sigma / self.sensitivity
        if self.head is None:
            return z
        if self.withholds:  # the head's mechanism alone
            return z if self.head.sigma is None else self.head.sigma / self.head.sensitivity
        z_head = (
            self.head.sigma / self.head.sensitivity
            if self.head.sigma is not None
            else self.split(z * math.sqrt(1.0 - self.head_share))[1]
        )  # z at the split
        assert z_head is not None
        if z == 0 or z_head == 0:
            return 0.0
        inverse = z**-2 + z_head**-2
        return inverse**-0.5 if inverse > 0 else 1.0 / math.hypot(1.0 / z, 1.0 / z_head)

    def with_noise_multiplier(self, z: float) -> Release:
        """This release with the round-level noise multiplier z, split between downlink and head."""
        z = checks.number("noise_multiplier", z, lo=0, lo_open=True)
        z_down, z_head = self.split(z)
        checks.representable("noise_multiplier", z, z_down * self.sensitivity, "sigma")
        head = (
            None
            if self.head is None or z_head is None
            else dataclasses.replace(self.head, sigma=z_head * self.head.sensitivity)
        )
        return dataclasses.replace(self, sigma=z_down * self.sensitivity, head=head)

    def with_sigma(self, sigma: float) -> Release:
        """This release with downlink noise std ``sigma`` (the head's std follows the split)."""
        sigma = checks.number("sigma", sigma, lo=0, lo_open=True)
        z = checks.representable(
            "sigma",
            sigma,
            sigma
            / self.sensitivity
            * math.sqrt(1.0 - (self.head_share if self.head and not self.withholds else 0.0)),
            "the noise multiplier sigma / sensitivity",
        )
        return self.with_noise_multiplier(z)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How often a release is made and who observes it.

    ``steps`` is T, releases in total over the run (as in the seed paper). ``device_steps`` gives
    each device's number of rounds (n_0, ..., n_{M-1}, summing to T) when the activation order
    is fixed before training; None means round-robin (n_m = T // M, plus one for m < T % M). ``dataset_size`` is D. ``threat`` names the observer:
    ``device`` (knows its batch, no amplification), ``eavesdropper`` (Poisson q=B/D over all T),
    ``secret-subsampling`` (the server keeps each record of a super-batch of ``super_batch`` with
    probability B/B' and tells nobody).
    """

    steps: int
    dataset_size: int
    devices: int = 1
    threat: str = DEFAULT_THREAT
    super_batch: int | None = None
    device_steps: Sequence[int] | None = None

    def __post_init__(self):
        _set(self, "steps", checks.integer("steps", self.steps, lo=1, cap=checks.MAX_STEPS))
        _set(
            self,
            "dataset_size",
            checks.integer("dataset_size", self.dataset_size, lo=1, cap=checks.MAX_DATASET),
        )
        _set(
            self,
            "devices",
            checks.integer(
                "devices", self.devices, lo=1, cap=checks.MAX_DEVICES, why="per-device counts are kept"
            ),
        )
        checks.choice("threat", self.threat, THREATS)
        if self.super_batch is not None:
            _set(self, "super_batch", checks.integer("super_batch", self.super_batch, lo=1))
        if self.threat == "secret-subsampling" and self.super_batch is None:
            raise PrivzvError("threat='secret-subsampling' needs super_batch (B' >= B)")
        if self.device_steps is not None:
            _set(self, "device_steps", self._device_steps(self.device_steps))

    def _device_steps(self, n) -> tuple[int, ...]:
        """``device_steps`` as a tuple of ints, or PrivzvError."""
        allowed = f"must be {self.devices} integers >= 0 summing to steps={self.steps}"
        if not isinstance(n, (list, tuple)) or len(n) != self.devices:
            raise PrivzvError(f"device_steps={checks.short(n)}: {allowed}")
        counts = tuple(checks.integer("device_steps", v, lo=0) for v in n)
        if sum(counts) != self.steps:
            raise PrivzvError(f"device_steps={checks.short(n)}: {allowed}")
        return counts

    def steps_per_device(self) -> tuple[int, ...]:
        """Rounds of each device: ``device_steps``, or round-robin over the devices."""
        if self.device_steps is not None:
            return tuple(self.device_steps)
        t, m = self.steps, self.devices
        return tuple(t // m + (i < t % m) for i in range(m))
