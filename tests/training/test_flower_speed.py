"""What makes a Flower round fast (issue 23 item 1), without processes: a pull that finds
nothing is held in the server until something is pushed (``waits.hold``, ``waits.after``), the
SuperNode's waits end at the executor's push (``waits.poll``), privzv's own polls do not sleep
after a held call (``waits.Backoff``), and a message's content travels as one packed record
(``codec.pack``): 3 Flower objects a message, each pushed and pulled with a request of its own.
The real-process runs are ``test_flower_e2e.py`` and ``benchmarks/bench_engines.py``."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict  # noqa: E402
from flwr.app import Message as FlowerMessage  # noqa: E402
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects  # noqa: E402

from privzv.cliutil import Failed  # noqa: E402
from privzv.errors import PrivzvError  # noqa: E402
from privzv.training.engines.flower import codec, waits  # noqa: E402
from privzv.training.engines.flower.server import GridTransport  # noqa: E402
from privzv.training.messages import Message  # noqa: E402

BOUND = 60  # seconds a test waits for what must come at once: only a failure reaches it


@pytest.fixture
def task(monkeypatch):
    """A Flower task's identity (Flower's messages need one), as ``pull_task_input`` sets it."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 9), ("_task_id", 2)):
        monkeypatch.setattr(TaskIdentity, name, value)


class Store:
    """A server's state with one pull (empty until :meth:`push`) and one push, as Flower's handlers."""

    def __init__(self):
        self.items: list[str] = []
        self.pulls = 0

    def module(self) -> types.ModuleType:
        module = types.ModuleType("handlers")
        module.pull = self.pull
        module.push = self.items.append
        return module

    def pull(self) -> list[str]:
        self.pulls += 1
        return list(self.items)


def _in_thread(call) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def test_a_held_pull_is_answered_when_a_push_comes_not_when_the_hold_ends():
    store = Store()
    module = store.module()
    waits.hold(module, "pull", lambda answer: not answer, seconds=600)
    waits.after(module, "push")
    thread, out = _in_thread(module.pull)
    deadline = time.monotonic() + BOUND
    while store.pulls < 1:  # the pull found nothing and waits
        assert time.monotonic() < deadline
        time.sleep(0.01)
    module.push("message")
    thread.join(BOUND)
    assert not thread.is_alive(), "the held pull did not end at the push"
    assert out == [["message"]] and store.pulls == 2  # asked once before the push, once after


def test_a_push_during_the_pull_itself_is_not_missed():
    """A push between the handler's look and the wait (another thread's) ends the wait at once."""
    store = Store()
    module = store.module()
    waits.after(module, "push")
    first = store.pull

    def racing() -> list[str]:
        answer = first()
        if store.pulls == 1:
            module.push("message")  # after this look found nothing, before the wait
        return answer

    module.pull = racing
    waits.hold(module, "pull", lambda answer: not answer, seconds=600)
    thread, out = _in_thread(module.pull)
    thread.join(BOUND)
    assert not thread.is_alive() and out == [["message"]] and store.pulls == 2


def test_a_pull_that_finds_nothing_is_answered_as_flower_answers_it_after_the_hold():
    store = Store()
    module = store.module()
    waits.hold(module, "pull", lambda answer: not answer, seconds=0.05)
    assert module.pull() == [] and store.pulls == 2  # looked again at the end of the hold


def test_the_supernodes_sleeps_end_at_the_executors_push():
    """``waits.poll``: the SuperNode's 3 s and 0.5 s sleeps end when the executor pushes (a
    counted change), also one that came before the sleep began; ``seconds`` bounds them."""
    node = types.ModuleType("supernode")
    waits.poll(node, 600)
    pushed = types.ModuleType("handlers")
    pushed.push_messages = lambda: None
    waits.after(pushed, "push_messages")
    thread, out = _in_thread(lambda: node.time.sleep(3))
    deadline = time.monotonic() + BOUND
    while thread.is_alive():
        assert time.monotonic() < deadline, "the sleep did not end at the push"
        pushed.push_messages()
        thread.join(0.05)
    pushed.push_messages()  # before the next sleep: it ends at once
    thread, out = _in_thread(lambda: node.time.sleep(3))
    thread.join(BOUND)
    assert not thread.is_alive()
    assert node.time.monotonic is time.monotonic  # the rest of ``time`` as before
    waits.poll(node, 0.01)
    node.time.sleep(600)  # bounded by ``seconds``: returns


def test_a_client_pauses_only_after_a_call_the_server_did_not_hold(monkeypatch):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    backoff = waits.Backoff(0.01)
    for took in (0.0, 0.0, 0.0, 0.0, waits.HOLD, 0.0):
        backoff.after(took)
    assert slept == [0.002, 0.004, 0.008, 0.01, 0.002]  # none after the held call, then short again


def test_the_servers_hold_flowers_pulls_and_count_its_pushes():
    """Every handler named in ``waits.SUPERLINK`` / ``waits.SUPERNODE`` is Flower's (1.41)."""
    import importlib

    for path, held, pushes in waits.SUPERLINK + waits.SUPERNODE:
        module = importlib.import_module(path)
        for name in [name for name, _ in held] + pushes:
            assert callable(getattr(module, name)), (path, name)


def _uplink() -> RecordDict:
    msg = Message(3, "device0", "server", "up", {"ids": torch.arange(32), "h+": torch.randn(32, 16)})
    return codec.sign(b"\x01" * 32, "task", codec.encode(msg))


def test_a_packed_message_is_three_objects_and_unpacks_to_the_same_records(task):
    content = _uplink()
    packed = codec.pack(content)
    assert len(get_all_nested_objects(FlowerMessage(packed, dst_node_id=1, message_type="query.send"))) == 3
    assert len(get_all_nested_objects(FlowerMessage(content, dst_node_id=1, message_type="query.send"))) > 3
    back = codec.unpack(packed)
    assert codec.digest(back) == codec.digest(content) and codec.verify(b"\x01" * 32, "task", back)
    assert codec.wire_bytes(packed) > codec.wire_bytes(content)  # what the wire count reports


@pytest.mark.parametrize(
    "content",
    [
        RecordDict({}),
        RecordDict({codec.PACKED: ConfigRecord({"objects": [b"not an object"]})}),
        RecordDict({codec.PACKED: ConfigRecord({"objects": []})}),
        RecordDict(
            {codec.PACKED: ConfigRecord({"objects": codec.pack(_uplink())[codec.PACKED]["objects"][:1]})}
        ),
    ],
    ids=["no record", "not an object", "no object", "a record dict without its records"],
)
def test_a_content_that_is_not_a_packed_record_dict_is_refused(content):
    with pytest.raises(PrivzvError, match="not a packed record dict"):
        codec.unpack(content)


class Grid:
    """A ServerApp grid whose one reply is ``content`` (not packed)."""

    def __init__(self, content: RecordDict):
        self.content = content

    def push_messages(self, messages):
        (self.message,) = messages
        self.message.metadata.__dict__["_message_id"] = "m1"
        return ["m1"]

    def pull_messages(self, ids):
        reply = FlowerMessage(self.content, reply_to=self.message)
        reply.metadata.__dict__["_src_node_id"] = 5
        return [reply]


def test_a_reply_that_is_not_packed_stops_the_run_in_one_line(task):
    transport = GridTransport(Grid(_uplink()), timeout=5)
    mid = transport.push(5, "query.send", RecordDict({}))
    with pytest.raises(Failed, match="not a packed record dict.*the reply to round 1 refused"):
        transport.wait([mid], "round 1")


def test_a_device_writes_its_transcript_before_its_reply_and_fsyncs_it_after(tmp_path, monkeypatch):
    """``apps.handle`` in the executor: the message's entries are in the device's files when the
    reply leaves (a killed device process loses none of them), their fsync comes after the reply
    (``DeviceParty.flush``, which ``executor.run_task`` calls once the reply is pushed)."""
    import json
    import os

    from privzv.training import seeds, transcript
    from privzv.training.config import TrainConfig
    from privzv.training.engines.flower import apps
    from privzv.training.messages import device_name

    (tmp_path / apps.NOISE_KEY).write_text(seeds.key(7, "device", 0).hex())
    node, live = {"partition-id": 0, "folder": str(tmp_path)}, {}
    config = TrainConfig(dataset="digits", devices=2)
    hello = RecordDict({"config": ConfigRecord({"json": json.dumps(config.to_dict()), "sigma": 1.5})})
    apps.handle("query.hello", hello, node, RecordDict(), live)
    synced = []
    monkeypatch.setattr(os, "fsync", synced.append)
    ask = RecordDict(
        {"round": ConfigRecord({"round": 0}), "batch": ArrayRecord({"ids": Array(np.arange(4))})}
    )
    apps.handle("query.send", ask, node, RecordDict(), live)
    assert synced == []
    kinds = [e.kind for e in transcript.read_folder(tmp_path, device_name(0)).entries]
    assert "batch" in kinds and len(kinds) >= 2  # the batch and the uplink, on disk already
    live[0].flush()
    assert len(synced) == 2  # the data and the index file


def test_the_superlinks_one_api_middleware_runs_for_that_apis_paths_only():
    """``control.scoped``: a layer of :func:`control._scopes` sees its API's requests (node
    authentication every Fleet request) and no other; the rest of Flower's list is unchanged."""
    import asyncio

    import flwr.superlink.main as link
    from flwr.superlink.routers.fleet.node_auth import NodeAuthMiddleware
    from starlette.middleware import Middleware

    from privzv.training.engines.flower import control

    seen = []

    class Layer:
        def __init__(self, app, name):
            self.app, self.name = app, name

        async def __call__(self, scope, receive, send):
            seen.append((self.name, scope.get("path")))
            await self.app(scope, receive, send)

    async def app(scope, receive, send):
        seen.append(("app", scope.get("path")))

    layer = control.Scoped(app, "/v1/fleet/", Middleware(Layer, name="fleet"))
    for scope in (
        {"type": "http", "path": "/v1/fleet/pull-messages"},
        {"type": "http", "path": "/v1/runtime/pull-messages"},
        {"type": "lifespan"},
    ):
        asyncio.run(layer(scope, None, None))
    assert seen == [
        ("fleet", "/v1/fleet/pull-messages"),
        ("app", "/v1/fleet/pull-messages"),
        ("app", "/v1/runtime/pull-messages"),
        ("fleet", None),
        ("app", None),
    ]
    flowers = link._get_middleware()
    ours = control.scoped(flowers)
    assert [m.kwargs.get("layer", m).cls for m in ours] == [m.cls for m in flowers]  # same layers, same order
    (auth,) = [m for m in ours if m.kwargs.get("layer", m).cls is NodeAuthMiddleware]
    assert auth.cls is control.Scoped and auth.kwargs["prefix"] == "/v1/fleet/"
