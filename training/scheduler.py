"""The asynchronous scheduler, written once for every method (arXiv:2502.20565v3, Sec. IV, Algorithm 1).

Global round t activates device m = the t-th entry of an activation order fixed before training
(round-robin, or drawn from ``activation`` probabilities with the public seed), whose batch
comes from the sampler the run's threat is accounted for (``privzv.training.sampling``: every
device walks the same public epoch permutations, or the server draws a Poisson batch). Then:

server   a server-made release first asks the privacy ledger whether the round's batch fits the
         budget; at a budget stop no device computes anything and the round is not spent, so a
         resumed or extended run meets the same round (the device is asked only when it fits).
device   ``method.device_send`` -> the uplink.
server   checks the uplink (``sampling.refusal``: distinct ids in [0, D), exactly the round's
         batch, exactly the method's tensors, float32 of their shapes) before computing or
         recording anything; a refused uplink gets no reply, the server notes the
         refusal in its transcript and the device undoes its step (``method.device_abort``).
         For a server-made release the server records the release in the privacy ledger before
         any noise is drawn; ``method.server_reply`` -> the downlink.
device   ``method.device_receive``.

A device-made release (VAFL's noisy embedding, ``Method.RELEASED_BY = "device"``) is recorded by
the device before its uplink leaves. The scheduler is the server's part; the device's part runs
on an engine (``privzv.training.engines``): in this process (the default) or over Flower
messages. The scheduler counts the messages' bytes (eq. (23)), records the server's transcript
(in process, the engine's devices share its recorder) and evaluates on the test split.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from privzv.training import accelerator, sampling
from privzv.training.engines.inprocess import InProcessEngine
from privzv.training.messages import SERVER, Traffic
from privzv.training.methods.base import Method
from privzv.training.parties import Device, Server
from privzv.training.transcript import Recorder


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

    ``batch`` records per round (B, or B' under secret subsampling; the Poisson mean under
    ``eavesdropper``); ``seed`` is the public seed (activation order, epoch permutations).
    ``ledger`` (a ``privzv.ledger.PrivacyLedger`` or None) is asked ``would_exceed`` and told
    ``record`` at each release. ``sampler`` defaults to the one ``threat`` is accounted for; any
    other is refused. ``recorder`` collects the transcripts. ``engine`` runs the devices' part
    (default: ``InProcessEngine(devices)``; another engine is given ``devices=[]``).
    """

    def __init__(
        self,
        method: Method,
        devices: Sequence[Device],
        server: Server,
        *,
        batch: int,
        seed: int,
        threat: str = "device",
        activation: Sequence[float] | None = None,
        recorder: Recorder | None = None,
        ledger=None,
        sampler=None,
        engine=None,
    ):
        self.engine = engine if engine is not None else InProcessEngine(devices)
        self.method, self.devices, self.server = method, self.engine.devices, server
        self.records = len(server.labels)
        self.sampler = sampler or sampling.sampler_for(threat, self.records, batch, seed)
        sampling.check_matches(threat, self.sampler)
        self.activation = sampling.Activation(self.engine.count, activation, seed)
        self.recorder = recorder or Recorder([], {}, enabled=False)
        self.ledger = ledger
        self.traffic = Traffic(self.engine.count)
        self.round = 0
        self.limit = 0  # rounds may start ahead up to this one (``run``'s target)
        self.ahead: dict[int, torch.Tensor] = {}  # round -> batch of a round started ahead
        self.refused = 0
        self.stopped: str | None = None
        server.note = self._noter(SERVER)
        self.engine.setup(method, server, self._noter)

    def _noter(self, party: str) -> Callable[[str, dict], None]:
        return lambda kind, fields: self.recorder.local(party, self.round, kind, fields)

    def _budget_allows(self, m: int, ids: torch.Tensor) -> bool:
        """Whether the ledger lets device ``m`` release on batch ``ids`` (nothing recorded)."""
        return self.ledger is None or not self.ledger.would_exceed(m, accelerator.numpy(ids))

    def _record(self, m: int, ids: torch.Tensor) -> None:
        if self.ledger is not None:
            self.ledger.record(m, accelerator.numpy(ids))

    def _serve(self, m: int, up, expected: torch.Tensor):
        """The server's half: check the uplink, record a server-made release, reply.
        Returns the downlink, or "refused" (nothing sent)."""
        reason = sampling.refusal(up, expected, self.records, self.method.uplink_shapes(len(expected)))
        if reason is not None:
            self.server.note(
                "refused",
                {
                    "device": torch.tensor([m]),
                    "reason": torch.tensor(list(reason.encode()), dtype=torch.uint8),
                },
            )
            return "refused"
        if self.method.RELEASED_BY == "server":
            self._record(m, up["ids"])  # refusal() checked that these are the round's batch
        return self.method.server_reply(self.server, up)

    def step(self) -> bool:
        """One asynchronous round. False (and ``stopped`` = "budget") if the ledger refuses it."""
        m = self.activation.device(self.round)
        self.method.round = self.server.round = self.server.table.round = self.round
        # a Poisson draw comes from the server's secret generator: undone at a budget stop
        undo = (
            self.server.noise.state_dict()
            if self.ledger is not None and self.sampler.kind == sampling.POISSON
            else None
        )
        started = self.ahead.pop(self.round, None)  # a round started ahead passed its checks then
        ids = started
        if ids is None:
            ids = self.sampler.draw(self.engine.clock(m), self.server)
            if not self._budget_allows(m, ids):
                return self._stop_for_budget(undo)
            if self.method.RELEASED_BY == "device":
                self._record(m, ids)
        self._start_ahead(m, ids, started is not None)
        up = self.engine.send(m, self.round, ids)
        self.recorder.message(up)
        down = self._serve(m, up, ids)
        if isinstance(down, str):
            self.engine.abort(m)
            self.refused += 1  # the round is spent; the device's step (its batch) is not
            self.round += 1
            return True
        self.recorder.message(down)
        self.engine.deliver(m, down)
        self.traffic.add(self.round, m, up, down)
        self.round += 1
        return True

    def _start_ahead(self, m: int, ids: torch.Tensor, started: bool) -> None:
        """Start the next rounds (``engine.start``) while their devices are idle, up to the
        engine's ``lookahead`` and :attr:`limit`, in round order: their devices compute while this
        one is served, and each round is served in order as in-process. A round starts ahead only
        where its batch is the device's own public walk (not a Poisson draw of the server's
        generator) and the ledger lets it release after every round before it has (so it also
        does at its turn); a device-made release is recorded as it starts, in round order."""
        if not getattr(self.engine, "lookahead", 0) or self.sampler.kind == sampling.POISSON:
            return
        if not started:
            self.engine.start(m, self.round, ids)
        rounds = [(self.round, m, ids), *((t, self.activation.device(t), b) for t, b in self.ahead.items())]
        t = rounds[-1][0] + 1
        while len(self.ahead) < self.engine.lookahead and t < self.limit:
            d = self.activation.device(t)
            if any(d == busy for _, busy, _ in rounds):
                return
            batch = self.sampler.draw(self.engine.clock(d), self.server)
            server_made = (
                [] if self.method.RELEASED_BY == "device" else [(b, n.numpy()) for _, b, n in rounds]
            )
            if self.ledger is not None and self.ledger.would_exceed_after(server_made, d, batch.numpy()):
                return
            if self.method.RELEASED_BY == "device":
                self._record(d, batch)
            self.engine.start(d, t, batch)
            self.ahead[t] = batch
            rounds.append((t, d, batch))
            t += 1

    def finish_started(self) -> None:
        """Serve the rounds already started ahead (a stop signal ends the run after them, so its
        checkpoint meets no round in flight)."""
        self.limit = self.round + len(self.ahead)
        while self.round in self.ahead:
            self.step()

    def _stop_for_budget(self, undo) -> bool:
        if undo is not None:
            self.server.noise.load_state_dict(undo)
        self.stopped = "budget"
        return False

    def run(
        self,
        rounds: int,
        eval_at: Callable[[int], bool],
        on_eval: Callable[[int], None],
        tick: Callable[[], None] = lambda: None,
    ) -> None:
        """Run until global round ``rounds`` (or the budget stops it); ``on_eval`` where due.
        Rounds start ahead only up to the next round where ``eval_at`` holds: an evaluation or a
        checkpoint meets no round in flight (a resume then restarts none)."""
        self.limit = self.round
        while self.round < rounds:
            if self.limit <= self.round:
                self.limit = next((r for r in range(self.round + 1, rounds) if eval_at(r)), rounds)
            if not self.step():
                on_eval(self.round)
                return
            tick()
            if eval_at(self.round):
                on_eval(self.round)

    @contextlib.contextmanager
    def evaluating(self):
        """Every model (devices' and head) in eval mode without gradients; modes restored after."""
        models = self.engine.models() + [self.server.head]
        modes = [mod.training for mod in models]
        for mod in models:
            mod.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            for mod, mode in zip(models, modes):
                mod.train(mode)

    def evaluate(self, x_test: Sequence[torch.Tensor], y_test: torch.Tensor, chunk: int = 2048) -> Evaluation:
        """Accuracy and mean cross-entropy on the test split with the current (fresh) embeddings."""
        correct, loss = 0, 0.0
        with self.evaluating():
            for start in range(0, len(y_test), chunk):
                sl = slice(start, start + chunk)
                logits = self.server.head(self.engine.embeddings(x_test, sl))
                y = y_test[sl].to(logits.device)
                loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
                correct += int((logits.argmax(1) == y).sum())
        n = len(y_test)
        loss = loss / n if math.isfinite(loss) else float("nan")
        return Evaluation(self.round, correct / n, loss, self.traffic.total_up, self.traffic.total_down)

    def state_dict(self) -> dict:
        """Everything needed to continue bit-for-bit (models, optimisers, generators, table), as
        CPU tensors whatever the run's device (a run made on CUDA resumes on a CPU)."""
        t = self.traffic.state_dict()
        return accelerator.to_host(
            {
                "round": self.round,
                "devices": self.engine.state_dict(),
                "server": {
                    "head": self.server.head.state_dict(),
                    "noise": self.server.noise.state_dict(),
                    "table": self.server.table.state_dict(),
                },
                "refused": self.refused,
                "traffic": {k: torch.as_tensor(v) for k, v in t.items()},
                "method": self.method.extra_state(),
            }
        )

    def load_state_dict(self, state: dict) -> None:
        self.round = state["round"]
        self.engine.load_state_dict(state["devices"])
        self.server.head.load_state_dict(state["server"]["head"])
        self.server.noise.load_state_dict(state["server"]["noise"])
        self.server.table.load_state_dict(state["server"]["table"])
        self.refused = state["refused"]
        self.traffic.load_state_dict({k: v.numpy() for k, v in state["traffic"].items()})
        self.method.load_extra_state(state["method"])
