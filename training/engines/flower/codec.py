"""privzv ``Message`` <-> Flower ``RecordDict`` and the bytes a Flower message puts on the wire.

A privzv message (round, sender, receiver, kind, named tensors) becomes two records: ``meta``
(a ``ConfigRecord`` of the four header fields) and ``tensors`` (an ``ArrayRecord``, one
``Array`` per tensor, dtype and shape kept). Decoding gives back an equal Message, so the
method on the other side receives exactly what was sent.

:func:`wire_bytes` is what Flower (1.41) pushes for a message: every object of its tree
(message, record dict, records, arrays) deflated, headers included; eq. (23) counts only the
tensors' bytes (``Message.nbytes``).
"""
from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from privzv.training.messages import Message

META, TENSORS = "meta", "tensors"


def encode(msg: Message) -> RecordDict:
    """The records of ``msg``."""
    meta = ConfigRecord({"round": int(msg.round), "sender": msg.sender, "receiver": msg.receiver,
                         "kind": msg.kind})
    arrays = ArrayRecord({name: Array(np.ascontiguousarray(t.detach().cpu().numpy()))
                          for name, t in msg.tensors.items()})
    return RecordDict({META: meta, TENSORS: arrays})


def decode(content: RecordDict) -> Message:
    """The privzv Message of records made by :func:`encode`."""
    meta = content[META]
    tensors = {name: torch.from_numpy(np.array(arr.numpy(), copy=True))
               for name, arr in content[TENSORS].items()}
    return Message(int(meta["round"]), str(meta["sender"]), str(meta["receiver"]), str(meta["kind"]),
                   tensors)


def wire_bytes(obj) -> int:
    """Bytes Flower serialises for ``obj`` (a Message or RecordDict): the sum over the objects of
    its tree of their deflated size (each object is pushed once, by id)."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return sum(len(o.deflate()) for o in get_all_nested_objects(obj).values())
