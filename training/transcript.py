"""Per-party transcripts: what each party sent, received and knows. Attacks read only these.

On disk, in ``RUN/transcripts/``, two append-only files per party (``server``, ``device0``, ...),
written as the rounds go (``Recorder.stream_to``), so a run holds no transcript in memory:

``PARTY.jsonl``
    line 1: ``{"format": 2, "party": ..., "meta": {...}}``, ``meta["contains"]`` naming the
    non-DP data it holds (``raw_embeddings``: the parties whose raw embeddings its uplinks carry)
    and ``meta["private"]``, the [direction, kind] of its entries kept in the private area; then
    one line per entry, in the order it happened:
    ``[round, direction, kind, peer, [[field, dtype, shape, offset], ...]]``.
    ``direction`` is ``"sent"``, ``"received"`` or ``"local"`` (a fact the party knows without a
    message: its batch ids, its u seeds, a secret keep mask); ``dtype`` is numpy's ``dtype.str``.
``PARTY.bin``
    the fields' values, C order, each at its ``offset`` (bytes).

A line cut short by a kill (no newline), or one whose values lie beyond the end of ``PARTY.bin``,
ends the transcript. ``load(run_dir, party)`` gives back a :class:`Transcript` of :class:`Entry`
objects in order. Device transcripts hold: its uplinks (``ids`` and its embeddings), the downlinks
it received, ``local`` entries ``batch`` (``ids``) and, for ZO methods, ``seed`` (``seed``, one
per direction); ``meta`` holds its feature partition and record count. The server's transcript
holds every message it sent and received and its own ``local`` facts; nothing of another party's
private state. Entries a run folder marks secret go to ``RUN/private/transcripts/`` instead, each
with a ``_position`` field (its index among all of its party's entries).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import torch

from privzv.errors import PrivzvError
from privzv.training.messages import Message

FORMAT = 2
DIRECTIONS = ("sent", "received", "local")
INDEX, DATA = ".jsonl", ".bin"
POSITION = "_position"
NUMERIC_KINDS = "biufc"  # the dtypes a transcript field may have: bool, int, uint, float, complex


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
        return [
            e
            for e in self.entries
            if (direction is None or e.direction == direction) and (kind is None or e.kind == kind)
        ]


def file_sha256(path: Path, size: int | None = None):
    """A running SHA-256 (``hashlib``) of the first ``size`` bytes of ``path`` (None: all)."""
    digest, left = hashlib.sha256(), math.inf if size is None else size
    with open(path, "rb") as fh:
        while left > 0 and (chunk := fh.read(int(min(left, 1 << 20)))):
            digest.update(chunk)
            left -= len(chunk)
    return digest


class _Sink:
    """One party's append-only pair of files in ``folder``: new (header written), or continued
    from ``sizes`` = [index bytes, data bytes] (anything after them cut off). ``hashes``: the
    running SHA-256 of each file's content (a run folder's manifest keeps them per checkpoint);
    for continued files None until :meth:`digest` first reads them, so continuing costs nothing
    more than the entries appended."""

    def __init__(
        self, folder: Path, party: str, meta: dict, sizes: list | None = None, private: bool = False
    ):
        index, data = folder / f"{party}{INDEX}", folder / f"{party}{DATA}"
        mode = 0o600 if private else 0o666
        if sizes is None:
            header = json.dumps({"format": FORMAT, "party": party, "meta": meta}, allow_nan=False)
            self.hashes = []
            for path, content in ((index, (header + "\n").encode()), (data, b"")):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(content)
                self.hashes.append(hashlib.sha256(content))
        else:
            for path, size in zip((index, data), sizes):
                os.truncate(path, size)
            self.hashes = None
        self.index, self.data = open(index, "ab"), open(data, "ab")
        self.offset = self.data.tell()

    def append(self, e: Entry) -> None:
        fields = []
        for name, value in e.fields.items():
            arr = np.ascontiguousarray(value)
            fields.append([name, arr.dtype.str, list(arr.shape), self.offset])
            self._write(1, arr.tobytes())
            self.offset += arr.nbytes
        line = json.dumps([e.round, e.direction, e.kind, e.peer, fields], separators=(",", ":"))
        self._write(0, (line + "\n").encode())

    def _write(self, which: int, data: bytes) -> None:
        (self.index, self.data)[which].write(data)
        if self.hashes is not None:
            self.hashes[which].update(data)

    def digest(self) -> list[str]:
        """[index, data] SHA-256 hex digests of the content written so far (after :meth:`sync`)."""
        if self.hashes is None:
            self.hashes = [file_sha256(Path(fh.name)) for fh in (self.index, self.data)]
        return [h.hexdigest() for h in self.hashes]

    def sync(self, durable: bool = True) -> list[int]:
        """Flush and fsync (values first, then the index); returns [index bytes, data bytes].
        ``durable=False``: flushed to the OS only (nothing lost if the process dies, not fsynced)."""
        for fh in (self.data, self.index):
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        return [self.index.tell(), self.data.tell()]

    def close(self) -> None:
        self.data.close()
        self.index.close()


class Recorder:
    """Collects the parties' transcripts (``enabled=False`` records nothing): in memory
    (``transcripts``), or, after :meth:`stream_to`, appended to files as the entries come."""

    def __init__(self, parties: list[str], meta: dict[str, dict], enabled: bool = True):
        self.enabled = enabled
        self.transcripts = {p: Transcript(p, dict(meta.get(p, {})), []) for p in parties}
        self.counts = {p: 0 for p in parties}  # entries so far, per party
        self._sinks: dict[str, list] | None = None
        self._secret: frozenset = frozenset()  # (party, direction, kind or "*")

    @property
    def streaming(self) -> bool:
        return self._sinks is not None

    def message(self, msg: Message) -> None:
        """Record ``msg`` in its sender's (sent) and receiver's (received) transcripts, where
        this recorder keeps them (one party's recorder, in its own process, keeps only its own)."""
        if not self.enabled:
            return
        fields = _numpy(msg.tensors)
        self._add(msg.sender, Entry(msg.round, "sent", msg.kind, msg.receiver, fields))
        self._add(msg.receiver, Entry(msg.round, "received", msg.kind, msg.sender, fields))

    def local(self, party: str, round_: int, kind: str, fields: dict) -> None:
        """Record a fact that ``party`` knows without a message."""
        if self.enabled:
            self._add(party, Entry(round_, "local", kind, party, _numpy(fields)))

    def _add(self, party: str, e: Entry) -> None:
        if party not in self.transcripts:  # another party's half of a message
            return
        if self._sinks is None:
            self.transcripts[party].entries.append(e)
        elif _matches(self._secret, party, e):
            e = dataclasses.replace(e, fields={**e.fields, POSITION: np.array([self.counts[party]])})
            self._sinks[party][1].append(e)
        else:
            self._sinks[party][0].append(e)
        self.counts[party] += 1

    def stream_to(
        self, public: Path, private: Path | None = None, secret=frozenset(), sizes: dict | None = None
    ) -> None:
        """From now on append every entry to ``public``/PARTY.*, and the entries of ``secret``
        (a set of (party, direction, kind)) to ``private``/PARTY.* (for the parties named there);
        the entries held so far go first. ``sizes``: continue the files from :meth:`sync`'s
        answer then, cut back to it (a resumed run)."""
        self._secret = frozenset(secret)
        self._sinks = {}
        for party, t in self.transcripts.items():
            saved = (sizes or {}).get(party)
            if saved is not None:
                self.counts[party] = saved["entries"]
            hidden = sorted([d, k] for p, d, k in self._secret if p == party)
            meta = {**t.meta, "private": hidden}
            self._sinks[party] = [
                _Sink(public, party, meta, saved and saved["public"]),
                _Sink(private, party, meta, saved and saved["private"], private=True) if hidden else None,
            ]
            held, t.entries = t.entries, []
            self.counts[party] -= len(held)
            for e in held:
                self._add(party, e)

    def sync(self, durable: bool = True) -> dict:
        """Flush and fsync the files (``durable=False``: flush only); per party, ``entries`` and
        the ``public`` / ``private`` [index, data] sizes (None: no private file) to continue them
        from with :meth:`stream_to`."""
        return {
            party: {
                "entries": self.counts[party],
                "public": sinks[0].sync(durable),
                "private": sinks[1].sync(durable) if sinks[1] is not None else None,
            }
            for party, sinks in self._sinks.items()
        }

    def digests(self) -> dict:
        """Per party, the ``public`` / ``private`` [index, data] SHA-256 of the files at their
        sizes (those of :meth:`sync`, called first; None: no private file)."""
        return {
            party: {
                "public": sinks[0].digest(),
                "private": sinks[1].digest() if sinks[1] is not None else None,
            }
            for party, sinks in self._sinks.items()
        }

    def close(self) -> None:
        for sinks in (self._sinks or {}).values():
            for sink in sinks:
                if sink is not None:
                    sink.close()

    def save(self, folder: Path) -> None:
        """Write the transcripts held in memory to ``folder`` (the on-disk format of a run)."""
        folder.mkdir(parents=True, exist_ok=True)
        for party, t in self.transcripts.items():
            sink = _Sink(folder, party, t.meta)
            for e in t.entries:
                sink.append(e)
            sink.sync()
            sink.close()


def _matches(secret: frozenset, party: str, e: Entry) -> bool:
    """Whether entry ``e`` of ``party`` is in ``secret`` (a kind "*" matches every kind)."""
    return (party, e.direction, e.kind) in secret or (party, e.direction, "*") in secret


def load(run_dir: str | Path, party: str) -> Transcript:
    """The transcript of ``party`` (``"server"``, ``"device0"``, ...) saved in ``run_dir``."""
    folder = Path(run_dir) / "transcripts"
    if not (folder / f"{party}{INDEX}").exists() and (folder / f"{party}.json").exists():
        raise PrivzvError(
            f"transcript {party!r}: format 1 ({party}.json + {party}.npz, written by "
            f"privzv before transcripts were streamed); this privzv reads format {FORMAT} only"
        )
    if not (folder / f"{party}{INDEX}").exists():
        known = sorted(p.stem for p in folder.glob(f"*{INDEX}")) if folder.exists() else []
        raise PrivzvError(
            f"party {party!r}: no transcript in {str(folder)!r}"
            + (f" (have: {', '.join(known)})" if known else " (run without transcripts?)")
        )
    return read_folder(folder, party)


def _numpy(tensors: dict) -> dict:
    out = {}
    for name, value in tensors.items():
        arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        out[name] = np.array(arr, copy=True)
    return out


def read_folder(folder: Path, party: str) -> Transcript:
    """The transcript of ``party`` in the transcript folder ``folder`` (``RUN/transcripts``, or a
    party's own folder on another engine). A file that is not a transcript of this format (not
    UTF-8 JSON lines, a field of a non-numeric dtype or a negative shape, values missing before
    the last entries) is a ``PrivzvError`` naming it."""
    index, values = folder / f"{party}{INDEX}", folder / f"{party}{DATA}"
    raw, data = _read(index, lambda p: p.read_bytes()), _read(values, _bytes)
    try:
        lines = raw[: raw.rfind(b"\n") + 1].decode().splitlines()  # a line cut by a kill: dropped
    except UnicodeDecodeError as exc:
        raise PrivzvError(f"transcript {str(index)!r}: not UTF-8 text (byte {exc.start})") from None
    header = _json_line(index, lines[0], 1) if lines else {}
    if not (
        isinstance(header, dict) and header.get("format") == FORMAT and isinstance(header.get("meta"), dict)
    ):
        found = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise PrivzvError(f"transcript {str(index)!r}: format {found!r}, expected {FORMAT}")
    entries, cut, offset = [], None, 0
    for number, line in enumerate(lines[1:], start=2):
        round_, direction, kind, peer, spec = _entry(index, _json_line(index, line, number), number)
        fields = {}
        for name, dt, shape, start in spec:
            end = start + dt.itemsize * math.prod(shape)
            if start != offset:
                raise PrivzvError(
                    f"transcript {str(index)!r}: line {number}: field {name!r} at "
                    f"byte {start}, expected {offset} (values are contiguous)"
                )
            offset = end
            if end > len(data):
                cut = number if cut is None else cut
            elif cut is None:
                fields[name] = data[start:end].view(dt).reshape(shape)
        if cut is not None:  # values cut by a kill: only the last entries may lack them
            continue
        entries.append(Entry(round_, direction, kind, peer, fields))
    if cut is not None and offset <= len(data):
        raise PrivzvError(
            f"transcript {str(values)!r}: line {cut}'s values lie beyond its end "
            "but later ones do not (not a run cut short)"
        )
    return Transcript(party, header["meta"], entries)


def _bytes(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype=np.uint8)


def _read(path: Path, read):
    try:
        return read(path)
    except OSError as exc:
        raise PrivzvError(
            f"transcript {str(path)!r}: cannot be read ({exc.strerror or type(exc).__name__})"
        ) from None


def _json_line(index: Path, line: str, number: int):
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        raise PrivzvError(f"transcript {str(index)!r}: line {number}: not JSON") from None


def _entry(index: Path, entry, number: int) -> tuple:
    """``(round, direction, kind, peer, [(name, dtype, shape, offset), ...])`` of one index line."""
    where = f"transcript {str(index)!r}: line {number}"
    if not (
        isinstance(entry, list)
        and len(entry) == 5
        and _count(entry[0])
        and entry[1] in DIRECTIONS
        and isinstance(entry[2], str)
        and isinstance(entry[3], str)
        and isinstance(entry[4], list)
    ):
        raise PrivzvError(f"{where}: not an entry [round, direction, kind, peer, fields]")
    spec = []
    for field in entry[4]:
        if not (
            isinstance(field, list)
            and len(field) == 4
            and isinstance(field[0], str)
            and isinstance(field[1], str)
            and isinstance(field[2], list)
            and all(_count(n) for n in field[2])
            and _count(field[3])
        ):
            raise PrivzvError(
                f"{where}: field {field!r}: not [name, dtype, shape of counts >= 0, offset >= 0]"
            )
        try:
            dt = np.dtype(field[1])
        except TypeError:
            dt = None
        if dt is None or dt.kind not in NUMERIC_KINDS or dt.hasobject:
            raise PrivzvError(
                f"{where}: field {field[0]!r}: dtype {field[1]!r}, allowed are "
                "numeric ones (bool, integer, float, complex)"
            )
        spec.append((field[0], dt, tuple(field[2]), field[3]))
    return int(entry[0]), entry[1], entry[2], entry[3], spec


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
