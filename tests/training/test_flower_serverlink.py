"""The ServerApp inside the SuperLink's process (``serverlink``): its task runs over the SuperLink's
own Runtime API handlers, each call authenticated by the task's token; only privzv's app runs;
the task's output is pushed whatever happens, and the end of a task is written where the
launcher looks for it."""

from __future__ import annotations

import threading
import types

import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from flwr.app import Context, RecordDict  # noqa: E402
from flwr.common.constant import SubStatus  # noqa: E402
from flwr.common.serde import context_to_proto, run_to_proto  # noqa: E402
from flwr.proto.fab_pb2 import Fab  # noqa: E402  # pylint: disable=E0611
from flwr.proto.runtime_pb2 import PullTaskInputResponse, SendTaskHeartbeatResponse  # noqa: E402  # pylint: disable=E0611
from flwr.supercore.run import Run  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from privzv.training.engines.flower import apps, executor, serverlink  # noqa: E402


class Client:
    """A Runtime API client that serves one ServerApp task of app ``fab_id`` and records the rest."""

    def __init__(self, fab_id: str):
        run = Run.create_empty(7)
        run.fab_id = fab_id
        self.token, self.outputs = "token", []
        self.input = PullTaskInputResponse(
            context=context_to_proto(Context(7, 0, {}, RecordDict(), {})),
            run=run_to_proto(run),
            fab=Fab(hash_str="0" * 64, content=b"fab"),
            task_id=3,
        )

    def PullTaskInput(self, request):  # noqa: N802  (Flower's Runtime API names)
        return self.input

    def PushTaskOutput(self, request):  # noqa: N802
        self.outputs.append(request)

    def SendTaskHeartbeat(self, request):  # noqa: N802
        return SendTaskHeartbeatResponse(success=True)


@pytest.fixture
def ran(monkeypatch):
    """The ServerApps started (grid, context, app), none for real."""
    import flwr.common.config
    import flwr.server.run_serverapp

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, None)
    calls = []
    monkeypatch.setattr(
        flwr.common.config, "get_fused_config_from_fab", lambda fab, run: {"privzv-config": fab.decode()}
    )
    monkeypatch.setattr(
        flwr.server.run_serverapp,
        "run",
        lambda grid, context, server_app_dir, loaded_server_app: (
            calls.append((grid, context, loaded_server_app)) or context
        ),
    )
    return calls


def test_privzvs_serverapp_runs_over_the_superlinks_handlers_and_reports_its_end(ran):
    client = Client(executor.APP_ID)
    serverlink.run_task(client)
    ((grid, context, app),) = ran
    assert app is apps.server_app and context.run_config == {"privzv-config": "fab"}
    assert grid.run.run_id == 7 and grid._client is None  # closed: it used ``client``, no connection
    assert (TaskIdentity.run_id, TaskIdentity.task_id) == (7, 3)
    ((output,),) = [client.outputs]
    assert output.sub_status == SubStatus.COMPLETED


def test_a_task_of_another_app_runs_nothing_and_is_reported_failed(ran):
    client = Client("someone/else")
    serverlink.run_task(client)
    assert ran == []
    ((output,),) = [client.outputs]
    assert output.sub_status == SubStatus.FAILED


def test_each_runtime_call_needs_the_tasks_token_and_runs_the_superlinks_handler():
    from flwr.superlink.servicer.runtime import runtime_handlers

    handlers = serverlink._handlers()
    assert all(getattr(module, name) for module, name in handlers.values())
    assert handlers["PullMessages"] == (runtime_handlers, "pull_messages")  # held there: waits.SUPERLINK
    nobody = types.SimpleNamespace(get_task_by_token=lambda token: None)
    with pytest.raises(RuntimeError, match="token"):
        executor.LocalRuntime(nobody, "forged", handlers).PullTaskInput(None)
    with pytest.raises(AttributeError):  # a call the ServerApp does not make is not served
        executor.LocalRuntime(nobody, "forged", handlers).AcquireTask(None)


def test_the_end_of_each_task_is_written_for_the_launcher(tmp_path, monkeypatch):
    from flwr.proto.task_pb2 import Task  # pylint: disable=E0611
    from flwr.superlink.servicer.runtime import runtime_handlers

    monkeypatch.chdir(tmp_path)
    answers = iter([types.SimpleNamespace(HasField=lambda name: True, task=Task(task_id=5), token="t")])

    def acquire(request, state):
        try:
            return next(answers)
        except StopIteration:
            raise SystemExit from None  # ends serve's loop

    monkeypatch.setattr(runtime_handlers, "acquire_task", acquire)
    monkeypatch.setattr(serverlink, "run_task", lambda client: None)
    with pytest.raises(SystemExit):
        serverlink.serve(types.SimpleNamespace(state=lambda: None))
    assert [p.name for p in tmp_path.iterdir()] == [f"{serverlink.EXIT_PREFIX}5.exit"]


@pytest.fixture
def http_grid(monkeypatch):
    """Flower's ``http_grid`` module as the ServerApp's grid finds it (``serverlink._grid``),
    its functions put back after the test."""
    import flwr.superlink.grid.http_grid as module

    for name in ("pull_objects", "push_objects"):
        monkeypatch.setattr(module, name, getattr(module, name))
    serverlink._grid(Client(executor.APP_ID))
    return module


def _no_new_threads(monkeypatch) -> list:
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self) or start(self))
    return started


def test_the_serverapps_grid_pulls_and_pushes_objects_in_its_own_thread(http_grid, monkeypatch):
    """The ServerApp's calls are in process: its grid pulls and pushes a message's objects one
    after the other in its own thread, starting none (Flower's start a thread pool per call);
    an object not stored yet is asked again."""
    from flwr.supercore.inflatable.inflatable_utils import ObjectUnavailableError

    started, here, calls = _no_new_threads(monkeypatch), threading.current_thread(), []
    missing = {"b": 2}  # b is not stored for its first two pulls

    def pull(object_id: str) -> bytes:
        calls.append((object_id, threading.current_thread()))
        if missing.get(object_id, 0) > 0:
            missing[object_id] -= 1
            raise ObjectUnavailableError(object_id)
        return object_id.encode()

    assert http_grid.pull_objects(["a", "b", "c"], pull) == {"a": b"a", "b": b"b", "c": b"c"}
    assert [c[0] for c in calls] == ["a", "b", "b", "b", "c"] and {c[1] for c in calls} == {here}

    class Object:
        def __init__(self, name: str):
            self.name = name

        def deflate(self) -> bytes:
            return self.name.encode()

    pushed, objects = [], {name: Object(name) for name in "xyz"}
    http_grid.push_objects(
        objects,
        lambda object_id, content: pushed.append((object_id, content, threading.current_thread())),
        object_ids_to_push={"x", "z"},
    )
    assert pushed == [("x", b"x", here), ("z", b"z", here)] and list(objects) == ["y"]
    assert started == []


def test_an_object_that_never_comes_or_cannot_be_pulled_fails_the_pull(http_grid, monkeypatch):
    """As Flower's: ``ObjectPullError`` once an object is still not stored after Flower's tries
    (``PULL_MAX_TRIES_PER_OBJECT``); any other error of a pull is raised as it is."""
    import flwr.supercore.constant as constant
    from flwr.supercore.inflatable.inflatable_utils import ObjectPullError, ObjectUnavailableError

    monkeypatch.setattr(constant, "PULL_MAX_TRIES_PER_OBJECT", 3)
    monkeypatch.setattr(serverlink.time, "sleep", lambda s: None)
    tries = []

    def never(object_id: str) -> bytes:
        tries.append(object_id)
        raise ObjectUnavailableError(object_id)

    with pytest.raises(ObjectPullError, match="retry limit"):
        http_grid.pull_objects(["a", "b"], never)
    assert tries == ["a"] * 3

    def broken(object_id: str) -> bytes:
        raise ObjectPullError(object_id, "not found")

    with pytest.raises(ObjectPullError, match="not found"):
        http_grid.pull_objects(["a"], broken)
