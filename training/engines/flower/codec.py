"""privzv ``Message`` <-> Flower ``RecordDict`` and the bytes a Flower message puts on the wire.

A privzv message (round, sender, receiver, kind, named tensors) becomes two records: ``meta``
(a ``ConfigRecord`` of the four header fields) and ``tensors`` (an ``ArrayRecord``, one
``Array`` per tensor, dtype and shape kept). Decoding gives back an equal Message, so the
method on the other side receives exactly what was sent.

:func:`wire_bytes` is what Flower (1.41) pushes for a message: every object of its tree
(message, record dict, records, arrays) deflated, headers included; eq. (23) counts only the
tensors' bytes (``Message.nbytes``).

:func:`sign` / :func:`verify`: a device's reply carries an HMAC-SHA256 (record ``auth``) under
the device's own per-run key, over the id of the task it answers and a digest of its records,
so the server accepts a reply only from the process that holds device m's key (not from any
local process that pulled device m's task from its SuperNode).
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from privzv.training.messages import Message

META, TENSORS, AUTH = "meta", "tensors", "auth"


def encode(msg: Message) -> RecordDict:
    """The records of ``msg``."""
    meta = ConfigRecord(
        {"round": int(msg.round), "sender": msg.sender, "receiver": msg.receiver, "kind": msg.kind}
    )
    arrays = ArrayRecord(
        {name: Array(np.ascontiguousarray(t.detach().cpu().numpy())) for name, t in msg.tensors.items()}
    )
    return RecordDict({META: meta, TENSORS: arrays})


def decode(content: RecordDict) -> Message:
    """The privzv Message of records made by :func:`encode`."""
    meta = content[META]
    tensors = {
        name: torch.from_numpy(np.array(arr.numpy(), copy=True)) for name, arr in content[TENSORS].items()
    }
    return Message(int(meta["round"]), str(meta["sender"]), str(meta["receiver"]), str(meta["kind"]), tensors)


def wire_bytes(obj) -> int:
    """Bytes Flower serialises for ``obj`` (a Message or RecordDict): the sum over the objects of
    its tree of their deflated size (each object is pushed once, by id)."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return sum(len(o.deflate()) for o in get_all_nested_objects(obj).values())


def digest(content: RecordDict) -> bytes:
    """SHA-256 of every record of ``content`` but ``auth``: names, dtypes, shapes, bytes, values
    (each field length-prefixed, so no two contents share an encoding)."""
    h = hashlib.sha256()

    def field(value) -> None:
        b = value if isinstance(value, bytes) else repr(value).encode()
        h.update(len(b).to_bytes(8, "little") + b)

    for name in sorted(content.keys()):
        if name == AUTH:
            continue
        record = content[name]
        field((name, type(record).__name__))
        for key in sorted(record.keys()):
            value = record[key]
            if isinstance(value, Array):
                field((key, value.dtype, tuple(value.shape), value.stype))
                field(value.data)
            else:
                field((key, value))
    return h.digest()


def _mac(key: bytes, reply_to: str, content: RecordDict) -> str:
    return hmac.new(key, reply_to.encode() + digest(content), hashlib.sha256).hexdigest()


def sign(key: bytes, reply_to: str, content: RecordDict) -> RecordDict:
    """``content`` with its ``auth`` record: the HMAC of (the answered task's id, its records)."""
    content[AUTH] = ConfigRecord({"mac": _mac(key, reply_to, content)})
    return content


def verify(key: bytes, reply_to: str, content: RecordDict) -> bool:
    """Whether ``content`` carries a valid ``auth`` record under ``key`` for the task ``reply_to``."""
    if AUTH not in content or not isinstance(content[AUTH], ConfigRecord):
        return False
    return hmac.compare_digest(str(content[AUTH].get("mac", "")), _mac(key, reply_to, content))
