"""The server's side of the Flower engine: the scheduler's engine calls as Flower messages.

Inside the ServerApp (``apps.main``) the scheduler runs unchanged; :class:`FlowerEngine` turns its
calls into messages to the device's SuperNode (``apps.handle`` answers them there):

    send(m, t, ids)   "query.send"     round t, the batch ids         -> reply: the uplink
    deliver(m, down)  "train.receive"  the downlink                   -> reply: empty (ack)
    abort(m)          "train.abort"    nothing                        -> reply: empty (ack)
    embeddings(...)   "query.embed"    a row range of the test split  -> reply: h_m of those rows
    (setup)           "query.hello"    the run's resolved public config and sigma -> reply: the partition id

Every reply is accepted only from the node the message went to and only with a valid signature
under device m's own key (``codec.verify``; ``keys[m]``, shared with device m's process alone):
a local process that pulls device m's task from its SuperNode cannot answer it.

A missing, late, misdirected or unsigned reply is a runtime failure (``cliutil.Failed``, exit 1).
A delivery's acknowledgement is collected before the next message to the same device (or an
evaluation), so another device's round runs meanwhile; each device sees its messages in order.
The serialised size of every message's content is counted (``wire``: up, down, control and per
message kind, ``"query.send"``, ``"query.send reply"``, ...), beside eq. (23)'s bytes.
"""

from __future__ import annotations

import json
import time
import types

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.app import Message as FlowerMessage

from privzv.cliutil import Failed
from privzv.errors import PrivzvError
from privzv.training.engines.flower import codec

FIRST_POLL, POLL_SECONDS = 0.002, 0.1  # look for replies after 2 ms, doubling to 0.1 s


class GridTransport:
    """Messages to SuperNodes through a ServerApp's ``grid`` (push, then poll for the replies)."""

    def __init__(self, grid, timeout: float):
        self.grid, self.timeout = grid, timeout
        self.sent: dict[str, int] = {}  # message id -> the node it went to

    def nodes(self, count: int) -> list[int]:
        """The node ids of the ``count`` SuperNodes, once that many are connected."""
        deadline = time.monotonic() + self.timeout
        while len(nodes := sorted(self.grid.get_node_ids())) < count:
            if time.monotonic() > deadline:
                raise Failed(
                    f"flower: {len(nodes)} SuperNodes connected within {self.timeout:g} s,"
                    f" the run needs {count} (one per device)"
                )
            time.sleep(0.2)
        if len(nodes) > count:
            raise PrivzvError(f"flower: {len(nodes)} SuperNodes connected, the run has {count} devices")
        return nodes

    def push(self, node: int, kind: str, content: RecordDict) -> str:
        (mid,) = self.grid.push_messages([FlowerMessage(content, dst_node_id=node, message_type=kind)])
        self.sent[mid] = node
        return mid

    def wait(self, ids: list[str], what: str) -> dict[str, RecordDict]:
        """The replies' contents to message ``ids``, by id (PrivzvError on an error or timeout)."""
        replies: dict[str, RecordDict] = {}
        deadline = time.monotonic() + self.timeout
        pause = FIRST_POLL
        while len(replies) < len(ids):
            for reply in self.grid.pull_messages([i for i in ids if i not in replies]):
                mid = reply.metadata.reply_to_message_id
                if mid not in ids or reply.metadata.src_node_id != self.sent.get(mid):
                    raise Failed(
                        f"flower: a reply to {what} from node {reply.metadata.src_node_id},"
                        " not the node the message went to: refused"
                    )
                if reply.has_error():
                    raise Failed(f"flower: {what} failed on a device: {reply.error.reason}")
                replies[mid] = reply.content
                del self.sent[mid]
            if len(replies) < len(ids):
                if time.monotonic() > deadline:
                    raise Failed(f"flower: no reply to {what} within {self.timeout:g} s")
                time.sleep(pause)
                pause = min(2 * pause, POLL_SECONDS)
        return replies


class FlowerEngine:
    """The devices' part of each round, one device per node of ``transport`` (a
    :class:`GridTransport`, or any object with its ``nodes``, ``push`` and ``wait``); ``keys[m]``:
    device m's reply key (``codec.sign``)."""

    def __init__(self, transport, config, keys: list[bytes]):
        if len(keys) != config.devices:
            raise PrivzvError(f"flower: {len(keys)} reply keys for {config.devices} devices")
        self.transport, self.config, self.keys = transport, config, keys
        self.count = config.devices
        self.devices = []  # no device lives in this process
        self.clocks = [types.SimpleNamespace(index=m, step=0) for m in range(self.count)]
        self.nodes: list[int] = []
        self.acks: dict[int, str] = {}  # device -> id of its unacknowledged delivery
        self.method = None
        self.wire = {"up": 0, "down": 0, "control": 0, "messages": 0, "kinds": {}}
        self.kinds: dict[str, str] = {}  # message id -> its kind, until its reply is counted

    def _push(self, m: int, kind: str, content: RecordDict, counted: str = "control") -> str:
        self._count(counted, content, kind)
        mid = self.transport.push(self.nodes[m], kind, content)
        self.kinds[mid] = kind
        return mid

    def _wait(
        self, ids: list[str], what: str, devices: list[int], counted: str = "control"
    ) -> dict[str, RecordDict]:
        return self._accept(self.transport.wait(ids, what), ids, what, devices, counted)

    def _accept(self, replies: dict, ids: list[str], what: str, devices: list[int], counted: str) -> dict:
        """``replies`` to ``ids`` (sent to ``devices``), each signed by its device, else refused."""
        for mid, m in zip(ids, devices, strict=True):
            if not codec.verify(self.keys[m], mid, replies[mid]):
                raise Failed(
                    f"flower: the reply to {what} is not signed by device {m}'s key "
                    "(not from its own process): refused"
                )
            self._count(counted, replies[mid], f"{self.kinds.pop(mid)} reply")
        return replies

    def _count(self, key: str, content: RecordDict, kind: str) -> None:
        """Count ``content``'s serialised bytes under ``key`` (up, down, control) and its kind."""
        size = codec.wire_bytes(content)
        self.wire[key] += size
        self.wire["messages"] += 1
        per = self.wire["kinds"].setdefault(kind, {"messages": 0, "bytes": 0})
        per["messages"] += 1
        per["bytes"] += size

    def _settle(self, m: int) -> None:
        """Collect device m's acknowledgement of its last delivery."""
        if m in self.acks:
            self._wait([self.acks.pop(m)], f"the downlink to device {m}", [m])

    # the engine -------------------------------------------------------------------------------
    def setup(self, method, server, noter) -> None:
        """Find the device of every SuperNode (``query.hello``), then the method's server state."""
        self.method = method
        self.nodes = self.transport.nodes(self.count)
        hello = RecordDict(
            {
                "config": ConfigRecord(
                    {"json": json.dumps(self.config.to_dict()), "sigma": float(method.sigma)}
                )
            }
        )
        ids = [self._push(i, "query.hello", hello) for i in range(self.count)]
        replies = self.transport.wait(ids, "hello")
        claimed = [int(replies[mid]["node"]["partition-id"]) for mid in ids]
        if sorted(claimed) != list(range(self.count)):
            raise PrivzvError(
                f"flower: SuperNode partition ids {sorted(claimed)}: need 0..{self.count - 1}"
                " (one SuperNode per device, --node-config partition-id=M)"
            )
        self._accept(replies, ids, "hello", claimed, "control")  # signed by the device it claims
        order = {m: self.nodes[i] for i, m in enumerate(claimed)}
        self.nodes = [order[m] for m in range(self.count)]
        method.setup([], server)

    def clock(self, m: int):
        return self.clocks[m]

    def send(self, m: int, round_: int, ids: torch.Tensor):
        self._settle(m)
        content = RecordDict(
            {"round": ConfigRecord({"round": round_}), "batch": ArrayRecord({"ids": Array(ids.numpy())})}
        )
        mid = self._push(m, "query.send", content)
        return codec.decode(self._wait([mid], f"round {round_} on device {m}", [m], counted="up")[mid])

    def deliver(self, m: int, down) -> None:
        self.acks[m] = self._push(m, "train.receive", codec.encode(down), counted="down")
        self.clocks[m].step += 1

    def abort(self, m: int) -> None:
        self.acks[m] = self._push(m, "train.abort", RecordDict({}))

    def embeddings(self, x_test, rows: slice) -> list[torch.Tensor]:
        for m in range(self.count):
            self._settle(m)
        ids = [
            self._push(
                m, "query.embed", RecordDict({"rows": ConfigRecord({"start": rows.start, "stop": rows.stop})})
            )
            for m in range(self.count)
        ]
        replies = self._wait(ids, "the test embeddings", list(range(self.count)))
        return [torch.from_numpy(replies[mid]["h"]["h"].numpy().copy()) for mid in ids]

    def models(self) -> list:
        return []

    def state_dict(self) -> list[dict]:
        """Nothing: the devices' state stays on the devices (a Flower run is not resumable)."""
        return []

    def load_state_dict(self, states) -> None:
        raise PrivzvError("--resume: a run of the Flower engine cannot be resumed")

    def close(self) -> None:
        """Nothing to wait for: every evaluation, the last one included, collected the acks."""
        self.acks.clear()
