"""The in-process engine: every device lives in this Python process and is called directly."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from privzv.training.messages import Message, device_name
from privzv.training.methods.base import Method
from privzv.training.parties import Device, Server


class InProcessEngine:
    """The devices' part of each round, by direct calls on ``devices`` (``Device`` objects)."""

    def __init__(self, devices: Sequence[Device]):
        self.devices = list(devices)
        self.count = len(self.devices)
        self.method: Method | None = None

    def setup(self, method: Method, server: Server, noter: Callable[[str], Callable]) -> None:
        """Give every device its transcript noter and create the method's state of all parties."""
        self.method = method
        for d in self.devices:
            d.note = noter(device_name(d.index))
        method.setup(self.devices, server)

    def clock(self, m: int) -> Device:
        """What the sampler reads of device ``m`` (its step counter t_m)."""
        return self.devices[m]

    def send(self, m: int, round_: int, ids: torch.Tensor) -> Message:
        device = self.devices[m]
        device.note("batch", {"ids": ids})
        return self.method.device_send(device, ids)

    def deliver(self, m: int, down: Message) -> None:
        device = self.devices[m]
        self.method.device_receive(device, down)
        end_round(device, stepped=True)

    def abort(self, m: int) -> None:
        device = self.devices[m]
        self.method.device_abort(device)
        end_round(device, stepped=False)  # the round is spent; the device's step (its batch) is not

    def embeddings(self, x_test: Sequence[torch.Tensor], rows: slice) -> list[torch.Tensor]:
        """Every device's embedding of test records ``rows`` (no grad; the caller sets eval mode)."""
        return [d.forward(x_test[d.index][rows]) for d in self.devices]

    def models(self) -> list:
        return [d.model for d in self.devices]

    def state_dict(self) -> list[dict]:
        return [
            {"model": d.model.state_dict(), "step": d.step, "noise": d.noise.state_dict()}
            for d in self.devices
        ]

    def load_state_dict(self, states: list[dict]) -> None:
        for d, s in zip(self.devices, states):
            d.model.load_state_dict(s["model"])
            d.step = s["step"]
            d.noise.load_state_dict(s["noise"])

    def close(self) -> None:
        """Nothing to stop in process."""


def end_round(device: Device, stepped: bool) -> None:
    """A device's bookkeeping at the end of its round: scratch cleared; its step counter t_m
    advances only when the round completed (``stepped``)."""
    device.scratch.clear()
    if stepped:
        device.step += 1
