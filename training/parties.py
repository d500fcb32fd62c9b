"""The parties' state: devices (a slice of every record, a bottom model) and the server (labels,
a head, the table of the latest, possibly stale, embedding of every device for every record).

Methods get a :class:`Device` or the :class:`Server` and nothing else, so a method step cannot
read another party's data. ``note`` puts a party-local fact (its u seed, a private keep mask) in
that party's transcript.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from privzv.training import accelerator, seeds, zo

if TYPE_CHECKING:
    from privzv.training.noise import NoiseSource

Note = Callable[[str, dict], None]


def _no_note(kind: str, fields: dict) -> None:
    return None


@dataclasses.dataclass
class Device:
    """Device ``index``: its model, its training features ``x`` [N, ...] and its private state.

    ``step`` is the device's own step counter t_m (incremented by the scheduler after each of its
    rounds). ``flat`` is the model's parameters as one 1-D buffer (``privzv.training.zo.flatten_``, done
    once here): the parameters are views of it, so a ZO pass over them is one draw and one add.
    ``scratch`` holds what a method keeps between sending and receiving (a seed, an autograd
    graph); the scheduler clears it after each round. ``noise`` is the device's private
    generator (forward noise), never seen by the server. The model computes where its parameters
    are (``place``); ``x`` stays where the dataset put it, and :meth:`forward` moves each batch
    there, under ``autocast`` (``privzv.training.accelerator.AUTOCAST``; outputs float32).
    """

    index: int
    model: nn.Module
    x: torch.Tensor
    seed: int
    noise: NoiseSource
    step: int = 0
    scratch: dict = dataclasses.field(default_factory=dict)
    note: Note = _no_note
    autocast: str = "none"
    flat: torch.Tensor = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.flat = zo.flatten_(self.model)

    @property
    def place(self) -> torch.device:
        """The device the model's parameters (and so its forwards) are on."""
        return self.flat.device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model on inputs ``x`` (moved to :attr:`place`), float32 whatever the autocast."""
        with accelerator.precision(self.autocast, self.place):
            return self.model(accelerator.load(x, self.place)).float()

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The model on the records ``ids`` of this device's training features."""
        return self.forward(self.x[ids])

    def step_seed(self, k: int = 0) -> int:
        """The seed of this device's k-th perturbation u_k at its current step (device-known)."""
        names = (self.index, self.step) if k == 0 else (self.index, self.step, k)
        return seeds.derive(self.seed, "u", *names)


class EmbeddingTable:
    """The server's copy h~[m, i] of every device's latest embedding (zeros until first sent).

    With ``max_delay`` > 0 an update becomes visible after d rounds, d uniform in
    {0..max_delay} (bounded delay, arXiv:2502.20565v3, eq. (5)); ``gather`` applies the due updates first.
    ``filled[m, i]``: whether device m's embedding of record i has reached the table (a fact of
    the public schedule; a sampled head uses a record once all its rows have). Both live on
    ``place`` (default: torch's default device), the server's.
    """

    def __init__(
        self,
        devices: int,
        records: int,
        dim: int,
        max_delay: int = 0,
        rng: np.random.Generator | None = None,
        place: torch.device | None = None,
    ):
        self.data = torch.zeros(devices, records, dim, device=place)
        self.filled = torch.zeros(devices, records, dtype=torch.bool, device=place)
        self.max_delay = max_delay
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.round = 0
        self.pending: list[tuple[int, int, int, torch.Tensor, torch.Tensor]] = []
        self._seq = 0

    def update(self, m: int, ids: torch.Tensor, emb: torch.Tensor) -> None:
        delay = int(self.rng.integers(0, self.max_delay + 1)) if self.max_delay else 0
        if delay == 0:
            self.data[m, ids] = emb.detach().to(self.data)
            self.filled[m, ids] = True
            return
        self.pending.append((self.round + delay, self._seq, m, ids.clone(), emb.detach().clone()))
        self._seq += 1

    def gather(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """The M stale embeddings [B, dim] of records ``ids``, after applying due updates."""
        if self.pending:
            due = sorted(p for p in self.pending if p[0] <= self.round)
            self.pending = [p for p in self.pending if p[0] > self.round]
            for _, _, m, pids, emb in due:
                self.data[m, pids] = emb
                self.filled[m, pids] = True
        return [self.data[m, ids] for m in range(self.data.shape[0])]

    def state_dict(self) -> dict:
        return {
            "data": self.data.clone(),
            "filled": self.filled.clone(),
            "round": self.round,
            "seq": self._seq,
            "pending": list(self.pending),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        place = self.data.device
        self.data = state["data"].to(place, copy=True)
        # a checkpoint from before ``filled``: a row is filled once it is non-zero
        self.filled = state["filled"].to(place, copy=True) if "filled" in state else (self.data != 0).any(-1)
        self.round, self._seq = state["round"], state["seq"]
        self.pending = [(*p[:4], p[4].to(place)) for p in state["pending"]]
        self.rng.bit_generator.state = state["rng"]


@dataclasses.dataclass
class Server:
    """The server: ``head`` model, training ``labels`` [N], ``table``, private ``noise`` generator.

    ``round`` is the global round t. The noise generator is seeded from the run's secret seed,
    never from anything a device knows.
    """

    head: nn.Module
    labels: torch.Tensor
    table: EmbeddingTable
    noise: NoiseSource
    round: int = 0
    note: Note = _no_note
