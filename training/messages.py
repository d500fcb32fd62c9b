"""Explicit protocol messages and the byte meter of arXiv:2502.20565v3, eq. (23).

A :class:`Message` is what crosses the wire in one direction: a few named tensors. Its size is
counted from those tensors (``numel * element_size``), so V_T = sum_t sum_m (N_up + N_down) of
eq. (23) is exactly what :class:`Traffic` sums. Sample ids that a device sends so the server can
align records are tensors of the message too, and are counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import torch

SERVER = "server"


def device_name(m: int) -> str:
    """The party name of device ``m`` (``device0``, ``device1``, ...)."""
    return f"device{m}"


def device_index(name: str) -> int:
    """The index m of party ``device{m}``."""
    return int(name.removeprefix("device"))


@dataclasses.dataclass(frozen=True)
class Message:
    """One message: ``sender`` -> ``receiver`` in global round ``round``, of a method-defined ``kind``.

    ``tensors`` are detached data (no autograd graph crosses a party boundary; checked).
    """

    round: int
    sender: str
    receiver: str
    kind: str
    tensors: Mapping[str, torch.Tensor]

    def __post_init__(self):
        for name, value in self.tensors.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"message field {name!r} is {type(value).__name__}, not a tensor")
            if value.requires_grad:
                raise ValueError(f"message field {name!r} carries an autograd graph: detach it")

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: sum of numel x element size over the tensors sent."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


class Traffic:
    """Bytes up (device -> server) and down (server -> device), per round and per device."""

    def __init__(self, devices: int):
        self.up = np.zeros(devices, dtype=np.int64)
        self.down = np.zeros(devices, dtype=np.int64)
        self.log: list[tuple[int, int, int, int]] = []  # (round, device, bytes up, bytes down)

    def add(self, round_: int, device: int, up: Message, down: Message) -> None:
        n_up, n_down = up.nbytes, down.nbytes
        self.up[device] += n_up
        self.down[device] += n_down
        self.log.append((round_, device, n_up, n_down))

    @property
    def total_up(self) -> int:
        return int(self.up.sum())

    @property
    def total_down(self) -> int:
        return int(self.down.sum())

    def state_dict(self) -> dict:
        return {
            "up": self.up.copy(),
            "down": self.down.copy(),
            "log": np.asarray(self.log, dtype=np.int64).reshape(-1, 4),
        }

    def load_state_dict(self, state: dict) -> None:
        self.up = np.asarray(state["up"], dtype=np.int64).copy()
        self.down = np.asarray(state["down"], dtype=np.int64).copy()
        self.log = [tuple(int(v) for v in row) for row in np.asarray(state["log"])]
