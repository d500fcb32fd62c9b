"""The Method strategy: what one training method does in one asynchronous round.

The scheduler (``privzv.training.scheduler``) owns everything that is shared: which device is active,
its batch (``privzv.training.sampling``), the check of every uplink, the server's embedding table
and its staleness, message transport, byte counting, transcripts, the privacy ledger, evaluation
and checkpoints. A method supplies
only the three halves of a round, each run by one party with that party's state only::

    up   = method.device_send(device, ids)        # on device m: the uplink Message
    down = method.server_reply(server, up)        # on the server: the downlink Message
    method.device_receive(device, down)           # on device m: its update

Rules for implementers (``training/methods/dpzv.py`` is the reference example):

* Build messages with ``self.message(sender, receiver, kind, **tensors)``; tensors must be
  detached. Everything sent is counted (bytes) and recorded (transcripts), so send nothing
  the protocol does not send.
* Device-side: run the model on a batch with ``device.embed(ids)`` (or ``device.forward(x)``:
  the batch moved to the model's device, under the run's autocast); keep what is needed until
  ``device_receive`` in ``device.scratch`` (cleared by the scheduler after the round). Draw a
  device's random perturbations from ``device.step_seed()``, its private noise from
  ``device.noise``; record device-known facts with ``device.note(kind, {name: tensor})``.
* Server-side: ``server.table`` (stale embeddings; update the active device's rows),
  ``server.head``, ``server.labels[ids]``, ``server.noise`` (the server's private source: DP
  noise and secret keep decisions come only from it, each mechanism from its own keyed stream,
  ``server.noise.stream("downlink")``, ``"head"``, ``"keep"``, ...).
* Honour ``self.train_devices`` / ``self.train_server`` (the ``--freeze`` ablation),
  ``self.sigma`` (the release's noise std, calibrated by privzv or given; 0 = none) and
  ``self.head_dp`` (the server head's DP update, ``privzv.release.HeadUpdate`` with its sigma, or
  None: train the head with ``privzv.training.methods.head``, which does both).
* ``release(config)`` describes the DP release a round makes (a ``privzv.release.Release``
  with ``sigma=None``, its ``head`` from ``head.head_update(config)``), or ``None`` when the
  method has no DP option; the run calibrates it and records every round in the privacy ledger.
  ``RELEASED_BY`` says which party draws the release's noise (and so records it in the ledger).
  ``PROTECTS`` declares the neighbour relation the run's epsilon covers (a key of
  ``privzv.release.PROTECTS``; the release carries it): ``"record"`` only if no release moves
  when a record outside its batch changes (``tests/training/test_neighbours.py``).
* ``device_abort(device)`` undoes ``device_send`` when the server refuses the uplink and sends
  nothing (a budget stop never reaches a device: the ledger is asked first).
* ``extra_state`` / ``load_extra_state``: optimiser states etc. for checkpoints (tensors/dicts).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import torch

from privzv.training.messages import Message

DEVICE = "device"  # a SECRET_STATE owner: the device whose index the path's "*" matched

if TYPE_CHECKING:
    from privzv.release import Release
    from privzv.training.config import TrainConfig
    from privzv.training.parties import Device, Server


class Method(abc.ABC):
    """Base class of a training method (a strategy inside the one scheduler).

    ``name`` is the registry name (``--method``). ``config`` is the run's ``TrainConfig``;
    ``sigma`` the per-coordinate noise std of its release (0.0: no noise); ``release``, the
    calibrated Release (its ``sigma`` and ``head`` are used when given; else ``sigma``).
    """

    name: ClassVar[str]
    LR_DEVICE: ClassVar[float]  # default learning rates (when --lr-device / --lr-server are not given)
    LR_SERVER: ClassVar[float]
    RELEASED_BY: ClassVar[str] = "server"  # the party that draws the release's noise
    PROTECTS: ClassVar[str] = "record"  # what the run's epsilon covers (privzv.release.PROTECTS)
    # Capabilities, asked by generic code (config rules, defaults, the run's summary):
    MULTI_DIRECTION: ClassVar[bool] = False  # takes --directions K > 1
    ZO_DEVICE_RATE: ClassVar[bool] = False  # its device rate defaults to ZO_RATE/sqrt(d), and a
    #                                           tuned one converts across device_momentum (defaults)
    DEFAULT_CLIP: ClassVar[float | None] = None  # its C where none is given or tuned (None:
    #                                           defaults.CLIP)
    LABEL_DP: ClassVar[bool] = False  # its epsilon is spent on privatised labels by the
    #                                           method itself, not on a noised release
    HEAD_TABLE_SHARE: ClassVar[float | None] = None  # its head's share of 1/z^2 on a sample of
    #                                           the table where --head-share is open (None:
    #                                           methods.head.TABLE_SHARE)
    # Paths into ``extra_state()`` that are a party's secret, with their owner (SERVER, or
    # DEVICE: the device whose index the "*" matched); the run folder keeps them private.
    SECRET_STATE: ClassVar[tuple[tuple[tuple[str, ...], str], ...]] = ()

    def __init__(self, config: TrainConfig, sigma: float = 0.0, release: Release | None = None):
        self.config = config
        self.sigma = float(sigma if release is None else release.sigma or 0.0)
        self.head_dp = None if release is None or not self.sigma else release.head
        # head_share 1 (the frozen-devices control): no downlink is released, zeros go instead
        self.withholds = self.head_dp is not None and release.withholds
        self.train_devices = config.freeze != "devices"
        self.train_server = config.freeze != "server"
        self.round = 0  # set by the scheduler before each round

    @classmethod
    def release(cls, config: TrainConfig) -> Release | None:
        """The DP release of one round (sigma unset), or None if this method has no DP option."""
        return None

    @classmethod
    def default_clip(cls, config: TrainConfig) -> float | None:
        """Its C for a run of ``config`` where none is given or tuned (None: defaults.CLIP)."""
        return cls.DEFAULT_CLIP

    @classmethod
    def zeroth_order_head(cls, config: TrainConfig) -> bool:
        """Whether this method's server head takes zeroth-order steps in a run of ``config``."""
        return False

    def default_rate(self, name: str) -> tuple[float, str]:
        """(value, source) of the rate ``name`` (``"lr_device"`` or ``"lr_server"``) this method
        applies where the run's config leaves it open (``privzv.training.defaults``)."""
        from privzv.training.methods import head

        own = f"{type(self).__name__}.{name.upper()}, the method's default"
        if name == "lr_device":
            return self.LR_DEVICE, own
        if self.head_dp is None or self.zeroth_order_head(self.config):
            return self.LR_SERVER, own
        size = sum(p.numel() for p in self.head.params)  # the built head step's trainable parameters
        return head.default_lr(
            self.head_dp, self.LR_SERVER, size, head.noise_step(self.head.module)
        ), "the DP head's default (methods.head.default_lr)"

    @classmethod
    def uplink_batch(cls, config: TrainConfig) -> int:
        """How many records a device sends per round (B; B' under secret subsampling)."""
        return config.batch_size

    def uplink_shapes(self, n: int) -> dict[str, tuple[int, ...]]:
        """The shape of every float32 tensor but ``ids`` of an uplink of n records (the server
        refuses any other: ``sampling.refusal``): here one embedding ``h`` [n, E]."""
        return {"h": (n, self.config.embed_dim)}

    def setup(self, devices: Sequence[Device], server: Server) -> None:
        """Create optimisers etc. once the parties exist (called once, before any round)."""

    @abc.abstractmethod
    def device_send(self, device: Device, ids: torch.Tensor) -> Message:
        """Device side, first half: compute on the batch ``ids`` and return the uplink message."""

    @abc.abstractmethod
    def server_reply(self, server: Server, up: Message) -> Message:
        """Server side: consume the uplink, update the table and head, return the downlink."""

    @abc.abstractmethod
    def device_receive(self, device: Device, down: Message) -> None:
        """Device side, second half: update the device's model from the downlink."""

    def device_abort(self, device: Device) -> None:
        """Device side: undo ``device_send`` (the server refused the uplink; nothing came back).
        The model must be as before ``device_send`` (up to float rounding: DPZV moves back by the
        opposite perturbation rather than keep a copy of its parameters)."""

    def extra_state(self) -> dict:
        """Method state for a checkpoint (optimiser states, momentum buffers)."""
        return {}

    def load_extra_state(self, state: dict) -> None:
        """Restore what ``extra_state`` returned."""

    def message(self, sender: str, receiver: str, kind: str, **tensors: torch.Tensor) -> Message:
        """A Message of this round (a withheld downlink: zeros of the same shapes)."""
        if self.withholds and sender == "server":
            tensors = {k: torch.zeros_like(v) for k, v in tensors.items()}
        return Message(self.round, sender, receiver, kind, tensors)
