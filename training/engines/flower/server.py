"""The server's side of the Flower engine: the scheduler's engine calls as Flower messages.

Inside the ServerApp (``apps.main``) the scheduler runs unchanged; :class:`FlowerEngine` turns its
calls into messages to the device's SuperNode (``apps.handle`` answers them there):

    start(m, t, ids)  "query.send"     round t, the batch ids         -> reply: the uplink (send collects it)
    deliver(m, down)  "train.receive"  the downlink, carried by device m's next message
    abort(m)          "train.abort"    nothing, carried likewise
    embeddings(...)   "query.embed"    a row range of the test split  -> reply: h_m of those rows
    (setup)           "query.hello"    the run's resolved public config and sigma -> reply: the partition id
    state_dict()      "query.checkpoint"  a tag: the device saves its state in its own folder
    load_state_dict() "query.restore"  the tag: the device continues from its own saved state
    close()           "train.receive" / "train.abort" on their own: what no message carried yet

Every reply is accepted only from the node the message went to and only with a valid signature
under device m's own key (``codec.verify``; ``keys[m]``, shared with device m's process alone):
a local process that pulls device m's task from its SuperNode cannot answer it.

A missing, late, misdirected or unsigned reply is a runtime failure (``cliutil.Failed``, exit 1).
Each device has at most one message open and sees its messages in order; the scheduler starts
the rounds of other devices ahead (:attr:`FlowerEngine.lookahead`), so they compute meanwhile.
The serialised size of every message's content is counted (``wire``: up, down, control and per
message kind, ``"query.send"``, ``"query.send reply"``, ...), beside eq. (23)'s bytes.
"""

from __future__ import annotations

import json
import secrets
import time
import types

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.app import Message as FlowerMessage

from privzv.cliutil import Failed
from privzv.errors import PrivzvError
from privzv.training.engines.flower import codec, devicestate, waits

POLL_SECONDS = 0.1  # the longest pause between looks for replies that the SuperLink does not hold


class GridTransport:
    """Messages to SuperNodes through a ServerApp's ``grid`` (push, then poll for the replies); each
    content as it travels, packed (``codec.pack``)."""

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

    def push(self, node: int, kind: str, packed: RecordDict) -> str:
        (mid,) = self.grid.push_messages([FlowerMessage(packed, dst_node_id=node, message_type=kind)])
        self.sent[mid] = node
        return mid

    def wait(self, ids: list[str], what: str) -> dict[str, RecordDict]:
        """The replies' contents to message ``ids`` (packed, as they came), by id (Failed on an
        error or timeout)."""
        replies: dict[str, RecordDict] = {}
        deadline = time.monotonic() + self.timeout
        backoff = waits.Backoff(POLL_SECONDS)
        while len(replies) < len(ids):
            asked = time.monotonic()
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
                backoff.after(time.monotonic() - asked)
        return replies


class FlowerEngine:
    """The devices' part of each round, one device per node of ``transport`` (a
    :class:`GridTransport`, or any object with its ``nodes``, ``push`` and ``wait``, which carry
    packed contents); ``keys[m]``: device m's reply key (``codec.sign``).

    One Flower message per round: a downlink (or a refusal) is not sent on its own; it rides on
    the device's next message (its next round's request, an evaluation's ``query.embed``, or at
    :meth:`close` a ``train.receive`` / ``train.abort``), which the device applies first, as
    in-process. :meth:`start` sends a round's request before the scheduler waits for it
    (:attr:`lookahead`: the scheduler may start rounds of other devices ahead), so the devices
    of consecutive rounds compute concurrently; :meth:`send` collects the uplink."""

    def __init__(self, transport, config, keys: list[bytes]):
        if len(keys) != config.devices:
            raise PrivzvError(f"flower: {len(keys)} reply keys for {config.devices} devices")
        self.transport, self.config, self.keys = transport, config, keys
        self.count = config.devices
        self.lookahead = self.count - 1  # rounds the scheduler may start ahead (one per other device)
        self.devices = []  # no device lives in this process
        self.clocks = [types.SimpleNamespace(index=m, step=0) for m in range(self.count)]
        self.nodes: list[int] = []
        self.carried: dict[int, tuple[str, RecordDict]] = {}  # device -> its undelivered (kind, records)
        self.asked: dict[int, tuple[int, str]] = {}  # device -> (round, message id) of its open request
        self.failed = False  # a reply was missing or refused
        self.method = None
        self.wire = {"up": 0, "down": 0, "control": 0, "messages": 0, "kinds": {}}
        self.kinds: dict[str, str] = {}  # message id -> its kind, until its reply is counted
        self.tag = devicestate.FRESH  # the checkpoint whose state every device saved or resumed
        self.moved = False  # whether a round started since

    def _push(self, m: int, kind: str, content: RecordDict, counted: str = "control") -> str:
        """Push ``content`` (kind ``kind``) to device m, with the downlink or refusal it carries."""
        before, minus = self.carried.pop(m, None), 0
        if before is not None:
            carried, records = before
            self._count(_COUNTED[carried], codec.wire_bytes(codec.pack(records)), carried)
            minus = codec.wire_bytes(records)  # the carried records, counted apart
            for name, record in records.items():
                content[name] = record
            content[CARRIED] = ConfigRecord({"kind": carried})
        packed = codec.pack(content)
        self._count(counted, codec.wire_bytes(packed) - minus, kind)
        mid = self.transport.push(self.nodes[m], kind, packed)
        self.kinds[mid] = kind
        return mid

    def _wait(
        self, ids: list[str], what: str, devices: list[int], counted: str = "control"
    ) -> dict[str, RecordDict]:
        try:
            return self._accept(self._replies(ids, what), ids, what, devices, counted)
        except Failed:
            self.failed = True  # close() then sends nothing more
            raise

    def _replies(self, ids: list[str], what: str) -> dict[str, tuple[RecordDict, RecordDict]]:
        """The replies to ``ids``, by id: (its content unpacked, its content as it came, packed);
        Failed if one is not a packed record dict."""
        replies = {}
        for mid, packed in self.transport.wait(ids, what).items():
            try:
                replies[mid] = (codec.unpack(packed), packed)
            except PrivzvError as exc:
                raise Failed(f"{exc}: the reply to {what} refused") from None
        return replies

    def _accept(self, replies: dict, ids: list[str], what: str, devices: list[int], counted: str) -> dict:
        """The contents of ``replies`` (:meth:`_replies`) to ``ids`` (sent to ``devices``), each
        signed by its device, else refused; each counted as it came."""
        for mid, m in zip(ids, devices, strict=True):
            content, packed = replies[mid]
            if not codec.verify(self.keys[m], mid, content):
                raise Failed(
                    f"flower: the reply to {what} is not signed by device {m}'s key "
                    "(not from its own process): refused"
                )
            self._count(counted, codec.wire_bytes(packed), f"{self.kinds.pop(mid)} reply")
        return {mid: content for mid, (content, _) in replies.items()}

    def _count(self, key: str, size: int, kind: str) -> None:
        """Count a message of ``size`` serialised bytes (``codec.wire_bytes`` of what it carries,
        packed) under ``key`` (up, down, control) and its kind."""
        self.wire[key] += size
        self.wire["messages"] += 1
        per = self.wire["kinds"].setdefault(kind, {"messages": 0, "bytes": 0})
        per["messages"] += 1
        per["bytes"] += size

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
        replies = self._replies(ids, "hello")
        claimed = [int(replies[mid][0]["node"]["partition-id"]) for mid in ids]
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

    def start(self, m: int, round_: int, ids: torch.Tensor) -> None:
        """Send device m its request for round ``round_`` (batch ``ids``); :meth:`send` collects it."""
        content = RecordDict(
            {"round": ConfigRecord({"round": round_}), "batch": ArrayRecord({"ids": Array(ids.numpy())})}
        )
        self.asked[m] = (round_, self._push(m, "query.send", content))
        self.moved = True

    def send(self, m: int, round_: int, ids: torch.Tensor):
        if m not in self.asked:
            self.start(m, round_, ids)
        return self._collect(m)

    def _collect(self, m: int):
        """The uplink that answers device m's open request."""
        round_, mid = self.asked.pop(m)
        return codec.decode(self._wait([mid], f"round {round_} on device {m}", [m], counted="up")[mid])

    def deliver(self, m: int, down) -> None:
        self.carried[m] = (DELIVER, codec.encode(down))
        self.clocks[m].step += 1

    def abort(self, m: int) -> None:
        self.carried[m] = (ABORT, RecordDict({}))

    def embeddings(self, x_test, rows: slice) -> list[torch.Tensor]:
        """Every device's test embeddings, each message carrying the device's last downlink. The
        scheduler starts no round beyond an evaluation's (``Scheduler.run``)."""
        if self.asked:
            raise RuntimeError(f"flower: an evaluation with rounds in flight on devices {sorted(self.asked)}")
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
        """Per device, the step the server counts and the tag of the checkpoint whose state the
        device saved in its own state folder: a new tag once any round started since the last
        save (``query.checkpoint``, carrying the device's last downlink or refusal), all devices
        acknowledged before the server writes its checkpoint; the devices' state never comes here.
        The scheduler starts no round beyond a checkpoint's (``Scheduler.run``)."""
        if self.asked:
            raise RuntimeError(f"flower: a checkpoint with rounds in flight on devices {sorted(self.asked)}")
        if self.moved:
            tag = secrets.token_hex(8)
            ids = [
                self._push(m, SAVE, RecordDict({"checkpoint": ConfigRecord({"tag": tag, "keep": self.tag})}))
                for m in range(self.count)
            ]
            self._wait(ids, "the devices' checkpoints", list(range(self.count)))
            self.tag, self.moved = tag, False
        return [{"tag": self.tag, "step": clock.step} for clock in self.clocks]

    def load_state_dict(self, states) -> None:
        """Every device continues from its own state of the checkpoint's tag (``query.restore``)."""
        if (
            len(states) != self.count
            or not all(isinstance(s, dict) and isinstance(s.get("tag"), str) for s in states)
            or len({s["tag"] for s in states}) != 1
        ):
            raise PrivzvError("--resume: the checkpoint holds no Flower device tags (not a Flower run)")
        for clock, state in zip(self.clocks, states):
            clock.step = int(state["step"])
        self.tag = states[0]["tag"]
        ids = [
            self._push(m, RESTORE, RecordDict({"checkpoint": ConfigRecord({"tag": self.tag})}))
            for m in range(self.count)
        ]
        self._wait(ids, "the devices' restore", list(range(self.count)))

    def close(self) -> None:
        """Every downlink or refusal not yet carried, sent on its own (``train.receive`` /
        ``train.abort``) and acknowledged, all devices at once (after a failed reply: nothing)."""
        if self.failed:
            return
        devices = sorted(self.carried)
        ids = []
        for m in devices:
            kind, records = self.carried.pop(m)
            ids.append(self._push(m, kind, records, _COUNTED[kind]))
        self._wait(ids, "the last downlinks", devices)


DELIVER, ABORT = "train.receive", "train.abort"  # what a message may carry before its own request
SAVE, RESTORE = "query.checkpoint", "query.restore"  # a device saves / continues its own state
CARRIED = "carried"  # the record naming it
_COUNTED = {DELIVER: "down", ABORT: "control"}  # the wire count each goes to
