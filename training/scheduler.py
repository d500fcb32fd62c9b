"""The asynchronous scheduler, written once for every method (papers/000 Sec. IV, Algorithm 1).

Each global round t activates one device m (probabilities ``activation``, uniform by default),
which takes the next batch of its own epoch-shuffled order (every record once per device epoch,
the ``device`` threat model of privzv), then runs ``method.device_send`` -> ``server_reply`` ->
``device_receive``. The scheduler moves the messages, counts their bytes (eq. (23)), records the
transcripts, asks the privacy ledger before every DP release, and evaluates on the test split.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from privzv.training import seeds
from privzv.training.messages import SERVER, Traffic, device_name
from privzv.training.methods.base import Method
from privzv.training.parties import Device, Server
from privzv.training.transcript import Recorder


class EpochSampler:
    """Epoch-shuffled batches of one device: a fresh permutation of the N records each epoch.

    The last batch of an epoch may be smaller (every record exactly once per epoch).
    """

    def __init__(self, records: int, batch: int, seed: int):
        self.records, self.batch = records, batch
        self.gen = seeds.generator(seed)
        self.perm = torch.randperm(records, generator=self.gen)
        self.pos = 0

    def next(self) -> torch.Tensor:
        if self.pos >= self.records:
            self.perm = torch.randperm(self.records, generator=self.gen)
            self.pos = 0
        ids = self.perm[self.pos:self.pos + self.batch]
        self.pos += len(ids)
        return ids.clone()

    def state_dict(self) -> dict:
        return {"gen": self.gen.get_state(), "perm": self.perm.clone(), "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
        self.perm, self.pos = state["perm"].clone(), state["pos"]


@dataclasses.dataclass
class Evaluation:
    """Test metrics at one evaluation point."""

    round: int
    test_accuracy: float
    test_loss: float
    bytes_up: int
    bytes_down: int


class Scheduler:
    """Runs rounds of ``method`` over ``devices`` and ``server``.

    ``ledger`` (a ``privzv.ledger.PrivacyLedger`` or None) is asked ``would_exceed`` before and
    told ``record`` at each round's release. ``recorder`` collects the transcripts.
    """

    def __init__(self, method: Method, devices: Sequence[Device], server: Server, *,
                 batch: int, seed: int, activation: Sequence[float] | None = None,
                 recorder: Recorder | None = None, ledger=None):
        self.method, self.devices, self.server = method, list(devices), server
        self.samplers = [EpochSampler(len(server.labels), batch, seeds.derive(seed, "batches", d.index))
                         for d in self.devices]
        m = len(self.devices)
        self.probs = np.full(m, 1.0 / m) if activation is None else np.asarray(activation, float)
        self.rng = np.random.default_rng(seeds.derive(seed, "activation"))
        self.recorder = recorder or Recorder([], {}, enabled=False)
        self.ledger = ledger
        self.traffic = Traffic(m)
        self.round = 0
        self.stopped: str | None = None
        for d in self.devices:
            d.note = self._noter(device_name(d.index))
        server.note = self._noter(SERVER)
        method.setup(self.devices, server)

    def _noter(self, party: str) -> Callable[[str, dict], None]:
        return lambda kind, fields: self.recorder.local(party, self.round, kind, fields)

    def step(self) -> bool:
        """One asynchronous round. False (and ``stopped`` = "budget") if the ledger refuses it."""
        # the draw is undone if the ledger refuses it, so only a private run snapshots it
        rng_state = self.rng.bit_generator.state if self.ledger is not None else None
        m = int(self.rng.choice(len(self.devices), p=self.probs))
        device, sampler = self.devices[m], self.samplers[m]
        state = sampler.state_dict() if self.ledger is not None else None
        ids = sampler.next()
        if self.ledger is not None:
            batch = ids.numpy()
            if self.ledger.would_exceed(m, batch):
                sampler.load_state_dict(state)      # undo the draw: a resume meets the same round
                self.rng.bit_generator.state = rng_state
                self.stopped = "budget"
                return False
            self.ledger.record(m, batch)
        self.method.round = self.server.round = self.server.table.round = self.round
        device.note("batch", {"ids": ids})
        up = self.method.device_send(device, ids)
        self.recorder.message(up)
        down = self.method.server_reply(self.server, up)
        self.recorder.message(down)
        self.method.device_receive(device, down)
        self.traffic.add(self.round, m, up, down)
        device.scratch.clear()
        device.step += 1
        self.round += 1
        return True

    def run(self, rounds: int, eval_at: Callable[[int], bool], on_eval: Callable[[int], None],
            tick: Callable[[], None] = lambda: None) -> None:
        """Run until global round ``rounds`` (or the budget stops it); ``on_eval`` where due."""
        while self.round < rounds:
            if not self.step():
                on_eval(self.round)
                return
            tick()
            if eval_at(self.round):
                on_eval(self.round)

    def evaluate(self, x_test: Sequence[torch.Tensor], y_test: torch.Tensor, chunk: int = 2048) -> Evaluation:
        """Accuracy and mean cross-entropy on the test split with the current (fresh) embeddings."""
        correct, loss = 0, 0.0
        models = [d.model for d in self.devices] + [self.server.head]
        modes = [mod.training for mod in models]
        for mod in models:
            mod.eval()
        with torch.no_grad():
            for start in range(0, len(y_test), chunk):
                sl = slice(start, start + chunk)
                logits = self.server.head([d.model(x_test[d.index][sl]) for d in self.devices])
                y = y_test[sl]
                loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
                correct += int((logits.argmax(1) == y).sum())
        for mod, mode in zip(models, modes):
            mod.train(mode)
        n = len(y_test)
        loss = loss / n if math.isfinite(loss) else float("nan")
        return Evaluation(self.round, correct / n, loss, self.traffic.total_up, self.traffic.total_down)

    def state_dict(self) -> dict:
        """Everything needed to continue bit-for-bit (models, optimisers, generators, table)."""
        t = self.traffic.state_dict()
        return {
            "round": self.round,
            "devices": [{"model": d.model.state_dict(), "step": d.step, "noise": d.noise.state_dict()}
                        for d in self.devices],
            "server": {"head": self.server.head.state_dict(), "noise": self.server.noise.state_dict(),
                       "table": self.server.table.state_dict()},
            "samplers": [s.state_dict() for s in self.samplers],
            "rng": self.rng.bit_generator.state,
            "traffic": {k: torch.as_tensor(v) for k, v in t.items()},
            "method": self.method.extra_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.round = state["round"]
        for d, s in zip(self.devices, state["devices"]):
            d.model.load_state_dict(s["model"])
            d.step = s["step"]
            d.noise.load_state_dict(s["noise"])
        self.server.head.load_state_dict(state["server"]["head"])
        self.server.noise.load_state_dict(state["server"]["noise"])
        self.server.table.load_state_dict(state["server"]["table"])
        for sampler, s in zip(self.samplers, state["samplers"]):
            sampler.load_state_dict(s)
        self.rng.bit_generator.state = state["rng"]
        self.traffic.load_state_dict({k: v.numpy() for k, v in state["traffic"].items()})
        self.method.load_extra_state(state["method"])
