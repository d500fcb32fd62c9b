"""A training run's folder: every file name, the format version, the secrets boundary, crash safety.

Layout (``FORMAT`` 3; a folder of another format is refused, :func:`check_format`). Public (what
a party, an attack or a reader of the results may see):

``config.json``     ``format``, ``run_id``, the config (no secret seed), ``seed``, ``sigma``,
                    ``rounds``, ``release``, ``calibration``, ``versions``, ``extensions``
``metrics.jsonl``   one JSON object per evaluation (``bytes_up`` null where sizes are secret)
``checkpoint.pt``   what every party may see of ``Scheduler.state_dict()`` (the round, the head
                    and its optimiser, both outputs of DP mechanisms in a private run) and what
                    resume cross-checks
``traffic.npz``     bytes per round, where batch sizes are public (not under ``eavesdropper``)
``summary.json`` (written last: the run finished), plots
``transcripts/``    every party's transcript, appended as the rounds go (``privzv.training.transcript``)

Private (``private/``, mode 0700, files 0600; never read by an attack, see :func:`public_config`):

``private/secrets.json``        ``secret_seed`` (from OS entropy, or given for a study), its source,
                                and the data's digest (``data.digest``: a resume must load the same)
``private/ledger.journal``      private runs: one JSON line per release (its batch ids), appended and
                                fsync'd before the release leaves the server, plus checkpoint and
                                resume markers
``private/ledger.json``         private runs: ``PrivacyLedger.state_dict()`` (per-record counts) at
                                the last checkpoint
``private/traffic.npz``         under ``eavesdropper``: bytes per round (the Poisson batch sizes)
``private/PARTY/checkpoint-ID.pt``  PARTY's part of the scheduler state (:func:`secret_state`: the
                                server's noise generator, embedding table and traffic log; each
                                device's model, step, noise generator and optimiser state), of the
                                checkpoint named ID; a party's own state is read as that party
                                only (:func:`party_state`)
``private/transcripts/``        the secret entries of the transcripts (:func:`secret_entries`: the
                                server's keep decisions; under ``eavesdropper`` the batches, the
                                uplinks and refusals), appended likewise

Every file is replaced atomically (temp file in the same folder, fsync, rename, fsync of the
folder). A new run is built in a hidden ``.NAME.new-XXXX`` folder and renamed into place after its
round-0 checkpoint, so ``--out`` either does not exist or holds a resumable run; a lock file
``.NAME.lock`` beside it keeps a second process out while the run is open (removed when it
closes, :class:`FolderLock`). A kill at any point leaves a run that
``--resume`` continues from its last checkpoint; releases journaled after that checkpoint stay
counted, and the resumed run's re-made ones are charged again unless seeded noise re-makes them
bit for bit on the platform that made them (``privzv.ledger``, "Resume"; the journal's header
and resume markers record the platform, the markers whether the replay counts once).
Transcripts are appended, not replaced: each checkpoint fsyncs them and records their sizes; a
resume cuts them back to those sizes.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import json
import math
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from privzv.cliutil import read_json
from privzv.errors import PrivzvError
from privzv.ledger import PrivacyLedger
from privzv.training import sampling, stopping
from privzv.training.messages import SERVER, device_name

# 2: transcripts streamed (PARTY.jsonl + PARTY.bin), the checkpoint holds their sizes, the DP
# head's window and its pooled sum. Format 1 folders (transcripts written whole as PARTY.json +
# PARTY.npz; configs without the fields added since, whose defaults changed) are refused, not
# read: a layout change or a new config field with another default bumps FORMAT.
# 3: the ledger, the embedding table and every device's state moved to private/, per party;
# transcripts' secret entries depend on the threat.
FORMAT = 3
CONFIG, METRICS, SUMMARY = "config.json", "metrics.jsonl", "summary.json"
LEDGER, JOURNAL = "ledger.json", "ledger.journal"
CHECKPOINT, TRAFFIC, TRANSCRIPTS = "checkpoint.pt", "traffic.npz", "transcripts"
PRIVATE, SECRETS = "private", "secrets.json"

# Paths into Scheduler.state_dict() that only the private area holds, with their owner: the
# server, or "device" (the device whose index the "*" matched: a list index or a dict key).
# A new secret of the scheduler (e.g. a sampler the server keeps) is one more path here; a
# method's own secrets are its ``Method.SECRET_STATE`` (under "method": :func:`secret_state`).
SECRET_STATE = (
    (("server", "noise"), SERVER),
    # h~[m, i]: every device's latest raw embedding of every record (non-DP)
    (("server", "table"), SERVER),
    # bytes per round: under eavesdropper the Poisson batch sizes
    (("traffic",), SERVER),
    # a device's model (first-order updates are non-DP functions of its features),
    # step and noise generator
    (("devices", "*"), "device"),
)
ANY = "*"  # a kind in secret_entries: every kind of that party and direction


def secret_entries(threat: str, parties) -> set:
    """Transcript entries that are their party's secret (its sampling decisions), as (party,
    direction, kind): saved in private/transcripts/ with their position, the rest in transcripts/.

    Always the server's keep decisions (``secret-subsampling``). Under ``eavesdropper`` the batch
    is the server's Poisson draw, known to the active device only: every device's ``batch`` note
    and uplink (its ids, and embeddings whose rows count |S|), the server's received uplinks and
    its refusal notes (which quote sizes). Downlinks stay public: under ``eavesdropper`` a release
    is a batch mean of fixed size (``privzv.threats.check``)."""
    entries = {(SERVER, "local", "keep")}
    if sampling.ASSUMED[threat] == sampling.POISSON:
        entries |= {(SERVER, "received", ANY), (SERVER, "local", "refused")}
        entries |= {(p, d, k) for p in parties if p != SERVER for d, k in (("sent", ANY), ("local", "batch"))}
    return entries


def sizes_secret(threat: str) -> bool:
    """Whether a round's batch size is a secret (Poisson), so bytes up per round are too."""
    return sampling.ASSUMED[threat] == sampling.POISSON


# --------------------------------------------------------------------------- atomic files
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable, *, private: bool = False) -> None:
    """Replace ``path`` atomically: ``write(fh)`` into a temp file beside it, fsync, rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600 if private else 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:  # e.g. a full disk: name the file, not its temp file
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _dumps(obj, what: str, **kw) -> str:
    """Strict JSON; a NaN or infinity (a diverged run) is a one-line error, not a bad file."""
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:
        raise PrivzvError(
            f"{what}: a value is NaN or infinite (did the run diverge?); the run "
            "folder keeps its last checkpoint"
        ) from None


def _write_json(path: Path, obj, *, private: bool = False) -> None:
    text = _dumps(obj, path.name, indent=1)
    atomic_write(path, lambda fh: fh.write(text.encode()), private=private)


def _torch_save(path: Path, obj, *, private: bool = False) -> str:
    """Save ``obj`` atomically; returns the SHA-256 of the bytes written (for the manifest)."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    atomic_write(path, lambda fh: fh.write(data), private=private)
    return hashlib.sha256(data).hexdigest()


def _torch_load(path: Path, what: str, sha256: str | None = None):
    """The object saved in ``path`` (weights only); with ``sha256``, its bytes must have it."""
    import torch

    if not path.is_file():
        raise PrivzvError(f"{what}: missing")
    data = path.read_bytes()
    _expect(
        sha256 is None or hashlib.sha256(data).hexdigest() == sha256,
        f"{what}: differs from the digest its checkpoint kept in {PRIVATE}/ (edited or corrupt)",
    )
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # a truncated or foreign file: torch raises many kinds
        raise PrivzvError(f"{what}: corrupt ({type(exc).__name__})") from None


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise PrivzvError(message)


def _count(value) -> bool:
    """An integer >= 0 as a run file may hold it (a JSON bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_id(value) -> bool:
    """A checkpoint id as :meth:`RunFolder.save_checkpoint` makes it."""
    return isinstance(value, str) and re.fullmatch(r"\d{10}-[0-9a-f]{8}", value) is not None


def _check_fields(obj, checks: dict, what: str) -> None:
    """Each field of ``checks`` is in the dict ``obj`` and passes its check; else one line
    naming ``what`` and the field."""
    _expect(isinstance(obj, dict), f"{what}: corrupt (not an object)")
    for name, ok in checks.items():
        _expect(ok(obj.get(name)), f"{what}: corrupt ({name} {_short(obj.get(name))})")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_format(saved, where: str) -> None:
    """Refuse a config.json (``saved``) of a run folder format other than ``FORMAT``."""
    found = saved.get("format") if isinstance(saved, dict) else None
    old = " (format 1: written by privzv before transcripts were streamed; re-run it)" if found == 1 else ""
    _expect(
        found == FORMAT, f"{where}: run folder format {found!r}; this privzv reads format {FORMAT} only{old}"
    )


# --------------------------------------------------------------------------- secret state
def secret_state() -> tuple:
    """``SECRET_STATE`` and every registered method's ``SECRET_STATE`` under ``"method"``."""
    from privzv.training import methods

    declared = [
        (("method", *path), owner)
        for name in methods.METHODS
        for path, owner in methods.get(name).SECRET_STATE
    ]
    return SECRET_STATE + tuple(dict.fromkeys(declared))


def split_state(state: dict) -> tuple[dict, dict]:
    """(public, secret) parts of a scheduler state: each :func:`secret_state` path goes to its
    owner's list of (path, value) in ``secret`` = {party: [...]} (a list item leaves None behind);
    :func:`merge_state` puts them back."""
    public = _copy_containers(state)
    secret: dict[str, list] = {}
    for path, owner in secret_state():
        for keys, parent in _parents(public, path[:-1], ()):
            for key in _keys(parent, path[-1]):
                party = owner if owner != "device" else device_name(int((keys + (key,))[path.index(ANY)]))
                if isinstance(parent, list):
                    value, parent[key] = parent[key], None
                else:
                    value = parent.pop(key)
                secret.setdefault(party, []).append((keys + (key,), value))
    return public, secret


def _keys(parent, last) -> list:
    """The keys of ``parent`` that ``last`` names (``ANY``: all of them)."""
    if last != ANY:
        return [last] if isinstance(parent, dict) and last in parent else []
    if isinstance(parent, dict):
        return list(parent)
    return list(range(len(parent))) if isinstance(parent, list) else []


def merge_state(public: dict, secret: dict) -> dict:
    """The whole scheduler state again from :func:`split_state`'s two parts (or from some
    parties' parts only: :func:`party_state`)."""
    state = _copy_containers(public)
    for entries in secret.values():
        for keys, value in entries:
            node = state
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = value
    return state


def _copy_containers(tree):
    """A copy of the dicts and lists of ``tree`` (its leaves, tensors, shared)."""
    if isinstance(tree, dict):
        return {k: _copy_containers(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_copy_containers(v) for v in tree]
    return tree


def _parents(tree, path: tuple, keys: tuple) -> Iterator[tuple[tuple, dict]]:
    if not path:
        yield keys, tree
        return
    head, rest = path[0], path[1:]
    if head == ANY:
        items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    else:  # a path that this state does not have is skipped
        items = [(head, tree[head])] if isinstance(tree, dict) and head in tree else []
    for k, child in items:
        yield from _parents(child, rest, keys + (k,))


# --------------------------------------------------------------------------- the ledger journal
def _ledger_json(state: dict) -> dict:
    """A ledger state as strict JSON values (an infinite budget, a sigma-only run, becomes null;
    tuples become lists, as after a round trip through a file)."""
    budget = state["epsilon_budget"] if math.isfinite(state["epsilon_budget"]) else None
    return json.loads(json.dumps({**state, "epsilon_budget": budget}, allow_nan=False))


# The journal's lines after its header, by the key that names each kind: the checks of its fields.
JOURNAL_LINES = {
    "ids": {"device": _count, "ids": lambda v: isinstance(v, list)},
    "checkpoint": {"checkpoint": _is_id, "round": _count, "releases": _count},
    "resume": {
        "resume": _is_id,
        "round": _count,
        "discarded": _count,
        "replayed": lambda v: isinstance(v, bool),
        "platform": lambda v: v is None or isinstance(v, dict),
    },
}


def _journal_kind(line, number: int) -> str:
    """The kind of journal line ``number`` (``JOURNAL_LINES``), its fields checked."""
    kinds = [k for k in JOURNAL_LINES if isinstance(line, dict) and k in line]
    _expect(len(kinds) == 1, f"{JOURNAL}: line {number} corrupt (not a release, checkpoint or resume line)")
    _check_fields(line, JOURNAL_LINES[kinds[0]], f"{JOURNAL}: line {number}")
    return kinds[0]


class JournaledLedger(PrivacyLedger):
    """A PrivacyLedger that appends each release to an fsync'd journal before ``record`` returns,
    so the release it counts leaves the server only once it is on disk."""

    journal = None  # an open binary file (set by RunFolder)

    def record(self, device: int, batch_ids) -> None:
        super().record(device, batch_ids)
        if self.journal is not None:
            self._append({"device": int(device), "ids": np.asarray(batch_ids).tolist()})

    def _append(self, line: dict) -> None:
        self.journal.write((_dumps(line, JOURNAL) + "\n").encode())
        self.journal.flush()
        os.fsync(self.journal.fileno())

    def params(self) -> dict:
        """What defines the ledger (everything but the counts), as strict JSON."""
        state = _ledger_json(self.state_dict())
        return {k: v for k, v in state.items() if k not in ("counts", "releases")}

    @classmethod
    def from_params(cls, params: dict) -> JournaledLedger:
        s = params["schedule"]
        budget = params["epsilon_budget"]
        return cls.from_state_dict(
            {
                **params,
                "epsilon_budget": math.inf if budget is None else budget,
                "releases": 0,
                "counts": [[0] * s["dataset_size"] for _ in range(s["devices"])],
            }
        )


# --------------------------------------------------------------------------- the folder
def _check_new_target(final: Path, out, overwrite: bool) -> None:
    """``--out`` must not exist, be an empty folder, or (with ``overwrite``) hold a run folder."""
    if final.exists() and not final.is_dir():
        raise PrivzvError(f"--out {str(out)!r}: is a file, not a folder")
    if final.is_dir() and any(final.iterdir()):
        if not (final / CONFIG).is_file():
            raise PrivzvError(f"--out {str(out)!r}: folder exists and is not empty (choose a new one)")
        if not overwrite:
            diverged = _diverged_at(final)
            raise PrivzvError(
                f"--out {str(out)!r}: holds a run; continue it with --resume or replace it with --overwrite"
                if diverged is None
                else f"--out {str(out)!r}: "
                f"holds a run that diverged at round {diverged}; replace it with --overwrite"
            )


def _diverged_at(final: Path):
    """The round at which the run in ``final`` diverged (its summary says so), else None."""
    try:
        summary = read_json(final / SUMMARY, SUMMARY)
    except PrivzvError:
        return None
    return (
        summary.get("rounds")
        if isinstance(summary, dict) and summary.get("stopped") == stopping.DIVERGED
        else None
    )


def _resolved(out, flag: str) -> Path:
    """``out`` absolute with its links resolved; one line for a path no folder can have (a
    symbolic link loop, a name too long)."""
    try:
        final = Path(out).resolve()
        os.stat(final)
    except (FileNotFoundError, NotADirectoryError):
        return final
    except RuntimeError:  # Python < 3.13: a loop met while resolving
        raise PrivzvError(f"{flag} {str(out)!r}: cannot be used (a symbolic link loop)") from None
    except OSError as exc:
        raise PrivzvError(f"{flag} {str(out)!r}: cannot be used ({exc.strerror})") from None
    return final


class FolderLock:
    """An exclusive ``flock`` on a lock file that is removed again on release, so a finished or
    refused run leaves nothing beside its folder (a killed one leaves the file, which the next
    run on that folder takes over and removes).

    Removing a lock file is safe only this way: the holder unlinks it while still holding the
    lock, and a taker, once it holds the lock, checks that the path still names the file it
    locked (a process that opened the file before the unlink would otherwise hold a lock on a
    file nobody else can see, beside the next run's). The same protocol as filelock's check of
    ``st_nlink`` (filelock 4, ``UnixFileLock._finalize_locked_fd``), which however never
    removes its file."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def take(cls, path: Path, attempts: int = 3) -> FolderLock | None:
        """The lock on ``path``, or None while another process holds it. A file unlinked by a
        holder that finished meanwhile is tried again, ``attempts`` times in all."""
        import fcntl

        for _ in range(attempts):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except BaseException:
                os.close(fd)
                raise
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if current is not None and os.path.samestat(current, os.fstat(fd)):
                return cls(path, fd)
            os.close(fd)  # the holder removed this file as we opened it
        return None

    def release(self) -> None:
        """Remove the lock file, then unlock (closing the file)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None


class RunFolder:
    """One run folder, locked while open. ``path`` is where files go (the hidden new folder
    until :meth:`commit`), ``final`` the ``--out`` folder."""

    def __init__(self, final: Path, path: Path, lock):
        self.final, self.path, self._lock = final, path, lock
        self.run_id: str | None = None
        self.threat: str | None = None  # the run's threat: which files and entries are secret
        self.metrics: list[dict] = []
        self.ledger: JournaledLedger | None = None
        self._recorder = None  # the run's transcript Recorder, once it streams into the folder
        self._manifest: dict | None = None  # of the checkpoint a resume loaded
        self._secrets_sha256: str | None = None  # of secrets.json, as written or verified

    # ------------------------------------------------------------------ locking and creation
    @staticmethod
    def _locked(final: Path, flag: str, shown):
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            lock = FolderLock.take(final.parent / f".{final.name}.lock")
        except OSError as exc:
            raise PrivzvError(f"{flag} {str(shown)!r}: cannot use this folder ({exc.strerror})") from None
        if lock is None:
            raise PrivzvError(
                f"{flag} {str(shown)!r}: another privzv run is using this folder (wait for it to finish)"
            )
        name = _glob_escape(final.name)
        for leftover in [*final.parent.glob(f".{name}.new-*"), *final.parent.glob(f".{name}.old-*")]:
            shutil.rmtree(leftover, ignore_errors=True)  # a killed creation or overwrite
        return lock

    @classmethod
    @contextlib.contextmanager
    def create(cls, out, *, overwrite: bool = False) -> Iterator[RunFolder]:
        """A new run for ``out``, built hidden and renamed into place by :meth:`commit`.

        ``out`` must not exist, be an empty folder, or (with ``overwrite``) hold a run folder.
        Before ``commit`` an error removes everything; after it the run stays resumable.
        """
        final = _resolved(out, "--out")
        _check_new_target(final, out, overwrite)  # before the lock: a refusal leaves no lock file
        lock = cls._locked(final, "--out", out)
        folder = None
        try:
            _check_new_target(final, out, overwrite)  # again, now that no other run can change it
            work = Path(tempfile.mkdtemp(prefix=f".{final.name}.new-", dir=final.parent))
            folder = cls(final, work, lock)
            folder.run_id = secrets.token_hex(8)
            (work / PRIVATE).mkdir(mode=0o700)
            yield folder
        except BaseException:
            if folder is not None and folder.path != final:
                shutil.rmtree(folder.path, ignore_errors=True)
            raise
        finally:
            folder.close() if folder is not None else lock.release()

    def commit(self) -> None:
        """Rename the new run into place (replacing an empty folder, or the run to overwrite)."""
        old = None
        if self.final.is_dir() and any(self.final.iterdir()):
            old = Path(tempfile.mkdtemp(prefix=f".{self.final.name}.old-", dir=self.final.parent))
            os.replace(self.final, old)
        os.replace(self.path, self.final)
        _fsync_dir(self.final.parent)
        self.path = self.final
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    @classmethod
    @contextlib.contextmanager
    def open(cls, out) -> Iterator[RunFolder]:
        """An existing run, locked, for ``--resume`` (its files are read by :meth:`read_config`,
        :meth:`load_checkpoint`, :meth:`load_ledger`...)."""
        final = _resolved(out, "--resume")
        if not (final / CONFIG).is_file():
            raise PrivzvError(f"--resume {str(out)!r}: not a run folder (no {CONFIG})")
        folder = cls(final, final, cls._locked(final, "--resume", out))
        try:
            for stray in [
                *final.glob(".*.tmp"),
                *final.glob(f"{PRIVATE}/.*.tmp"),
                *final.glob(f"{PRIVATE}/*/.*.tmp"),
                *final.glob(f"{TRANSCRIPTS}/.*.tmp"),
            ]:
                stray.unlink()  # a write interrupted by a kill
            yield folder
        finally:
            folder.close()

    def close(self) -> None:
        if self._recorder is not None:
            self._recorder.close()
        if self.ledger is not None and self.ledger.journal is not None:
            self.ledger.journal.close()
            self.ledger.journal = None
        self._lock.release()

    # ------------------------------------------------------------------ public and private files
    @property
    def private(self) -> Path:
        return self.path / PRIVATE

    def write_secrets(self, secret_seed: int, given: bool, data_sha256: str) -> None:
        """``data_sha256``: the run's data (``data.digest``), which a resume must load again."""
        text = _dumps(
            {
                "format": FORMAT,
                "run_id": self.run_id,
                "secret_seed": secret_seed,
                "source": "given" if given else "os-entropy",
                "data_sha256": data_sha256,
            },
            SECRETS,
            indent=1,
        ).encode()
        atomic_write(self.private / SECRETS, lambda fh: fh.write(text), private=True)
        self._secrets_sha256 = hashlib.sha256(text).hexdigest()

    def read_secrets(self) -> dict:
        """``private/secrets.json``, checked against the manifest of the checkpoint loaded
        (:meth:`load_checkpoint` first)."""
        name = f"{PRIVATE}/{SECRETS}"
        s = read_json(self.path / name, name)
        _expect(
            isinstance(s, dict) and s.get("run_id") == self.run_id,
            f"{name}: does not belong to run {self.run_id} (or is corrupt)",
        )
        _check_fields(s, {"secret_seed": lambda v: _count(v) and v < 2**63}, name)
        self._verify(name)
        self._secrets_sha256 = self._manifest_sha256(name)
        return s

    def check_not_diverged(self, flag: str) -> None:
        """Refuse a run that diverged (resuming it would only diverge again)."""
        at = _diverged_at(self.path)
        _expect(
            at is None,
            f"{flag} {str(self.final)!r}: the run diverged at round {at} ({SUMMARY}); "
            "it cannot be resumed: start a new run with lower learning rates (--lr-device, "
            "--lr-server) or --lam (--overwrite replaces this one)",
        )

    def write_config(self, saved: dict) -> None:
        _write_json(self.path / CONFIG, {"format": FORMAT, "run_id": self.run_id, **saved})
        self.threat = saved["config"]["threat"]

    def read_config(self) -> dict:
        """The saved config.json (format checked); sets ``run_id``."""
        saved = read_json(self.path / CONFIG, CONFIG)
        check_format(saved, CONFIG)
        _expect(
            isinstance(saved.get("run_id"), str) and isinstance(saved.get("config"), dict),
            f"{CONFIG}: corrupt (no run_id or config)",
        )
        sigma = saved.get("sigma")
        _expect(
            isinstance(sigma, (int, float))
            and not isinstance(sigma, bool)
            and math.isfinite(sigma)
            and sigma >= 0,
            f"{CONFIG}: sigma {sigma!r} is not a number >= 0",
        )
        for name in ("rounds", "checkpoint_every"):
            value = saved.get(name)
            _expect(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                f"{CONFIG}: {name} {value!r} is not an integer >= 1",
            )
        _expect(
            saved["config"].get("threat") in sampling.ASSUMED,
            f"{CONFIG}: threat {saved['config'].get('threat')!r} unknown",
        )
        self.run_id, self.threat = saved["run_id"], saved["config"]["threat"]
        return saved

    # ------------------------------------------------------------------ metrics
    def append_metrics(self, row: dict) -> None:
        text = "".join(_dumps(r, METRICS) + "\n" for r in [*self.metrics, row])
        self.metrics.append(row)
        atomic_write(self.path / METRICS, lambda fh: fh.write(text.encode()))

    def _read_metrics(self) -> list[dict]:
        path = self.path / METRICS
        if not path.is_file():
            raise PrivzvError(f"{METRICS}: missing")
        try:
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (UnicodeDecodeError, ValueError):
            raise PrivzvError(f"{METRICS}: corrupt (a line is not JSON)") from None
        return rows

    # ------------------------------------------------------------------ the ledger
    def start_ledger(self, ledger: PrivacyLedger, platform: dict) -> JournaledLedger:
        """The run's ledger, journaled from now on (a new private run); ``platform``: what its
        releases are made on (``privzv.training.run.replay_platform``)."""
        self.ledger = JournaledLedger.from_state_dict(ledger.state_dict())
        header = {
            "format": FORMAT,
            "run_id": self.run_id,
            "ledger": self.ledger.params(),
            "platform": platform,
        }
        atomic_write(
            self.private / JOURNAL,
            lambda fh: fh.write((_dumps(header, JOURNAL) + "\n").encode()),
            private=True,
        )
        self._open_journal()
        self._write_ledger()
        return self.ledger

    def _open_journal(self) -> None:
        self.ledger.journal = open(self.private / JOURNAL, "ab")

    def _write_ledger(self) -> None:
        _write_json(self.private / LEDGER, _ledger_json(self.ledger.state_dict()), private=True)

    def _read_journal(self) -> tuple[dict, list[dict]]:
        path = self.private / JOURNAL
        if not path.is_file():
            raise PrivzvError(
                f"{JOURNAL}: missing (a private run's ledger; its spent budget is unknown,"
                " so it cannot continue)"
            )
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1  # after it: a line torn by a kill (its release never left)
        self._journal_end = end
        try:
            lines = [json.loads(x) for x in data[:end].decode().splitlines()]
        except (UnicodeDecodeError, ValueError):
            raise PrivzvError(f"{JOURNAL}: corrupt (a line is not JSON)") from None
        _expect(
            bool(lines) and isinstance(lines[0], dict) and lines[0].get("format") == FORMAT,
            f"{JOURNAL}: corrupt (no header)",
        )
        _expect(
            lines[0].get("run_id") == self.run_id,
            f"{JOURNAL}: belongs to run {lines[0].get('run_id')!r}, not {self.run_id!r}",
        )
        return lines[0], lines[1:]

    def load_ledger(self, expected: dict, checkpoint: dict) -> JournaledLedger:
        """Replay the journal into the run's ledger and cross-check it with ``expected`` (the ledger
        parameters the saved config makes; ``schedule``: the keys given), ``ledger.json`` and the
        checkpoint. Reads only: :meth:`resumed` writes."""
        header, lines = self._read_journal()
        params = header.get("ledger") if isinstance(header.get("ledger"), dict) else {}
        for key, want in expected.items():
            got = params.get(key)
            if key == "schedule" and isinstance(got, dict):
                got = {k: got.get(k) for k in want}
            _expect(got == want, f"{JOURNAL}: ledger {key} {got!r} differs from {CONFIG}'s {want!r}")
        saved = read_json(self.private / LEDGER, LEDGER)
        _expect(
            isinstance(saved, dict)
            and isinstance(saved.get("releases"), int)
            and not isinstance(saved.get("releases"), bool),
            f"{LEDGER}: corrupt (releases {saved.get('releases') if isinstance(saved, dict) else None!r}"
            " is not an integer)",
        )
        kinds = [_journal_kind(line, number) for number, line in enumerate(lines, 2)]
        markers, last = [], None
        self._made_on = header.get("platform")  # the platform of the releases since the last resume
        try:
            ledger = JournaledLedger.from_params(params)
            # ledger.json is the state at the last checkpoint marker, or at the one before it (a
            # kill between the marker and ledger.json), or the first one (no marker yet); one
            # written before head_position was kept lacks it
            states = collections.deque([_ledger_json(ledger.state_dict())], maxlen=2)
            for kind, line in zip(kinds, lines):
                if kind == "ids":  # as written: a float, bool or huge id is refused, not cast
                    ledger.record(line["device"], np.asarray(line["ids"]))
                elif kind == "checkpoint":
                    ledger.mark()
                    markers.append(line)
                    last = line["checkpoint"]
                    states.append(_ledger_json(ledger.state_dict()))
                else:
                    if line["resume"] != last:  # resumed from a checkpoint killed before its marker
                        ledger.mark()
                        last = line["resume"]
                    ledger.rewind(line["replayed"])
                    self._made_on = line.get("platform")
        except (KeyError, TypeError, ValueError, OverflowError, PrivzvError) as exc:
            raise PrivzvError(f"{JOURNAL}: corrupt ({str(exc)[:80]})") from None
        if isinstance(saved, dict) and "window_counts" in saved and "head_position" not in saved:
            states = [{k: v for k, v in state.items() if k != "head_position"} for state in states]
        _expect(
            saved in states,
            f"{LEDGER}: differs from the journal's ledger at its last checkpoint (edited, or another run's)",
        )
        done = checkpoint["releases"]
        _expect(
            ledger.releases >= done,
            f"{JOURNAL}: {ledger.releases} releases, fewer than the "
            f"{done} of {CHECKPOINT} (round {checkpoint['round']})",
        )
        ids = [m["checkpoint"] for m in markers]
        if checkpoint["id"] in ids:
            _expect(
                ids[-1] == checkpoint["id"],
                f"{CHECKPOINT}: an older checkpoint (round "
                f"{checkpoint['round']}) than the ledger's last (round {markers[-1]['round']})",
            )
        else:  # killed between writing the checkpoint and marking it
            _expect(
                not markers or markers[-1]["round"] <= checkpoint["round"],
                f"{CHECKPOINT}: round {checkpoint['round']} is not in the ledger's history (last "
                f"checkpoint round {markers[-1]['round'] if markers else None})",
            )
        self.ledger = ledger
        self._unmarked = checkpoint["id"] != last
        return ledger

    def resumed(self, checkpoint: dict, seeded: bool, platform: dict) -> None:
        """After every check passed: rewind the ledger to the checkpoint and mark the resume in
        the journal (with the releases made after the checkpoint, which stay counted, and
        ``replayed``: the resumed run re-makes them bit for bit, so they are not charged again,
        ``privzv.ledger``; true for ``seeded`` noise on the ``platform`` that made them), drop
        later metrics rows, and unfinish the run."""
        if self.ledger is not None:
            os.truncate(self.private / JOURNAL, self._journal_end)
            self._open_journal()
            if self._unmarked:  # nothing was journaled after that checkpoint
                self.ledger.mark()
            replayed = seeded and self._made_on == platform
            discarded = self.ledger.rewind(replayed)
            self.ledger._append(
                {
                    "resume": checkpoint["id"],
                    "round": checkpoint["round"],
                    "discarded": discarded,
                    "replayed": replayed,
                    "platform": platform,
                }
            )
        rows, self.metrics = self.metrics, []
        for row in rows:
            self.append_metrics(row)
        (self.path / SUMMARY).unlink(missing_ok=True)
        self._drop_checkpoints_but(checkpoint["id"])  # a newer one whose commit was killed

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, round_: int, state: dict, recorder, traffic: dict, meta: dict) -> None:
        """Transcripts, then the private and public checkpoint (the commit point), then the
        journal marker, ledger.json and traffic.npz. ``meta`` is cross-checked on resume."""
        ckpt_id = f"{round_:010d}-{secrets.token_hex(4)}"
        counts = self._sync_transcripts(recorder) if recorder.enabled else None
        public, secret = split_state(state)
        files = {f"{PRIVATE}/{SECRETS}": self._secrets_sha256}
        for party, entries in secret.items():
            folder = self.private / party
            folder.mkdir(mode=0o700, exist_ok=True)
            name = f"{PRIVATE}/{party}/checkpoint-{ckpt_id}.pt"
            files[name] = _torch_save(
                self.path / name,
                {
                    "format": FORMAT,
                    "run_id": self.run_id,
                    "id": ckpt_id,
                    "round": round_,
                    "party": party,
                    "state": entries,
                },
                private=True,
            )
        releases = self.ledger.releases if self.ledger is not None else 0
        import torch

        buffer = io.BytesIO()
        torch.save(
            {
                "format": FORMAT,
                "run_id": self.run_id,
                "id": ckpt_id,
                "round": round_,
                "releases": releases,
                "metrics": list(self.metrics),
                "parties": sorted(secret),
                "transcripts": counts,
                **meta,
                "state": public,
            },
            buffer,
        )
        files[CHECKPOINT] = hashlib.sha256(buffer.getvalue()).hexdigest()
        _write_json(
            self.private / _manifest_name(ckpt_id),  # before the commit point it covers
            {
                "format": FORMAT,
                "run_id": self.run_id,
                "id": ckpt_id,
                "files": files,
                "transcripts": recorder.digests() if counts is not None else None,
            },
            private=True,
        )
        atomic_write(self.path / CHECKPOINT, lambda fh: fh.write(buffer.getvalue()))
        if self.ledger is not None:
            self.ledger.mark()
            self.ledger._append({"checkpoint": ckpt_id, "round": round_, "releases": releases})
            self._write_ledger()
        traffic_at = self.private if sizes_secret(self.threat) else self.path
        atomic_write(
            traffic_at / TRAFFIC, lambda fh: np.savez(fh, **traffic), private=traffic_at == self.private
        )
        self._drop_checkpoints_but(ckpt_id)

    def _drop_checkpoints_but(self, ckpt_id: str) -> None:
        for old in self.private.glob("*/checkpoint-*.pt"):
            if old.name != f"checkpoint-{ckpt_id}.pt":
                old.unlink()
        for old in self.private.glob(_manifest_name("*")):
            if old.name != _manifest_name(ckpt_id):
                old.unlink()

    def load_checkpoint(self) -> dict:
        """The checkpoint (public state merged with every party's private part), format, run and
        fields checked, each file against the digest its manifest keeps (:meth:`save_checkpoint`)."""
        ckpt = _public_checkpoint(self.path, self.run_id)
        name = f"{PRIVATE}/{_manifest_name(ckpt['id'])}"
        _expect(
            (self.path / name).exists(),
            f"{name}: missing, so {CHECKPOINT} (round {ckpt['round']}) "
            "cannot be verified (an older checkpoint put back, or one written without a manifest)",
        )
        manifest = read_json(self.path / name, name)
        _check_fields(
            manifest,
            {
                "run_id": lambda v: v == ckpt["run_id"],  # the checkpoint's run (checked above when known)
                "id": lambda v: v == ckpt["id"],
                "files": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                "transcripts": lambda v: v is None or isinstance(v, dict),
            },
            name,
        )
        self._manifest = manifest
        self._verify(CHECKPOINT)
        secret = {
            party: _party_entries(
                self.path, ckpt, party, self._manifest_sha256(f"{PRIVATE}/{party}/checkpoint-{ckpt['id']}.pt")
            )
            for party in ckpt["parties"]
        }
        ckpt["state"] = merge_state(ckpt["state"], secret)
        return ckpt

    def _manifest_sha256(self, name: str) -> str:
        digest = self._manifest["files"].get(name)
        _expect(digest is not None, f"{name}: its checkpoint's manifest has no digest of it")
        return digest

    def _verify(self, name: str, size: int | None = None, digest: str | None = None) -> None:
        """The file ``name`` of the folder (its first ``size`` bytes) has the SHA-256 that the
        checkpoint's manifest keeps (or ``digest``)."""
        from privzv.training import transcript

        want = digest if digest is not None else self._manifest_sha256(name)
        _expect(
            transcript.file_sha256(self.path / name, size).hexdigest() == want,
            f"{name}: differs from the digest its checkpoint kept in {PRIVATE}/ (edited or corrupt)",
        )

    def load_metrics(self, checkpoint: dict) -> None:
        """The metrics rows of the checkpoint (rows written after it are dropped)."""
        rows, want = self._read_metrics(), checkpoint["metrics"]
        _expect(
            rows[: len(want)] == want,
            f"{METRICS}: differs from the {len(want)} rows of {CHECKPOINT} (round {checkpoint['round']})",
        )
        self.metrics = list(want)

    def _folders(self) -> tuple[Path, Path]:
        return self.path / TRANSCRIPTS, self.private / TRANSCRIPTS

    def _stream(self, recorder, sizes: dict | None = None) -> None:
        public, private = self._folders()
        public.mkdir(exist_ok=True)
        private.mkdir(mode=0o700, exist_ok=True)
        recorder.stream_to(public, private, secret_entries(self.threat, recorder.transcripts), sizes)
        self._recorder = recorder

    def _sync_transcripts(self, recorder) -> dict:
        """The transcripts fsync'd (streamed into the folder from the first checkpoint on); their
        sizes, which the checkpoint records."""
        if not recorder.streaming:
            self._stream(recorder)
        return recorder.sync()

    def load_transcripts(self, recorder, checkpoint: dict) -> None:
        """Continue the transcripts in ``recorder`` from the checkpoint: each party's files cut
        back to the sizes it recorded (entries of later rounds, to be run again, dropped)."""
        from privzv.training import transcript

        sizes, digests = checkpoint["transcripts"], self._manifest["transcripts"]
        _expect(
            isinstance(sizes, dict) and all(isinstance(v, dict) for v in sizes.values()),
            f"{CHECKPOINT}: the run was saved without transcripts (or in an older format)",
        )
        _expect(
            isinstance(digests, dict) and set(digests) == set(sizes) == set(recorder.transcripts),
            f"{CHECKPOINT}: transcripts of parties {sorted(sizes)}, the run has "
            f"{sorted(recorder.transcripts)} (and its manifest {sorted(digests or {})})",
        )
        for party, size in sizes.items():
            _check_fields(size, TRANSCRIPT_SIZES, f"{CHECKPOINT}: transcripts {party}")
            for folder, part in zip((TRANSCRIPTS, f"{PRIVATE}/{TRANSCRIPTS}"), ("public", "private")):
                if size[part] is None:
                    continue
                for suffix, want, digest in zip(
                    (transcript.INDEX, transcript.DATA), size[part], digests[party][part] or ()
                ):
                    path = self.path / folder / f"{party}{suffix}"
                    _expect(
                        path.is_file(),
                        f"{folder}/{party}: missing ({CHECKPOINT} of round "
                        f"{checkpoint['round']} expects {path.name})",
                    )
                    _expect(
                        path.stat().st_size >= want,
                        f"{folder}/{path.name}: {path.stat().st_size}"
                        f" bytes, {CHECKPOINT} of round {checkpoint['round']} expects {want}",
                    )
                    self._verify(f"{folder}/{path.name}", want, digest)
        self._stream(recorder, sizes)

    # ------------------------------------------------------------------ the end
    def finish(self, summary: dict) -> None:
        """Write summary.json (atomically): the run is finished."""
        _write_json(self.path / SUMMARY, summary)


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def is_private(path) -> bool:
    """Whether ``path`` is inside a run folder's private area."""
    p = Path(path).resolve()
    return any(part.name == PRIVATE and (part.parent / CONFIG).is_file() for part in (p, *p.parents))


def public_config(run_dir, flag: str = "--run", python: bool = False) -> dict:
    """The public config.json of a run folder, for a reader that must see nothing secret. A run
    trained from Python with its own modules or data (``from_python``) is refused unless
    ``python`` (its reader was given them again)."""
    run = Path(run_dir)
    if is_private(run):
        raise PrivzvError(
            f"{flag} {str(run)!r}: is inside a run's private area; attacks read only public files"
        )
    if not (run / CONFIG).is_file():
        raise PrivzvError(f"{flag} {str(run)!r}: not a training run (no {CONFIG})")
    saved = read_json(run / CONFIG, f"{flag} {str(run)!r}: {CONFIG}")
    _expect(
        isinstance(saved, dict) and isinstance(saved.get("config"), dict),
        f"{flag} {str(run)!r}: {CONFIG} is not a run's config",
    )
    check_format(saved, f"{flag} {str(run)!r}")
    if from_python(saved) and not python:
        raise PrivzvError(
            f"{flag} {str(run)!r}: the run was trained from Python with its own modules or data "
            "(privzv.training.fit), which this command cannot rebuild; it needs them given again"
        )
    return saved


PYTHON = "python"  # config.json's models.source of a run given its modules or data from Python


def from_python(saved: dict) -> bool:
    """True for the config.json of a run trained with modules or data given from Python."""
    models = saved.get("models")
    return isinstance(models, dict) and models.get("source") == PYTHON


def _manifest_name(ckpt_id: str) -> str:
    """The private manifest of checkpoint ``ckpt_id``: the SHA-256 of each file a resume from it
    reads (checkpoint.pt, every party's part, secrets.json, the transcripts up to their sizes)."""
    return f"manifest-{ckpt_id}.json"


# checkpoint.pt's fields besides the state (a resume and an attack read them), and their checks
CHECKPOINT_FIELDS = {
    "id": _is_id,
    "run_id": lambda v: isinstance(v, str),
    "round": _count,
    "releases": _count,
    "metrics": lambda v: isinstance(v, list) and all(isinstance(row, dict) for row in v),
    "parties": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "transcripts": lambda v: v is None or isinstance(v, dict),
    "config": lambda v: isinstance(v, dict),
    "rounds": _count,
    "state": lambda v: isinstance(v, dict),
}
_PAIR = lambda v: isinstance(v, list) and len(v) == 2 and all(map(_count, v))  # noqa: E731
TRANSCRIPT_SIZES = {"entries": _count, "public": _PAIR, "private": lambda v: v is None or _PAIR(v)}


def _public_checkpoint(run: Path, run_id: str | None) -> dict:
    """``checkpoint.pt`` of ``run``, format and fields checked (and its run, when ``run_id`` is
    given)."""
    ckpt = _torch_load(run / CHECKPOINT, CHECKPOINT)
    _expect(
        isinstance(ckpt, dict) and ckpt.get("format") == FORMAT,
        f"{CHECKPOINT}: not a format-{FORMAT} checkpoint",
    )
    _check_fields(ckpt, CHECKPOINT_FIELDS, CHECKPOINT)
    _expect(
        run_id is None or ckpt.get("run_id") == run_id,
        f"{CHECKPOINT}: belongs to run {ckpt.get('run_id')!r}, not {run_id!r}",
    )
    return ckpt


def _party_entries(run: Path, ckpt: dict, party: str, sha256: str | None = None) -> list:
    """``party``'s private (path, value) list of the checkpoint ``ckpt`` of ``run`` (with
    ``sha256``: the file's bytes must have it)."""
    name = f"{PRIVATE}/{party}/checkpoint-{ckpt['id']}.pt"
    secret = _torch_load(run / name, name, sha256)
    _expect(
        isinstance(secret, dict)
        and secret.get("run_id") == ckpt["run_id"]
        and secret.get("round") == ckpt["round"]
        and secret.get("party") == party
        and isinstance(secret.get("state"), list),
        f"{name}: does not match {CHECKPOINT}",
    )
    return secret["state"]


def party_state(run_dir, party: str | None) -> dict:
    """The last checkpoint's scheduler state as ``party`` sees it: the public state and that
    party's own private part only (None: the public state alone). A device's model is its own
    secret against the other parties; an attack playing a party reads that party's state through
    this, nothing else in private/."""
    run = Path(run_dir)
    ckpt = _public_checkpoint(run, None)
    own = {party: _party_entries(run, ckpt, party)} if party in ckpt["parties"] else {}
    return merge_state(ckpt["state"], own)
