"""What makes a Flower round fast (issue 23 item 1), without processes: a SuperNode answers its
device's task in the step that stored it, in its own process, through its Runtime API's handlers
called directly (``executor.in_node``), a pull that finds nothing is held in the server until
something is pushed (``waits.hold``, ``waits.after``), the SuperNode's sleeps are capped
(``waits.poll``), privzv's own polls do not sleep after a held call (``waits.Backoff``), and a
message's content travels as one packed record (``codec.pack``): 3 Flower objects a message,
each pushed and pulled with a request of its own.
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
        self.changes = waits.Changes()
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
    waits.hold(module, "pull", lambda answer: not answer, store.changes, seconds=600)
    waits.after(module, "push", store.changes)
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
    waits.after(module, "push", store.changes)
    first = store.pull

    def racing() -> list[str]:
        answer = first()
        if store.pulls == 1:
            module.push("message")  # after this look found nothing, before the wait
        return answer

    module.pull = racing
    waits.hold(module, "pull", lambda answer: not answer, store.changes, seconds=600)
    thread, out = _in_thread(module.pull)
    thread.join(BOUND)
    assert not thread.is_alive() and out == [["message"]] and store.pulls == 2


def test_a_pull_that_finds_nothing_is_answered_as_flower_answers_it_after_the_hold():
    store = Store()
    module = store.module()
    waits.hold(module, "pull", lambda answer: not answer, store.changes, seconds=0.05)
    assert module.pull() == [] and store.pulls == 2  # looked again at the end of the hold


def test_the_supernodes_sleeps_are_capped():
    """``waits.poll``: the SuperNode's 3 s sleep after a pull that found nothing (its pull is held
    at the SuperLink already) lasts at most ``seconds``; the rest of ``time`` as before."""
    node = types.ModuleType("supernode")
    waits.poll(node, 0.01)
    thread, _ = _in_thread(lambda: node.time.sleep(600))
    thread.join(BOUND)
    assert not thread.is_alive()
    assert node.time.monotonic is time.monotonic


def test_a_client_pauses_only_after_a_call_the_server_did_not_hold(monkeypatch):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    backoff = waits.Backoff(0.01)
    for took in (0.0, 0.0, 0.0, 0.0, waits.HOLD, 0.0):
        backoff.after(took)
    assert slept == [0.002, 0.004, 0.008, 0.01, 0.002]  # none after the held call, then short again


def test_the_servers_hold_flowers_pulls_and_count_its_pushes():
    """Every handler named in ``waits.SUPERLINK`` is Flower's (1.41), and every held pull waits on
    a kind of push that some handler counts (none waits out its hold for nothing)."""
    import importlib

    counted = set()
    for path, held, pushes in waits.SUPERLINK:
        module = importlib.import_module(path)
        for name in [name for name, *_ in held + pushes]:
            assert callable(getattr(module, name)), (path, name)
        counted |= {id(changes) for _, changes, _ in pushes}
    assert {id(changes) for _, held, _ in waits.SUPERLINK for _, _, changes, _ in held} <= counted


def test_a_held_pull_wakes_only_for_the_pushes_that_may_answer_it():
    """In the SuperLink a SuperNode's held pull for messages wakes for the ServerApp's pushed
    messages only, the ServerApp's for the SuperNodes' (not for each of their objects, nor for
    its own pushes), a pull for an object for pushed objects, a wait for a task for a started run
    only: a push no longer reruns every held request."""
    wakes: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for path, held, _ in waits.SUPERLINK:
        for name, _, changes, _ in held:
            wakes[(path.rsplit(".", 1)[1], name)] = {
                (p.rsplit(".", 1)[1], push)
                for p, _, counted in waits.SUPERLINK
                for push, c, _ in counted
                if c is changes
            }
    assert wakes == {
        ("fleet_handlers", "pull_messages"): {("runtime_handlers", "push_messages")},
        ("fleet_handlers", "pull_object"): {
            ("fleet_handlers", "push_object"),
            ("runtime_handlers", "push_object"),
        },
        ("runtime_handlers", "pull_messages"): {("fleet_handlers", "push_messages")},
        ("runtime_handlers", "pull_object"): {
            ("fleet_handlers", "push_object"),
            ("runtime_handlers", "push_object"),
        },
        ("runtime_handlers", "acquire_task"): {("control_handlers", "start_run")},
    }


def test_a_supernodes_held_pull_wakes_only_for_a_message_to_that_node():
    """``waits.SUPERLINK``'s keys: the ServerApp's push of a message for node 2 leaves node 1's
    held pull waiting (its handler is not run again), and a push for node 1 answers it at once;
    the key comes from the request, whether Flower's router passes it by position or by name."""
    from flwr.proto.fleet_pb2 import PullMessagesRequest
    from flwr.proto.message_pb2 import Message as ProtoMessage
    from flwr.proto.node_pb2 import Node
    from flwr.proto.runtime_pb2 import PushAppMessagesRequest

    def entry(module: str, column: int, name: str):
        (found,) = [
            e
            for path, *lists in waits.SUPERLINK
            if path.endswith(module)
            for e in lists[column]
            if e[0] == name
        ]
        return found

    fleet_pull, server_push = (
        entry("fleet_handlers", 0, "pull_messages"),
        entry("runtime_handlers", 1, "push_messages"),
    )
    _, _, changes, key = fleet_pull
    assert changes is server_push[1]
    store, queued = Store(), {1: [], 2: []}
    module = store.module()
    store.changes = changes = waits.Changes()

    def pull(request, state=None, store_=None):
        store.pulls += 1
        return list(queued[request.node.node_id])

    def push(request, state=None, task=None):
        for m in request.messages_list:
            queued[m.metadata.dst_node_id].append(m.metadata.message_id)

    module.pull, module.push = pull, push
    waits.hold(module, "pull", lambda answer: not answer, changes, seconds=600, key=key)
    waits.after(module, "push", changes, server_push[2])

    def to(node: int, name: str) -> PushAppMessagesRequest:
        message = ProtoMessage()
        message.metadata.dst_node_id, message.metadata.message_id = node, name
        return PushAppMessagesRequest(messages_list=[message])

    thread, out = _in_thread(lambda: module.pull(request=PullMessagesRequest(node=Node(node_id=1))))
    deadline = time.monotonic() + BOUND
    while store.pulls < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    module.push(to(2, "for two"), None, None)
    time.sleep(0.2)  # long enough for a wrongly woken pull to run its handler again
    assert store.pulls == 1 and thread.is_alive()
    module.push(to(1, "for one"), None, None)
    thread.join(BOUND)
    assert not thread.is_alive() and out == [["for one"]] and store.pulls == 2


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
    from privzv.training.config import TrainConfig
    from privzv.training.engines.flower.server import FlowerEngine

    transport = GridTransport(Grid(_uplink()), timeout=5)
    engine = FlowerEngine(transport, TrainConfig(dataset="digits", devices=1), [b"\x01" * 32])
    mid = transport.push(5, "query.send", codec.pack(RecordDict({})))
    with pytest.raises(Failed, match="not a packed record dict.*the reply to round 1 refused"):
        engine._replies([mid], "round 1")


def test_a_device_writes_its_transcript_before_its_reply_and_fsyncs_it_after(tmp_path, monkeypatch):
    """``apps.handle`` in the executor: the message's entries are in the device's files when the
    reply leaves (a killed device process loses none of them), their fsync comes after the reply
    (``DeviceParty.flush``, which the SuperNode calls once it pushed the reply: ``executor.in_node``)."""
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


def test_the_event_log_layers_run_only_while_the_app_has_their_plugin():
    """``control.scoped``: Flower's Fleet and Control event-log layers pass every request on
    untouched while the app has no event-log plugin (Flower's default), so a Fleet request skips
    the Fleet layer (a ``BaseHTTPMiddleware``: a task and a stream a request) then, and goes
    through it, writing its events, once the app has a plugin."""
    import asyncio

    import flwr.superlink.main as link
    from flwr.superlink.routers.control.middlewares import ControlEventLogMiddleware
    from flwr.superlink.routers.fleet.middlewares import FleetEventLogMiddleware
    from starlette.middleware import Middleware

    from privzv.training.engines.flower import control

    ours = {m.kwargs["layer"].cls: m for m in control.scoped(link._get_middleware()) if "layer" in m.kwargs}
    assert ours[FleetEventLogMiddleware].kwargs["plugin"] == "fleet_event_log_plugin"
    assert ours[ControlEventLogMiddleware].kwargs["plugin"] == "control_event_log_plugin"
    fleet = ours[FleetEventLogMiddleware]
    called = []

    class Layer:
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            called.append(scope["path"])
            await self.app(scope, receive, send)

    async def app(scope, receive, send):
        pass

    layer = control.Scoped(app, fleet.kwargs["prefix"], Middleware(Layer), fleet.kwargs["plugin"])
    state = types.SimpleNamespace(fleet_event_log_plugin=None)
    scope = {"type": "http", "path": "/v1/fleet/push-messages", "app": types.SimpleNamespace(state=state)}
    asyncio.run(layer(dict(scope), None, None))
    assert called == []
    state.fleet_event_log_plugin = object()
    asyncio.run(layer(dict(scope), None, None))
    assert called == ["/v1/fleet/push-messages"]


def test_the_superlinks_reading_dependencies_run_in_its_event_loop(monkeypatch):
    """``control.inline_dependencies``: a route dependency of Flower's that only reads the request
    or the app's state (here whether node authentication is on) is called in the event loop, with
    the same result; any other plain-function dependency still goes to a worker thread."""
    import fastapi.dependencies.utils as solver
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient
    from flwr.superlink.routers.fleet.router import get_enable_supernode_auth

    from privzv.training.engines.flower import control

    hops = []

    async def hop(func, *args, **kwargs):  # starlette's run_in_threadpool, noted
        hops.append(func)
        return func(*args, **kwargs)

    def other() -> int:
        return 3

    monkeypatch.setattr(solver, "run_in_threadpool", hop)
    control.inline_dependencies()
    app = FastAPI()
    app.state.enable_supernode_auth = True

    @app.get("/x")
    async def x(auth: bool = Depends(get_enable_supernode_auth), three: int = Depends(other)):  # noqa: B008
        return {"auth": auth, "three": three}

    assert TestClient(app).get("/x").json() == {"auth": True, "three": 3}
    assert hops == [other] and get_enable_supernode_auth not in hops


def test_a_supernode_answers_its_devices_task_in_the_step_that_stored_it(tmp_path, monkeypatch):
    """``executor.in_node``: once Flower's ``_pull_and_store_message`` has stored a message and
    made its ClientApp task, the task is claimed and answered in that same call, through the
    SuperNode's Runtime API handlers (no request, no other process): the signed reply waits in
    the node's state for its next step (``_push_messages``), the task is finished, the device
    lives on in this process; the message's confirmation to the SuperLink is not waited for (it
    goes from another thread, and the task is answered while it is still open); the devices'
    transcripts are synced only after that push."""
    import hashlib
    import json
    import threading

    from flwr.app import Context
    from flwr.common.constant import Status, SubStatus
    from flwr.supercore.constant import TaskType
    from flwr.supercore.fab import Fab
    from flwr.supercore.inflatable.inflatable_object import iterate_object_tree
    from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.supernode import start_client_internal as flower_node
    from flwr.supernode.nodestate import NodeStateFactory

    from privzv.training import seeds
    from privzv.training.config import TrainConfig
    from privzv.training.engines.flower import apps, executor

    key = b"\x07" * 32
    (tmp_path / apps.NOISE_KEY).write_text(seeds.key(7, "device", 0).hex())
    (tmp_path / apps.REPLY_KEY).write_text(key.hex())
    monkeypatch.setattr(executor, "PARTIES", {})
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)
    state = NodeStateFactory(ObjectStoreFactory()).state()
    state.set_node_id(9)
    run = Run.create_empty(1)
    run.fab_id, run.fab_hash = executor.APP_ID, hashlib.sha256(b"").hexdigest()
    config = TrainConfig(dataset="digits", devices=2)
    hello = FlowerMessage(
        codec.pack(
            RecordDict({"config": ConfigRecord({"json": json.dumps(config.to_dict()), "sigma": 1.5})})
        ),
        dst_node_id=9,
        message_type="query.hello",
    )
    steps, release, confirmed = [], threading.Event(), []

    def confirm(run_id, message_id):  # Flower's request to the SuperLink, held open here
        release.wait(10)
        confirmed.append((run_id, message_id, threading.current_thread() is threading.main_thread()))

    def pull_and_store(*, state, confirm_message_received, **_):  # Flower's, once a message came
        state.store_run(run)
        state.store_fab(Fab(run.fab_hash, b"", {}))
        node_config = {"partition-id": 0, "folder": str(tmp_path)}
        state.set_run_series_context(run.series_id, Context(1, 9, node_config, RecordDict(), {}))
        flower_node._insert_message(hello, state, state.object_store)
        state.create_task(task_type=TaskType.CLIENT_APP, run_id=1, fab_hash=run.fab_hash)
        confirm_message_received(1, hello.metadata.message_id)
        steps.append("stored")
        return 1

    node = types.SimpleNamespace(
        _pull_and_store_message=pull_and_store, _push_messages=lambda **_: steps.append("pushed")
    )
    executor.in_node(node)
    assert node._pull_and_store_message(state=state, confirm_message_received=confirm) == 1
    (reply,) = state.get_messages_legacy(is_reply=True)
    assert confirmed == []  # answered while the confirmation is still on its way
    release.set()
    executor.CONFIRMS.submit(lambda: None).result(60)  # after the confirmation, in order
    assert confirmed == [(1, hello.metadata.message_id, False)]
    assert reply.metadata.reply_to_message_id == hello.metadata.message_id and not reply.has_error()
    store = state.object_store  # the reply's objects, as the SuperNode pushes them
    tree = store.get_object_tree(reply.metadata.message_id)
    objects = {t.object_id: store.get(t.object_id) for t in iterate_object_tree(tree)}
    content = codec.unpack(inflate_object_from_contents(tree.object_id, objects).content)
    assert codec.verify(key, hello.metadata.message_id, content) and content["node"]["partition-id"] == 0
    (task,) = state.get_tasks()
    assert (task.status.status, task.status.sub_status) == (Status.FINISHED, SubStatus.COMPLETED)
    assert executor.PARTIES[0].m == 0 and executor.PARTIES[0].method.sigma == 1.5
    with pytest.raises(RuntimeError, match="token"):  # a finished task's token opens nothing
        executor.LocalRuntime(state, "no-such-token").PullTaskInput(None)
    monkeypatch.setattr(executor.PARTIES[0], "flush", lambda: steps.append("synced"))
    node._push_messages(state=state)
    assert steps == ["stored", "pushed", "synced"]


def test_the_hop_profile_reads_flowers_log_lines(tmp_path):
    """``benchmarks/flower_hops.py``: the four hops of a round and the SuperLink's requests in it,
    from the timestamps of Flower's DEBUG lines (coloured as Flower writes them)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "flower_hops.py"
    spec = importlib.util.spec_from_file_location("flower_hops", path)
    hops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hops)

    def line(ms: int, text: str) -> str:
        return f"\x1b[94mDEBUG 2026-11-27 11:41:{ms // 1000:02d},{ms % 1000:03d}\x1b[0m:     {text}"

    def access(ms: int) -> str:
        return f'2026-11-27T11:41:{ms // 1000:02d}.{ms % 1000:03d}Z DEBUG [uvicorn.access] - "POST /v1/x HTTP/1.1" 200'

    (tmp_path / "device0.log").write_text(
        "\n".join(
            line(ms, text)
            for start in (1000, 2000)
            for ms, text in (
                (start + 20, "Receiving: query.send message (ID: a)"),
                (start + 100, "Received successfully"),
                (start + 140, "Sending: query.send message (ID: b)"),
            )
        )
    )
    (tmp_path / "superlink.log").write_text(
        "\n".join(
            [line(500, "Runtime.PushMessages"), access(600)]  # hello: not a round
            + [
                text
                for start in (1000, 2000)
                for text in (
                    line(start, "Runtime.PushMessages"),
                    access(start + 1),
                    access(start + 50),
                    line(start + 300, "Runtime.ConfirmMessageReceived"),
                )
            ]
            + [line(2500, "Runtime.PushMessages")]  # the server hops: 700 and 200 ms
        )
    )
    assert hops.hops(tmp_path) == {
        "rounds": 2,
        "ms": {"push_to_node": 100.0, "device": 40.0, "node_to_server": 160.0, "server": 450.0},
        "requests_per_round": 2.0,
    }


def _served(layer):
    """(status, headers, body) of three requests through ``layer`` (a Starlette ``Middleware``)
    over an app that echoes its body: one the layer refuses itself, one it passes on after
    reading the body and adding a header, one whose route raises (the layer turns it into 500)."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def echo(request):
        if request.url.path == "/boom":
            raise LookupError("the route failed")
        return Response(b"echo:" + await request.body(), headers={"x-route": "1"}, media_type="text/plain")

    app = Starlette(routes=[Route("/echo", echo, methods=["POST"]), Route("/boom", echo, methods=["POST"])])
    with TestClient(type(app)(routes=app.routes, middleware=[layer])) as client:
        replies = [
            client.post("/echo", content=b"no"),
            client.post("/echo", content=b"yes"),
            client.post("/boom", content=b"yes"),
        ]
    return [(r.status_code, sorted(r.headers.items()), r.content) for r in replies]


def test_a_base_http_middleware_inline_answers_as_starlettes():
    """``control.Inline``: a ``BaseHTTPMiddleware``'s ``dispatch`` with ``call_next`` run inline
    gives the same statuses, headers and bodies as Starlette's task-and-stream ``call_next``: a
    request the layer refuses without calling the app, one it reads (the route reads the same
    body again) and passes on with a header added, one whose route raises (the exception reaches
    ``dispatch`` through ``call_next``); and ``control.scoped`` makes every Flower layer that is
    a ``BaseHTTPMiddleware`` run inline."""
    import flwr.superlink.main as link
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import JSONResponse

    from privzv.training.engines.flower import control

    class Gate(BaseHTTPMiddleware):
        async def dispatch(self, request, call_next):
            if await request.body() == b"no":
                return JSONResponse({"refused": True}, status_code=401)
            try:
                response = await call_next(request)
            except LookupError as failed:
                return JSONResponse({"error": str(failed)}, status_code=500)
            response.headers["x-gate"] = str(len(await request.body()))
            return response

    theirs = _served(Middleware(Gate))
    assert [status for status, _, _ in theirs] == [401, 200, 500]
    assert theirs[1][2] == b"echo:yes" and ("x-gate", "3") in theirs[1][1]
    assert _served(Middleware(control.Inline, layer=Middleware(Gate))) == theirs
    assert _served(Middleware(control.Scoped, prefix="/", layer=Middleware(Gate))) == theirs
    for made in control.scoped(link._get_middleware()):
        inner = made.kwargs.get("layer", made)
        if issubclass(inner.cls, BaseHTTPMiddleware):
            assert made.cls in (control.Inline, control.Scoped)
