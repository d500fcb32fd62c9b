"""Per-party transcripts: what each party sent, received and knows. Attacks read only these.

On disk, in ``RUN/transcripts/``, two files per party (``server``, ``device0``, ...):

``PARTY.json``
    ``{"format": 1, "party": ..., "meta": {...}, "entries": [[round, direction, kind, peer], ...],
    "fields": {kind: [field, ...]}}``. ``direction`` is ``"sent"``, ``"received"`` or ``"local"``
    (a fact the party knows without a message: its batch ids, its u seed, a secret keep mask).
``PARTY.npz``
    for every kind and field, ``KIND/FIELD/data`` (the entries' arrays of that kind concatenated
    along axis 0; a scalar is stored as shape [1]) and ``KIND/FIELD/offsets`` (row offsets,
    one more than the number of entries of that kind, in entry order).

``load(run_dir, party)`` gives back a :class:`Transcript` of :class:`Entry` objects in the order
they happened. Device transcripts hold: its uplinks (``ids`` and its embeddings), the downlinks
it received, ``local`` entries ``batch`` (``ids``) and, for ZO methods, ``seed`` (``seed``);
``meta`` holds its feature partition and record count. The server's transcript holds every
message it sent and received and its own ``local`` facts; nothing of another party's private state.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from privzv.errors import PrivzvError
from privzv.training.messages import Message

FORMAT = 1
DIRECTIONS = ("sent", "received", "local")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One transcript entry: in ``round``, ``direction`` of a message (or a local fact) ``kind``."""

    round: int
    direction: str
    kind: str
    peer: str
    fields: dict


@dataclasses.dataclass
class Transcript:
    """A party's transcript: ``meta`` (what it holds) and its entries in order."""

    party: str
    meta: dict
    entries: list

    def select(self, direction: str | None = None, kind: str | None = None) -> list:
        """The entries of one direction and/or kind, in order."""
        return [e for e in self.entries
                if (direction is None or e.direction == direction) and (kind is None or e.kind == kind)]


class Recorder:
    """Collects transcripts in memory during a run (``enabled=False`` records nothing)."""

    def __init__(self, parties: list[str], meta: dict[str, dict], enabled: bool = True):
        self.enabled = enabled
        self.transcripts = {p: Transcript(p, dict(meta.get(p, {})), []) for p in parties}

    def message(self, msg: Message) -> None:
        """Record ``msg`` in its sender's (sent) and receiver's (received) transcripts, where
        this recorder keeps them (one party's recorder, in its own process, keeps only its own)."""
        if not self.enabled:
            return
        fields = _numpy(msg.tensors)
        if msg.sender in self.transcripts:
            self.transcripts[msg.sender].entries.append(
                Entry(msg.round, "sent", msg.kind, msg.receiver, fields))
        if msg.receiver in self.transcripts:
            self.transcripts[msg.receiver].entries.append(
                Entry(msg.round, "received", msg.kind, msg.sender, fields))

    def local(self, party: str, round_: int, kind: str, fields: dict) -> None:
        """Record a fact that ``party`` knows without a message."""
        if self.enabled:
            self.transcripts[party].entries.append(Entry(round_, "local", kind, party, _numpy(fields)))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for party, transcript in self.transcripts.items():
            _save(folder, transcript)

    def extend_from(self, folder: Path) -> None:
        """Prepend the transcripts saved in ``folder`` (a resumed run continues them)."""
        for party, transcript in self.transcripts.items():
            if (folder / f"{party}.json").exists():
                transcript.entries[:0] = _load(folder, party).entries


def load(run_dir: str | Path, party: str) -> Transcript:
    """The transcript of ``party`` (``"server"``, ``"device0"``, ...) saved in ``run_dir``."""
    folder = Path(run_dir) / "transcripts"
    if not (folder / f"{party}.json").exists():
        known = sorted(p.stem for p in folder.glob("*.json")) if folder.exists() else []
        raise PrivzvError(f"party {party!r}: no transcript in {str(folder)!r}"
                          + (f" (have: {', '.join(known)})" if known else " (run without transcripts?)"))
    return _load(folder, party)


def _numpy(tensors: dict) -> dict:
    out = {}
    for name, value in tensors.items():
        arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        out[name] = np.array(arr, copy=True)
    return out


def _save(folder: Path, t: Transcript) -> None:
    fields: dict[str, list[str]] = {}
    chunks: dict[str, list[np.ndarray]] = {}
    for e in t.entries:
        names = fields.setdefault(e.kind, list(e.fields))
        if names != list(e.fields):
            raise ValueError(f"transcript {t.party}: kind {e.kind!r} has fields {list(e.fields)}, "
                             f"expected {names}")
        for name in names:
            chunks.setdefault(f"{e.kind}/{name}", []).append(np.atleast_1d(e.fields[name]))
    arrays = {}
    for key, parts in chunks.items():
        arrays[f"{key}/data"] = np.concatenate(parts, axis=0)
        arrays[f"{key}/offsets"] = np.concatenate([[0], np.cumsum([len(p) for p in parts])])
    index = {"format": FORMAT, "party": t.party, "meta": t.meta, "fields": fields,
             "entries": [[e.round, e.direction, e.kind, e.peer] for e in t.entries]}
    (folder / f"{t.party}.json").write_text(json.dumps(index))
    with open(folder / f"{t.party}.npz", "wb") as fh:
        np.savez(fh, **arrays)


def _load(folder: Path, party: str) -> Transcript:
    index = json.loads((folder / f"{party}.json").read_text())
    if index.get("format") != FORMAT:
        raise PrivzvError(f"transcript {party!r}: format {index.get('format')!r}, expected {FORMAT}")
    with np.load(folder / f"{party}.npz") as npz:
        arrays = {key: npz[key] for key in npz.files}
    seen: dict[str, int] = {}
    entries = []
    for round_, direction, kind, peer in index["entries"]:
        j = seen.get(kind, 0)
        seen[kind] = j + 1
        fields = {}
        for name in index["fields"][kind]:
            offsets = arrays[f"{kind}/{name}/offsets"]
            fields[name] = arrays[f"{kind}/{name}/data"][offsets[j]:offsets[j + 1]]
        entries.append(Entry(int(round_), direction, kind, peer, fields))
    return Transcript(party, index["meta"], entries)
