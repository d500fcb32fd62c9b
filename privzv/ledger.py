"""A privacy ledger: every DP release of a run is recorded, and the budget is enforced.

The epsilon spent is the accountant's epsilon for the exposure seen so far, under the run's
threat (:mod:`privzv.threats`):

- ``device``: how many recorded releases, to any device, contained each record (a device's view
  also depends on the other devices' releases, see :mod:`privzv.threats`); the worst record
  gives k, composed without amplification;
- ``secret-subsampling``: the same count over the super-batches (pass the super-batch ids the
  device knows, not the server's secret subsample), amplified with p = B/B';
- ``eavesdropper``: all releases so far, Poisson amplified with q = B/D.

With a pooled DP head (``HeadUpdate.window`` >= 1, threat ``device``) the ledger also counts,
per record, its batches in the open head window (c) and the sum of c^2 over closed windows, and
composes K_i = (1 - w) k_i + w sum c^2 (:mod:`privzv.threats`); the open window counts as if it
were released now, so the budget check before a release covers the head step it may close.

With a sampled DP head (``HeadUpdate.sampling_rate``) every round is also one head step on a
secret Poisson sample of the table: epsilon is that of the worst record's downlink count k (as
above) composed with the T_h head steps so far (T_h = rounds recorded; :mod:`privzv.mixture`).
Epsilon grows in both, so a pair dominated by one already within the budget needs no new
evaluation (the run's planned pair is checked first).

After a run that follows the schedule (epoch-shuffled batches spread evenly over the devices) the
ledger's epsilon equals :func:`privzv.accounting.account` for that schedule. Only rigorous
accountants (``privzv.registry``, ``rigorous``) keep a ledger: a budget is a bound or nothing.

Resume (:meth:`PrivacyLedger.mark`, :meth:`PrivacyLedger.rewind`). A run killed after its last
checkpoint made releases the observer may have seen ("discarded": the resumed run starts from the
checkpoint and makes those rounds again). Every discarded release stays counted; what happens when
the resumed run makes its round again depends on the noise:

- seeded noise (the default keyed streams, reproducible from the secret seed), resumed on the platform that made the discarded releases (software versions and
  CPU kernels, ``privzv.training.run.replay_platform``): the resumed run restores every generator
  from the checkpoint and meets the same batch, so it re-makes each discarded release bit for bit
  (the same deterministic function of the same state and the same noise draw). The observer sees
  one value twice, which tells it nothing the first copy did not (post-processing), so the
  re-made release is not charged again. The ledger checks the replay: a release that is not the
  next discarded one (another device or batch) ends it, and the remaining discarded releases
  stay counted as made;
- secure noise (``--secure-noise``), another platform, or any replay the caller does not declare
  identical (:meth:`PrivacyLedger.rewind`): the re-made release is a fresh draw, a second release
  of the same records, charged again.

A pooled head's windows (``HeadUpdate.window``) close at the head's own step count, which the
resumed head restores from the checkpoint: the ledger keeps the live walk's position (its
releases since the start, not counting discarded ones) and closes windows by it, so its windows
are the head's. A window that closed among discarded releases was a real head step (its c^2 stays
counted); the window open at the kill was never noised nor used by anything released and is
dropped, the checkpoint's open window being reopened where the head reopens it.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from privzv import accounting, checks, registry, threats
from privzv.defaults import ACCOUNTANT
from privzv.errors import PrivzvError
from privzv.release import Release, Schedule
from privzv.threats import Exposure

STATE_VERSION = 1


class BudgetExceeded(PrivzvError):
    """The next release would take the epsilon spent above the budget."""


class PrivacyLedger:
    """Records releases and refuses one that would exceed ``epsilon_budget`` at ``delta``.

    Keyword-only, like the rest of the API: ``PrivacyLedger(release=, schedule=, delta=,
    epsilon_budget=)``; positional arguments are refused (PrivzvError). ``release`` must carry
    its sigma. ``dataset_size`` defaults to the schedule's; devices are
    numbered 0 .. schedule.devices - 1 and batch ids are record indices 0 .. dataset_size - 1.
    """

    def __init__(
        self,
        *positional: object,
        release: Release | None = None,
        schedule: Schedule | None = None,
        delta: float | None = None,
        epsilon_budget: float | None = None,
        accountant: str = ACCOUNTANT,
        dataset_size: int | None = None,
    ):
        if positional:
            raise PrivzvError(
                f"PrivacyLedger: {len(positional)} positional argument(s); its arguments are "
                "keyword-only, as everywhere in privzv's API (release=, schedule=, delta=, "
                "epsilon_budget=)"
            )
        threats.check_objects(release, schedule)  # a missing one is named (None) like a bad one
        assert isinstance(release, Release) and isinstance(schedule, Schedule)
        if dataset_size is not None and dataset_size != schedule.dataset_size:
            schedule = dataclasses.replace(schedule, dataset_size=dataset_size)
        epsilon_budget = checks.number("epsilon_budget", epsilon_budget, lo=0, lo_open=True, allow_inf=True)
        if not registry.get(accountant).rigorous:
            raise PrivzvError(
                f"accountant {accountant!r}: not a rigorous upper bound; a ledger "
                f"takes {', '.join(registry.names(rigorous=True))}"
            )
        cells = schedule.devices * schedule.dataset_size
        if cells > checks.MAX_LEDGER_CELLS:
            raise PrivzvError(
                f"dataset_size={schedule.dataset_size} x devices="
                f"{schedule.devices}: a ledger counts each record per device; "
                f"above the cap {checks.MAX_LEDGER_CELLS:.0e} counts"
            )
        self.delta = checks.number("delta", delta)
        self._full = accounting.checked_exposure(release, schedule, self.delta, accountant)
        self.release, self.schedule = release, schedule
        self.epsilon_budget, self.accountant = epsilon_budget, accountant
        self._counts = np.zeros((schedule.devices, schedule.dataset_size), dtype=np.int64)
        self._worst = 0  # the largest number of recorded releases that contain one record
        self.releases = 0
        self._epsilons: dict[float | tuple[float, int], float] = {}
        self._ok_up_to: float = 0
        self._bad_from: float = math.inf
        self._position = 0  # releases of the live walk: the head's step count (windows close by it)
        self._mark: tuple[int, np.ndarray | None] | None = (
            None  # (position, open window) at the last checkpoint (mark)
        )
        self._since: list[tuple[int, np.ndarray]] = []  # live releases after the mark
        self._pending = 0  # the last _pending of _since: made before a resume, not yet re-made
        self._pooled = threats.pooled(release)
        self._sampled = threats.sampled_head(release)
        self._ok_pairs: list[tuple[float, int]] = []  # sampled head: (k, T_h) within budget
        self._bad_pairs: list[tuple[float, int]] = []  # ... and over it
        if self._pooled:  # per record: batches in the open window, windows, sum of c^2
            d = schedule.dataset_size
            self._window = np.zeros(d, dtype=np.int64)
            self._windows = np.zeros(d, dtype=np.int64)
            self._squares = np.zeros(d, dtype=np.int64)
            self._load = 0.0  # the worst record's K so far

    # ----------------------------------------------------------------- exposure and epsilon
    def _counts_all_releases(self) -> bool:
        """eavesdropper: every release counts."""
        return self.schedule.threat == "eavesdropper"

    def _compositions(self):
        if self._counts_all_releases():
            return self.releases
        return self._load if self._pooled else self._worst

    def _loads(self, ids: np.ndarray, extra: int) -> np.ndarray:
        """K_i of records ``ids`` with ``extra`` more releases of each in the open window."""
        k = self._counts[:, ids].sum(axis=0) + extra
        c = self._window[ids] + extra
        w = self.release.head_weight
        return (1.0 - w) * k + w * (self._squares[ids] + c * c)

    def _epsilon(self, k: float, head_steps: int | None = None) -> float:
        """Epsilon of k compositions (and, with a sampled head, ``head_steps`` head steps; the
        rounds recorded when None) under the ledger's threat and accountant (cached)."""
        steps = (self.releases if head_steps is None else head_steps) if self._sampled else None
        if k == 0 and not steps:
            return 0.0
        key: float | tuple[float, int] = k if steps is None else (k, steps)
        if key not in self._epsilons:
            self._epsilons[key] = accounting.epsilon_for_exposure(
                self.release.noise_multiplier,
                self.release,
                self.schedule,
                Exposure(k, self._full.sampling_rate, steps),
                self.delta,
                self.accountant,
            )[0]
        return self._epsilons[key]

    def _pair_within_budget(self, k: float, steps: int) -> bool:
        """Sampled head: whether (k, T_h) stays within the budget. Epsilon grows in both, so
        pairs known within (over) the budget decide every pair they dominate (are dominated by);
        the planned pair is evaluated first (a run that follows its schedule costs one
        evaluation), then one 1/8 ahead, then the pair itself."""
        if any(k <= a and steps <= b for a, b in self._ok_pairs):
            return True
        if any(k >= a and steps >= b for a, b in self._bad_pairs):
            return False
        plan = (max(k, self._full.compositions), max(steps, self.schedule.steps))
        ahead = (k + -(-k // 8), steps + -(-steps // 8))  # past the plan: 1/8 ahead
        for pair in dict.fromkeys((plan, ahead, (k, steps))):
            if self._epsilon(*pair) <= self.epsilon_budget:
                self._ok_pairs.append(pair)
                return True
            self._bad_pairs.append(pair)
        return False

    def _within_budget(self, k: float, steps: int | None = None) -> bool:
        """Whether k compositions stay within the budget. Epsilon grows with k, so the answer is
        kept as a bracket; an unknown k is checked together with 2k (looked at first), which
        makes the checks over a whole run cost O(log k) epsilon evaluations. With a sampled
        head, ``steps`` (T_h after the release) goes with k (:meth:`_pair_within_budget`)."""
        if self._sampled:
            return self._pair_within_budget(k, self.releases if steps is None else steps)
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
        if not (
            isinstance(device, (int, np.integer))
            and not isinstance(device, bool)
            and 0 <= device < self.schedule.devices
        ):
            raise PrivzvError(f"device={device!r}: must be an integer in [0, {self.schedule.devices})")
        ids = np.asarray(batch_ids)
        poisson = self.schedule.threat == "eavesdropper"  # an empty Poisson batch is a release
        if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or (poisson and ids.size == 0)):
            raise PrivzvError("batch_ids: must be a 1-D array of record indices")
        if ids.size == 0 and not poisson:
            raise PrivzvError(
                "batch_ids: must be non-empty (only a Poisson batch, threat eavesdropper, can be empty)"
            )
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.schedule.dataset_size):
            raise PrivzvError(f"batch_ids: indices must be in [0, {self.schedule.dataset_size})")
        if np.unique(ids).size != ids.size:
            raise PrivzvError(
                "batch_ids: a record appears twice in one batch (the sensitivity "
                "bound assumes each record at most once)"
            )
        return ids

    def _compositions_after(self, device: int, ids: np.ndarray):
        if self._counts_all_releases():
            return self.releases + 1
        if self._pooled:
            return max(self._load, float(self._loads(ids, 1).max())) if ids.size else self._load
        if not ids.size:
            return self._worst
        return max(self._worst, int(self._counts[:, ids].sum(axis=0).max()) + 1)

    def would_exceed(self, device: int, batch_ids) -> bool:
        """Whether recording this release would take epsilon spent above the budget (never for
        the next discarded release of a seeded resume, :meth:`record`)."""
        ids = self._ids(device, batch_ids)
        return not (
            self._replaying(device, ids)
            or self._within_budget(self._compositions_after(device, ids), self.releases + 1)
        )

    _CACHES = ("_epsilons", "_ok_up_to", "_bad_from", "_ok_pairs", "_bad_pairs")  # facts about epsilon

    def would_exceed_after(self, earlier, device: int, batch_ids) -> bool:
        """:meth:`would_exceed` of a release made after the releases ``earlier`` ((device,
        batch ids) pairs, in order) were recorded; nothing is recorded. Epsilon grows with every
        release, so a release that fits after all of them fits after any of them (what a
        scheduler that starts rounds ahead asks)."""
        saved = {k: copy.deepcopy(v) for k, v in vars(self).items() if k not in self._CACHES + ("journal",)}
        try:
            for d, ids in earlier:
                PrivacyLedger.record(self, d, ids)  # the plain ledger's: nothing journaled
            return self.would_exceed(device, batch_ids)
        except BudgetExceeded:
            return True
        finally:
            vars(self).update(saved)

    def record(self, device: int, batch_ids) -> None:
        """Record one release seen by ``device`` (the ids of the records in its batch).

        Raises BudgetExceeded, recording nothing, if it would exceed the budget. The next
        discarded release of a seeded resume (:meth:`rewind`) is not charged again.
        """
        ids = self._ids(device, batch_ids)
        if self._replaying(device, ids):
            self._pending -= 1
            return
        k = self._compositions_after(device, ids)
        if not self._within_budget(k, self.releases + 1):
            raise BudgetExceeded(
                f"epsilon budget {self.epsilon_budget:g}: the next release would spend "
                f"{self._epsilon(k, self.releases + 1):.4g} (delta {self.delta:g}, {self.accountant}, threat "
                f"{self.schedule.threat}); stopping before it"
            )
        self._apply(device, ids)

    def _apply(self, device: int, ids: np.ndarray) -> None:
        """Count a release of the live walk (no budget check)."""
        self._counts[device, ids] += 1
        if ids.size:
            self._worst = max(self._worst, int(self._counts[:, ids].sum(axis=0).max()))
        if self._pooled:
            self._windows[ids] += self._window[ids] == 0
            self._window[ids] += 1
            if ids.size:
                self._load = max(self._load, float(self._loads(ids, 0).max()))
            self._close_window()
        if self._mark is not None:
            self._since.append((int(device), ids))
        self._position += 1
        self.releases += 1

    def _close_window(self) -> None:
        """After the release at ``self._position`` of the live walk: close the head window if it
        ends there (:func:`privzv.threats.window_closes`, the head's own rule)."""
        if self._closes(self._position):
            self._squares += self._window * self._window
            self._window[:] = 0

    def _closes(self, position: int) -> bool:
        per_epoch = -(-self.schedule.dataset_size // self.release.batch_size)
        return threats.window_closes(
            position, self.schedule.devices, per_epoch, self.release.head.window if self.release.head else 1
        )

    # ----------------------------------------------------------------- resume
    def mark(self) -> None:
        """A checkpoint of the run: the live walk's position and open window are kept, and the
        releases from here on are remembered until the next mark (for :meth:`rewind`). In the
        middle of a seeded replay the mark is where the resumed run is; the discarded releases
        it has not re-made yet stay pending."""
        made = len(self._since) - self._pending  # of the releases since the last mark
        window = self._window_after(made)
        self._mark = (self._position - self._pending, window)
        self._since = self._since[made:]

    def rewind(self, replayed: bool) -> int:
        """The run resumes from its last :meth:`mark`: the releases since it are discarded (they
        stay counted, module docstring). ``replayed``: they will be re-made bit for bit (seeded
        noise) and are not charged again when they are; else each re-made one is a fresh release.
        Returns the number discarded. Without a mark, PrivzvError."""
        if self._mark is None:
            raise PrivzvError("ledger: rewind without a checkpoint mark")
        discarded = self._pending = len(self._since)
        if not replayed:
            self._diverge()
        return discarded

    def _replaying(self, device: int, ids: np.ndarray) -> bool:
        """Whether (device, ids) is the next discarded release of a seeded resume; a release
        that is not ends the replay (:meth:`_diverge`)."""
        if not self._pending:
            return False
        d, want = self._since[len(self._since) - self._pending]
        if d == device and np.array_equal(want, ids):
            return True
        self._diverge()
        return False

    def _diverge(self) -> None:
        """The releases still pending are not re-made: they stay counted as made (their downlink
        counts and the windows that closed among them), the live walk goes back to where the
        resumed run is (position and open window, the one open at the kill dropped)."""
        made = len(self._since) - self._pending
        if self._pooled:
            window = self._window_after(made)
            assert window is not None
            self._window = window
            self._load = float(self._loads(np.arange(self.schedule.dataset_size), 0).max(initial=0.0))
        self._position -= self._pending
        self._since, self._pending = self._since[:made], 0

    def _window_after(self, made: int) -> np.ndarray | None:
        """The live walk's open window after the first ``made`` releases since the mark."""
        if not self._pooled:
            return None
        if not self._pending and made == len(self._since):
            return self._window.copy()
        assert self._mark is not None and self._mark[1] is not None
        position, window = self._mark[0], self._mark[1].copy()
        for _, ids in self._since[:made]:
            window[ids] += 1
            if self._closes(position):
                window[:] = 0
            position += 1
        return window

    # ----------------------------------------------------------------- summary
    def mechanisms(self) -> list[dict]:
        """Each Gaussian mechanism of a round, with the releases of it that contain the worst
        record so far (``count``; every release under ``eavesdropper``), its sigma, L2
        sensitivity and noise multiplier: the downlink release, then the DP head update (made
        in the same rounds from the same records) when the release has one."""
        k, release = self.rounds(), self.release
        z_down, z_head = release.split(release.noise_multiplier)
        rows = [
            {
                "mechanism": "downlink",
                "count": 0 if release.withholds else k,
                "sigma": release.sigma,
                "sensitivity": release.sensitivity,
                "noise_multiplier": z_down,
            }
        ]
        if release.head is not None:
            rows.append(
                {
                    "mechanism": "head",
                    "count": self.head_steps(),
                    "sigma": release.head.sigma,
                    "window": release.head.window,
                    "sensitivity": release.head.sensitivity,
                    "noise_multiplier": z_head,
                    **({"sampling_rate": release.head.sampling_rate} if self._sampled else {}),
                }
            )
        return rows

    def rounds(self) -> int:
        """Downlink releases that contain the worst record (all releases under eavesdropper)."""
        return self.releases if self._counts_all_releases() else self._worst

    def head_steps(self) -> int:
        """DP head steps that contain the worst record: its rounds, or with a pooled head its
        windows (the open one included), or with a sampled head every round (each may sample
        it)."""
        if self._sampled:
            return self.releases
        if self._pooled and not self._counts_all_releases():
            return int(self._windows.max(initial=0))
        return self.rounds()

    def summary(self) -> dict:
        """epsilon spent, the budget and each mechanism (:meth:`mechanisms`), JSON-ready."""
        return {
            "epsilon_spent": self.epsilon_spent(),
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "accountant": self.accountant,
            "threat": self.schedule.threat,
            "protects": self.release.protects,
            "releases": self.releases,
            "compositions": self._compositions(),
            "noise_multiplier": self.release.noise_multiplier,
            "mechanisms": self.mechanisms(),
        }

    # ----------------------------------------------------------------- persistence
    def state_dict(self) -> dict:
        """JSON-serialisable state; :meth:`from_state_dict` restores it exactly, but for the
        resume bookkeeping (:meth:`mark`, :meth:`rewind`), which a run folder rebuilds from its
        journal. ``mechanisms`` is informative (:meth:`mechanisms`); restoring recomputes it."""
        return {
            "version": STATE_VERSION,
            "release": dataclasses.asdict(self.release),
            "schedule": dataclasses.asdict(self.schedule),
            "delta": self.delta,
            "epsilon_budget": self.epsilon_budget,
            "accountant": self.accountant,
            "releases": self.releases,
            "counts": self._counts.tolist(),
            "mechanisms": self.mechanisms(),
            **(
                {
                    "window_counts": self._window.tolist(),
                    "windows": self._windows.tolist(),
                    "window_squares": self._squares.tolist(),
                    "head_position": self._position,
                }
                if self._pooled
                else {}
            ),
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> PrivacyLedger:
        """The ledger of :meth:`state_dict`; PrivzvError (never another exception) for a state
        that is not one: wrong version, missing or misshapen fields, negative counts, or more
        releases of one record than releases in total."""
        if not isinstance(state, dict):
            raise PrivzvError(f"ledger state: must be a JSON object, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise PrivzvError(f"ledger state version {state.get('version')!r}: expected {STATE_VERSION}")
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise PrivzvError(f"ledger state: missing {', '.join(missing)}")
        try:
            release = Release(**state["release"])
            schedule = Schedule(**state["schedule"])
        except TypeError as exc:
            raise PrivzvError(f"ledger state release/schedule: {exc}") from None
        ledger = cls(
            release=release,
            schedule=schedule,
            delta=state["delta"],
            epsilon_budget=state["epsilon_budget"],
            accountant=state["accountant"],
        )
        releases = state["releases"]
        if not (isinstance(releases, int) and not isinstance(releases, bool) and releases >= 0):
            raise PrivzvError(f"ledger state releases={releases!r}: must be an integer >= 0")
        counts = _counts(state["counts"], ledger._counts.shape)
        worst = int(counts.sum(axis=0).max())
        if worst > releases:
            raise PrivzvError(f"ledger state: a record is in {worst} releases, more than releases={releases}")
        ledger._counts, ledger._worst, ledger.releases = counts, worst, releases
        ledger._position = releases
        if ledger._pooled:
            shape = (1, schedule.dataset_size)
            for key, name in (
                ("window_counts", "_window"),
                ("windows", "_windows"),
                ("window_squares", "_squares"),
            ):
                if key not in state:
                    raise PrivzvError(f"ledger state: missing {key} (a pooled DP head)")
                setattr(ledger, name, _counts([state[key]], shape)[0])
            if (ledger._windows > counts.sum(axis=0)).any() or (ledger._window > counts.sum(axis=0)).any():
                raise PrivzvError("ledger state: a record is in more head windows than releases")
            position = state.get("head_position", releases)  # (before resumes were replayed)
            if not (
                isinstance(position, int) and not isinstance(position, bool) and 0 <= position <= releases
            ):
                raise PrivzvError(
                    f"ledger state head_position={position!r}: must be an integer in [0, releases]"
                )
            ledger._position = position
            every = np.arange(schedule.dataset_size)
            ledger._load = float(ledger._loads(every, 0).max(initial=0.0))
        return ledger


_STATE_KEYS = ("release", "schedule", "delta", "epsilon_budget", "accountant", "releases", "counts")


def _counts(value, shape: tuple[int, int]) -> np.ndarray:
    """A (devices, records) array of non-negative integers from JSON, else PrivzvError."""
    message = f"ledger state counts: expected {shape[0]} lists of {shape[1]} non-negative integers"
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise PrivzvError(message)
    if not all(isinstance(v, int) and not isinstance(v, bool) for row in value for v in row):
        raise PrivzvError(message)
    try:
        counts = np.asarray(value, dtype=np.int64)
    except (ValueError, OverflowError):
        raise PrivzvError(message) from None
    if counts.shape != shape or (counts < 0).any():
        raise PrivzvError(message)
    return counts
