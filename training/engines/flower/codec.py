"""privzv ``Message`` <-> Flower ``RecordDict`` and the bytes a Flower message puts on the wire.

A privzv message (round, sender, receiver, kind, named tensors) becomes two records: ``meta``
(a ``ConfigRecord`` of the four header fields) and ``tensors`` (an ``ArrayRecord``, one
``Array`` per tensor, dtype and shape kept). Decoding gives back an equal Message, so the
method on the other side receives exactly what was sent.

:func:`pack` / :func:`unpack`: what a Flower message carries is that content packed into one
record (:data:`PACKED`). Flower 1.41 pushes and pulls every object of a message's tree (message,
record dict, each record, each array and each of its chunks) with an HTTP request of its own, on
each of a message's three legs (between ServerApp, SuperLink, SuperNode and executor): a DPZV
uplink was 11 objects, a packed message is 3.

:func:`wire_bytes` is what Flower (1.41) pushes for a record dict or message: every object of its
tree deflated, headers included; eq. (23) counts only the tensors' bytes (``Message.nbytes``).

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
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
    get_object_id,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents, validate_object_content

from privzv.errors import PrivzvError
from privzv.training.messages import Message

META, TENSORS, AUTH = "meta", "tensors", "auth"
PACKED = "packed"  # the one record of a packed content: its objects, deflated, the record dict's first


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


def pack(content: RecordDict) -> RecordDict:
    """``content`` as one record: the deflated objects of its tree (Flower's own serialisation,
    the record dict first) in the list ``objects`` of the ``ConfigRecord`` :data:`PACKED`."""
    with no_object_id_recompute():  # each object's id computed once, not once per ancestor
        *children, root = [o.deflate() for o in get_all_nested_objects(content).values()]  # root last
    return RecordDict({PACKED: ConfigRecord({"objects": [root, *children]})})


def unpack(content: RecordDict) -> RecordDict:
    """The record dict that :func:`pack` packed into ``content``, each object checked by
    Flower's own rules and its id (the SHA-256 of its bytes); PrivzvError if it is not one."""
    try:
        blobs = list(content[PACKED]["objects"])
        for blob in blobs:
            validate_object_content(blob)
        unpacked = inflate_object_from_contents(get_object_id(blobs[0]), {get_object_id(b): b for b in blobs})
    except Exception as exc:  # noqa: BLE001 - whatever a malformed content raises in Flower's parsers
        raise PrivzvError(
            f"flower: a message whose content is not a packed record dict ({type(exc).__name__})"
        ) from None
    if not isinstance(unpacked, RecordDict):
        raise PrivzvError(f"flower: a packed {type(unpacked).__name__}, not a record dict")
    return unpacked


def wire_bytes(obj) -> int:
    """Bytes Flower serialises for ``obj`` (a Message or RecordDict): the sum over the objects of
    its tree of their deflated size (each object is pushed once, by id)."""
    with no_object_id_recompute():
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
