"""A privacy ledger: every DP release of a run is recorded, and the budget is enforced.

The epsilon spent is the accountant's epsilon for the exposure seen so far, under the run's
threat (:mod:`privzv.threats`):

- ``device``: how many recorded releases, to any device, contained each record (a device's view
  also depends on the other devices' releases, see :mod:`privzv.threats`); the worst record
  gives k, composed without amplification;
- ``secret-subsampling``: the same count over the super-batches (pass the super-batch ids the
  device knows, not the server's secret subsample), amplified with p = B/B';
- ``eavesdropper``: all releases so far, Poisson amplified with q = B/D.

After a run that follows the schedule (epoch-shuffled batches spread evenly over the devices) the
ledger's epsilon equals :func:`privzv.accounting.account` for that schedule.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from privzv import accounting
from privzv.errors import PrivzvError
from privzv.release import Release, Schedule
from privzv.threats import Exposure

STATE_VERSION = 1


class BudgetExceeded(PrivzvError):
    """The next release would take the epsilon spent above the budget."""


class PrivacyLedger:
    """Records releases and refuses one that would exceed ``epsilon_budget`` at ``delta``.

    ``release`` must carry its sigma. ``dataset_size`` defaults to the schedule's; devices are
    numbered 0 .. schedule.devices - 1 and batch ids are record indices 0 .. dataset_size - 1.
    """

    def __init__(self, release: Release, schedule: Schedule, delta: float, epsilon_budget: float,
                 accountant: str = "pld", dataset_size: int | None = None):
        if dataset_size is not None and dataset_size != schedule.dataset_size:
            schedule = dataclasses.replace(schedule, dataset_size=dataset_size)
        if not (isinstance(epsilon_budget, (int, float)) and epsilon_budget > 0
                and not math.isnan(epsilon_budget)):
            raise PrivzvError(f"epsilon_budget={epsilon_budget!r}: must be a number > 0")
        self._full = accounting.checked_exposure(release, schedule, delta, accountant)
        self.release, self.schedule = release, schedule
        self.delta, self.epsilon_budget, self.accountant = delta, float(epsilon_budget), accountant
        self._counts = np.zeros((schedule.devices, schedule.dataset_size), dtype=np.int64)
        self._worst = 0  # the largest number of recorded releases that contain one record
        self.releases = 0
        self._epsilons: dict[int, float] = {}
        self._ok_up_to, self._bad_from = 0, math.inf

    # ----------------------------------------------------------------- exposure and epsilon
    def _counts_all_releases(self) -> bool:
        """eavesdropper: every release counts; seed: its formula only sees T (releases so far)."""
        return self.schedule.threat == "eavesdropper" or self.accountant == "seed"

    def _compositions(self) -> int:
        if self._counts_all_releases():
            return self.releases
        return self._worst

    def _epsilon(self, k: int) -> float:
        """Epsilon of k compositions under the ledger's threat and accountant (cached)."""
        if k == 0:
            return 0.0
        if k not in self._epsilons:
            schedule = self.schedule
            if self.accountant == "seed":
                schedule = dataclasses.replace(schedule, steps=k)
            self._epsilons[k] = accounting.epsilon_for_exposure(
                self.release.noise_multiplier, self.release, schedule,
                Exposure(k, self._full.sampling_rate), self.delta, self.accountant)[0]
        return self._epsilons[k]

    def _within_budget(self, k: int) -> bool:
        """Whether k compositions stay within the budget. Epsilon grows with k, so the answer is
        kept as a bracket; an unknown k is checked together with 2k (looked at first), which
        makes the checks over a whole run cost O(log k) epsilon evaluations."""
        if k <= self._ok_up_to:
            return True
        if k >= self._bad_from:
            return False
        ahead = min(2 * k, self._bad_from - 1)
        for probe in (ahead, k) if ahead > k else (k,):
            if self._epsilon(probe) <= self.epsilon_budget:
                self._ok_up_to = max(self._ok_up_to, probe)
                return True
            self._bad_from = min(self._bad_from, probe)
        return False

    def compositions(self) -> int:
        """Releases composed for the worst record so far (k; all releases under eavesdropper)."""
        return self._compositions()

    def epsilon_spent(self) -> float:
        """Epsilon at ``delta`` of the releases recorded so far (0 before the first)."""
        return self._epsilon(self._compositions())

    # ----------------------------------------------------------------- recording
    def _ids(self, device: int, batch_ids) -> np.ndarray:
        if not (isinstance(device, (int, np.integer)) and 0 <= device < self.schedule.devices):
            raise PrivzvError(f"device={device!r}: must be an integer in "
                              f"[0, {self.schedule.devices})")
        ids = np.asarray(batch_ids)
        poisson = self.schedule.threat == "eavesdropper"   # an empty Poisson batch is a release
        if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or (poisson and ids.size == 0)):
            raise PrivzvError("batch_ids: must be a 1-D array of record indices")
        if ids.size == 0 and not poisson:
            raise PrivzvError("batch_ids: must be non-empty (only a Poisson batch, threat "
                              "eavesdropper, can be empty)")
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.schedule.dataset_size):
            raise PrivzvError(f"batch_ids: indices must be in [0, {self.schedule.dataset_size})")
        if np.unique(ids).size != ids.size:
            raise PrivzvError("batch_ids: a record appears twice in one batch (the sensitivity "
                              "bound assumes each record at most once)")
        return ids

    def _compositions_after(self, device: int, ids: np.ndarray) -> int:
        if self._counts_all_releases():
            return self.releases + 1
        if not ids.size:
            return self._worst
        return max(self._worst, int(self._counts[:, ids].sum(axis=0).max()) + 1)

    def would_exceed(self, device: int, batch_ids) -> bool:
        """Whether recording this release would take epsilon spent above the budget."""
        return not self._within_budget(self._compositions_after(device, self._ids(device,
                                                                                   batch_ids)))

    def record(self, device: int, batch_ids) -> None:
        """Record one release seen by ``device`` (the ids of the records in its batch).

        Raises BudgetExceeded, recording nothing, if it would exceed the budget.
        """
        ids = self._ids(device, batch_ids)
        k = self._compositions_after(device, ids)
        if not self._within_budget(k):
            raise BudgetExceeded(
                f"epsilon budget {self.epsilon_budget:g}: the next release would spend "
                f"{self._epsilon(k):.4g} (delta {self.delta:g}, {self.accountant}, threat "
                f"{self.schedule.threat}); stopping before it")
        self._counts[device, ids] += 1
        if ids.size:
            self._worst = max(self._worst, int(self._counts[:, ids].sum(axis=0).max()))
        self.releases += 1

    # ----------------------------------------------------------------- persistence
    def state_dict(self) -> dict:
        """JSON-serialisable state; :meth:`from_state_dict` restores it exactly."""
        return {
            "version": STATE_VERSION,
            "release": dataclasses.asdict(self.release),
            "schedule": dataclasses.asdict(self.schedule),
            "delta": self.delta,
            "epsilon_budget": self.epsilon_budget,
            "accountant": self.accountant,
            "releases": self.releases,
            "counts": self._counts.tolist(),
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "PrivacyLedger":
        if state.get("version") != STATE_VERSION:
            raise PrivzvError(f"ledger state version {state.get('version')!r}: expected "
                              f"{STATE_VERSION}")
        ledger = cls(Release(**state["release"]), Schedule(**state["schedule"]), state["delta"],
                     state["epsilon_budget"], state["accountant"])
        counts = np.asarray(state["counts"], dtype=np.int64)
        if counts.shape != ledger._counts.shape or (counts < 0).any():
            raise PrivzvError(f"ledger state counts: expected shape {ledger._counts.shape} of "
                              "non-negative integers")
        ledger._counts = counts
        ledger._worst = int(counts.sum(axis=0).max())
        ledger.releases = int(state["releases"])
        return ledger
