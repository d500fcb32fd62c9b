"""Batches and activation exactly as the accountant assumes them (privzv.threats), and the uplink check.

Activation: the device of every global round is fixed before training, from the public seed:
round-robin (t mod M) by default, or, with ``activation`` probabilities, one draw per round from
a generator seeded by the public seed. So the per-device step counts n_m of the first T rounds
are known before training and calibration uses them (``Schedule.device_steps``).

Batches, by threat (what :mod:`privzv.threats` counts):

- ``device`` and ``secret-subsampling``: :class:`SharedWalk`. Every device walks the SAME epoch
  permutations of the D records, permutation e drawn from the public seed; a device's j-th round
  uses the j-th batch of that walk (b records, b = B, or B' for a super-batch; the last batch of
  an epoch smaller). The worst record is then in exactly sum_m ceil(n_m / ceil(D / b)) rounds.
  The batch is a function of (j, public seed), so the server knows it without being told.
- ``eavesdropper``: :class:`PoissonSampler`. The server draws each record with probability
  q = B/D (in fact floor(q 2^64) / 2^64 <= q) from its own secret stream
  (``server.noise.stream("sampling").bernoulli``) and tells the active device which ids to embed; the batch size varies (possibly 0: the round still releases noise), the
  divisor stays B. This is the sampled Gaussian that the Poisson accountants assume.

:func:`refusal` is the server's check of an uplink before it computes anything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from privzv.errors import PrivzvError
from privzv.training import seeds

SHARED_WALK, POISSON = "shared epoch walk", "Poisson"
# the sampling each threat's accounting assumes (privzv.threats)
ASSUMED = {"device": SHARED_WALK, "secret-subsampling": SHARED_WALK, "eavesdropper": POISSON}


class Activation:
    """The device of global round t: round-robin, or drawn once per round with ``probs`` from the
    public ``seed`` (prefix-stable: the first T rounds do not depend on how many are drawn)."""

    def __init__(self, devices: int, probs: Sequence[float] | None = None, seed: int = 0):
        self.devices = devices
        self.cdf = None if probs is None else np.cumsum(np.asarray(probs, float))
        self.rng = np.random.default_rng(seeds.derive(seed, "activation"))
        self.drawn = np.zeros(0, dtype=np.int64)

    def _extend(self, rounds: int) -> None:
        if self.cdf is not None and len(self.drawn) < rounds:
            more = max(rounds - len(self.drawn), 1024)
            u = self.rng.random(more) * self.cdf[-1]
            picks = np.minimum(np.searchsorted(self.cdf, u, side="right"), self.devices - 1)
            self.drawn = np.concatenate([self.drawn, picks])

    def order(self, rounds: int) -> np.ndarray:
        """The active device of rounds 0 .. rounds-1."""
        if self.cdf is None:
            return np.arange(rounds) % self.devices
        self._extend(rounds)
        return self.drawn[:rounds]

    def device(self, t: int) -> int:
        return int(self.order(t + 1)[t])

    def steps(self, rounds: int) -> tuple[int, ...]:
        """n_m: rounds of each device among the first ``rounds`` (``Schedule.device_steps``)."""
        return tuple(int(c) for c in np.bincount(self.order(rounds), minlength=self.devices))


class SharedWalk:
    """Batch j of every device: the j-th batch of b records of one walk through epoch
    permutations of the D records, permutation e seeded by (public ``seed``, e).

    The permutations of the epochs the devices are in are kept (one per epoch, shared; an epoch
    no device is in is dropped), so a device draws each epoch's permutation at most once and a
    round costs O(b) amortised whatever D, also when the devices' steps drift apart (skewed
    activation), where keeping a single epoch would draw a D-size permutation nearly every round.
    """

    kind = SHARED_WALK

    def __init__(self, records: int, batch: int, seed: int):
        self.records, self.batch, self.seed = records, batch, seed
        self.per_epoch = -(-records // batch)
        self._perms: dict[int, torch.Tensor] = {}  # epoch -> its permutation
        self._epochs: dict[object, int] = {}  # walker (a device index) -> its epoch

    def permutation(self, epoch: int) -> torch.Tensor:
        perm = self._perms.get(epoch)
        if perm is None:
            gen = seeds.generator(self.seed, "permutation", epoch)
            perm = self._perms[epoch] = torch.randperm(self.records, generator=gen)
        return perm

    def batch_of(self, step: int, walker: object = None) -> torch.Tensor:
        """The ids of step ``step`` of the walk, for ``walker`` (whose earlier epochs are done)."""
        epoch, pos = divmod(step, self.per_epoch)
        perm = self.permutation(epoch)
        if self._epochs.get(walker) != epoch:
            self._epochs[walker] = epoch
            in_use = set(self._epochs.values())
            for done in [e for e in self._perms if e not in in_use]:
                del self._perms[done]
        return perm[pos * self.batch : (pos + 1) * self.batch].clone()

    def draw(self, device, server) -> torch.Tensor:
        """The ids of ``device``'s current step (known to the device and to the server)."""
        return self.batch_of(device.step, device.index)


class PoissonSampler:
    """Each record in the round's batch with probability ``batch / records``, drawn by the server
    from its secret generator; the ids go to the active device (and to no one else)."""

    kind = POISSON

    def __init__(self, records: int, batch: int):
        self.records, self.rate = records, batch / records

    def draw(self, device, server) -> torch.Tensor:
        return torch.nonzero(server.noise.stream("sampling").bernoulli(self.records, self.rate)).reshape(-1)


def sampler_for(threat: str, records: int, batch: int, seed: int):
    """The sampler that threat ``threat``'s accounting assumes (``ASSUMED``)."""
    if ASSUMED[threat] == POISSON:
        return PoissonSampler(records, batch)
    return SharedWalk(records, batch, seed)


def check_matches(threat: str, sampler) -> None:
    """Refuse a sampler other than the one the threat's accountant assumes."""
    if getattr(sampler, "kind", None) != ASSUMED[threat]:
        raise PrivzvError(
            f"sampler {type(sampler).__name__}: threat {threat!r} is accounted for "
            f"{ASSUMED[threat]} batches; a run must sample that way"
        )


def malformed(up, records: int) -> str | None:
    """Why uplink ``up`` cannot be a batch at all (None: it can): ``ids`` must be a 1-D integer
    tensor of distinct record indices in [0, records), and every other tensor must have one row
    per id. A repeated id would multiply a record's weight in the release beyond the sensitivity
    it was calibrated for."""
    ids = up.tensors.get("ids")
    if ids is None or ids.ndim != 1 or ids.dtype not in (torch.int64, torch.int32):
        return "ids missing or not a 1-D integer tensor"
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= records):
        return f"ids outside [0, {records})"
    if len(torch.unique(ids)) != len(ids):
        return "repeated ids"
    if any(t.ndim == 0 or t.shape[0] != len(ids) for k, t in up.tensors.items() if k != "ids"):
        return "a tensor without one row per id"
    return None


def refusal(up, expected: torch.Tensor, records: int, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """Why the server refuses uplink ``up`` (None: it is the batch the server expects).

    Checked before anything is computed or recorded from it: :func:`malformed`, then ``ids``
    equal to ``expected`` (the round's batch, which the server knows from the walk or its own
    Poisson draw), then exactly the tensors of ``shapes`` (the method's ``uplink_shapes``), each
    float32 of its shape (a wrong embedding width would crash the server after the ledger
    recorded the round).
    """
    reason = malformed(up, records)
    if reason is not None:
        return reason
    ids = up.tensors["ids"]
    if len(ids) != len(expected):
        return f"{len(ids)} ids, expected {len(expected)}"
    if not torch.equal(ids, expected):
        return "ids differ from the round's batch"
    names = sorted(k for k in up.tensors if k != "ids")
    if names != sorted(shapes):
        return f"tensors {', '.join(names)}; expected {', '.join(sorted(shapes))}"
    for name in names:
        t = up.tensors[name]
        if t.dtype != torch.float32 or tuple(t.shape) != shapes[name]:
            return (
                f"{name}: {str(t.dtype).removeprefix('torch.')} {list(t.shape)}, expected "
                f"float32 {list(shapes[name])}"
            )
    return None
