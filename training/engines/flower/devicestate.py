"""A Flower device's own checkpoints, in its own state folder (node config ``state``; default
``FOLDER/state``), written and read by that device's process only; nothing of them is sent.

``state-TAG.pt`` (0600, written atomically and fsync'd): the device's model, step t_m, noise
    generator position, its method state and its transcript's sizes at the server's checkpoint
    TAG (``server.FlowerEngine.state_dict`` names it; the server keeps the tag, never the state).
``deviceM.jsonl``, ``deviceM.bin``: the device's transcript up to its last saved sizes, appended at
    each save; a resumed device continues its transcript from this copy (its live transcript is
    in its run's work folder, which does not outlive the run).

A save keeps the state of the server's last committed checkpoint beside the new one (the server
writes its checkpoint after every device saved): a kill between the two leaves the server's
checkpoint and every device's state of the same round.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path

import torch

from privzv.errors import PrivzvError
from privzv.training.messages import device_name
from privzv.training.run_folder import PRIVATE, atomic_write
from privzv.training.transcript import DATA, INDEX

TAG = re.compile(r"[0-9a-f]{16}")  # ``secrets.token_hex(8)``: a file name part, never a path
FRESH = ""  # the tag of a device as ``query.hello`` built it (a run's round-0 checkpoint)


def check_tag(tag: str) -> str:
    """``tag`` if it is a checkpoint tag (or :data:`FRESH`), else PrivzvError (a tag names a file)."""
    if tag != FRESH and not TAG.fullmatch(tag):
        raise PrivzvError(f"flower: checkpoint tag {tag[:40]!r}: 16 lowercase hex digits")
    return tag


def in_run(out: Path, m: int) -> Path:
    """Device m's state folder in the run folder ``out``, as the local launcher gives it (it
    outlives the run's work folder, for ``--resume``)."""
    return out / PRIVATE / device_name(m) / "flower"


def path(folder: Path, tag: str) -> Path:
    return folder / f"state-{check_tag(tag)}.pt"


def make_folder(folder: Path) -> None:
    """``folder`` and its missing parents, each mode 0700."""
    if not folder.is_dir():
        make_folder(folder.parent)
        folder.mkdir(mode=0o700, exist_ok=True)


def write(folder: Path, tag: str, state: dict, keep: str) -> None:
    """Save ``state`` as checkpoint ``tag``; then drop every other saved state but ``keep``'s."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(path(folder, tag), lambda fh: fh.write(buffer.getvalue()), private=True)
    drop_all_but(folder, {tag, check_tag(keep)})


def read(folder: Path, tag: str) -> dict:
    """The state saved as checkpoint ``tag`` (PrivzvError if this device has none)."""
    file = path(folder, tag)
    try:
        return torch.load(io.BytesIO(file.read_bytes()), weights_only=True)
    except OSError as exc:
        raise PrivzvError(
            f"flower: {str(file)!r}: the device's state of checkpoint {tag} ({exc.strerror})"
        ) from None
    except Exception as exc:  # a truncated or foreign file: torch raises many kinds
        raise PrivzvError(f"flower: {str(file)!r}: corrupt ({type(exc).__name__})") from None


def drop_all_but(folder: Path, tags: set) -> None:
    for old in folder.glob("state-*.pt"):
        if old.name not in {f"state-{t}.pt" for t in tags}:
            old.unlink()


def mirror(live: Path, folder: Path, party: str, done: list, sizes: list) -> None:
    """Append the bytes of ``party``'s live transcript files (in ``live``) from ``done`` to
    ``sizes`` ([index, data] bytes) to their copies in ``folder`` (cut back to ``done`` first:
    whatever a save that was never committed appended), fsync'd."""
    for suffix, start, stop in zip((INDEX, DATA), done, sizes):
        copy = folder / f"{party}{suffix}"
        fd = os.open(copy, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+b") as out, open(live / f"{party}{suffix}", "rb") as src:
            out.truncate(start)
            out.seek(start)
            src.seek(start)
            out.write(src.read(stop - start))
            out.flush()
            os.fsync(out.fileno())


def copy_back(folder: Path, live: Path, party: str, sizes: list) -> None:
    """``party``'s transcript files in ``live`` replaced by the first ``sizes`` bytes of the copies
    in ``folder``; PrivzvError when a copy is shorter."""
    for suffix, size in zip((INDEX, DATA), sizes):
        copy, target = folder / f"{party}{suffix}", live / f"{party}{suffix}"
        if not copy.is_file() or copy.stat().st_size < size:
            raise PrivzvError(
                f"flower: {str(copy)!r}: the device's transcript copy is shorter than its saved "
                f"state's {size} bytes"
            )
        with open(copy, "rb") as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
            out.truncate(size)
