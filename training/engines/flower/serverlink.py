"""``python -m privzv.training.engines.flower.serverlink ARGS``: privzv's SuperLink (``control.py
superlink ARGS``, run with ``--isolation process``) that runs the run's ServerApp itself, in a
thread of its own process, and calls its own Runtime API handlers in process: the ServerApp's
half of every message (push the message and its objects, the held pull of the reply, the pulls
of its objects, the confirmation) costs no request.

Flower's way is a SuperExec process that takes the ServerApp task (``AcquireTask``) and starts
``flwr-serverapp``, which talks to the SuperLink over HTTPS (``HttpGrid``). Here :func:`serve`
takes each ServerApp task as the SuperLink makes it (``AcquireTask``'s handler, held until a run
starts: ``waits.TASKS``), and :func:`run_task` runs it as ``flwr.superlink.runtime.run_serverapp``
does, over an ``HttpGrid`` whose Runtime API client is ``executor.LocalRuntime`` on the SuperLink's
handlers (:data:`HANDLERS`, each call authenticated by the task's token, as over HTTP), without
its process exit, signal handlers and log upload. Only privzv's app runs: a task of another app
is reported failed and runs nothing.

Why it is safe: the ServerApp and the SuperLink are the server's, run as the same OS user
(root under ``--party-users``), so the SuperLink process could already read the ServerApp's
memory, files and environment; the process boundary was no boundary between parties. The
server's inputs (paths of 0600 files: the secret seed, the reply keys) are now in the SuperLink's
environment, which no device reads (``users``). The task token never leaves the process (no token
file, no ``--token`` argument), the Control API keeps its gate (``control.ControlGate``), and
``--superexec-auth-secret-file`` keeps any other process from taking a task.

When a task ends, the file ``serverapp-<task id>.exit`` in the working directory (the run's work
folder) says so, with or without a result (``launcher.Stack.check_alive``).

The ServerApp's ``HttpGrid`` pushes and pulls a message's objects with :func:`push_objects` and
:func:`pull_objects` (:func:`in_thread`): one after the other in its own thread, as its calls are
in process, where Flower's start a thread pool per call (made to overlap HTTP requests).
"""

from __future__ import annotations

import random
import threading
import time
import traceback
import types
from pathlib import Path

from privzv.training.engines.flower import waits

EXIT_PREFIX = "serverapp-"


def _handlers() -> dict:
    """The SuperLink's Runtime API calls a ServerApp makes -> (the module, the handler) its HTTP API
    runs (``flwr.supercore.routers.runtime.router``)."""
    from flwr.supercore.servicer.runtime import runtime_handlers as core
    from flwr.superlink.servicer.runtime import runtime_handlers as link

    return {
        "PullTaskInput": (link, "pull_task_input"),
        "PushTaskOutput": (link, "push_task_output"),
        "GetNodes": (link, "get_nodes"),
        "PushMessages": (link, "push_messages"),
        "PushObject": (link, "push_object"),
        "PullMessages": (link, "pull_messages"),
        "PullObject": (link, "pull_object"),
        "ConfirmMessageReceived": (link, "confirm_message_received"),
        "SendTaskHeartbeat": (core, "send_task_heartbeat"),
    }


def pull_objects(
    object_ids: list[str],
    pull_object_fn,
    *,
    initial_backoff: float = waits.PULL_BACKOFF,
    backoff_cap: float = waits.PULL_BACKOFF_CAP,
    **_,
) -> dict[str, bytes]:
    """``flwr.supercore.inflatable.inflatable_utils.pull_objects`` in the calling thread, object by
    object: one not stored yet (``ObjectUnavailableError``) is asked again after a backoff
    (``waits``' short one, doubling, +-20% jitter) until Flower's limits (``PULL_MAX_TIME`` s in
    all, ``PULL_MAX_TRIES_PER_OBJECT`` tries), then ``ObjectPullError``; any other error is raised."""
    from flwr.supercore.constant import PULL_MAX_TIME, PULL_MAX_TRIES_PER_OBJECT
    from flwr.supercore.inflatable.inflatable_utils import ObjectPullError, ObjectUnavailableError

    start, results = time.monotonic(), {}
    for object_id in object_ids:
        tries, delay = 0, initial_backoff
        while object_id not in results:
            try:
                results[object_id] = pull_object_fn(object_id)
            except ObjectUnavailableError:
                tries += 1
                if tries >= PULL_MAX_TRIES_PER_OBJECT or time.monotonic() - start >= PULL_MAX_TIME:
                    raise ObjectPullError(object_id, "timeout or retry limit reached") from None
                time.sleep(delay * (1 + random.uniform(-0.2, 0.2)))
                delay = min(delay * 2, backoff_cap)
    return results


def push_objects(
    objects: dict,
    push_object_fn,
    *,
    object_ids_to_push: set[str] | None = None,
    keep_objects: bool = False,
    **_,
) -> None:
    """``flwr.supercore.inflatable.inflatable_utils.push_objects`` in the calling thread: each object
    of ``objects`` (those in ``object_ids_to_push``, if given) deflated and pushed in turn, dropped
    from ``objects`` unless ``keep_objects``; the first error is raised."""
    for object_id in list(objects):
        if object_ids_to_push is not None and object_id not in object_ids_to_push:
            continue
        content = objects[object_id].deflate()
        if not keep_objects:
            del objects[object_id]
        push_object_fn(object_id, content)


def in_thread(module: types.ModuleType) -> None:
    """``module``'s ``pull_objects`` and ``push_objects`` (Flower's, imported by name): this
    module's, in the calling thread."""
    module.pull_objects, module.push_objects = pull_objects, push_objects


def serve(factory) -> None:
    """Run each ServerApp task of the SuperLink's state (``factory.state()``), one at a time."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
    from flwr.supercore.constant import TaskType
    from flwr.superlink.servicer.runtime import runtime_handlers

    from privzv.training.engines.flower.executor import LocalRuntime

    state, handlers = factory.state(), _handlers()
    request = AcquireTaskRequest(supported_task_types=[TaskType.SERVER_APP])
    while True:
        res = runtime_handlers.acquire_task(request, state)  # held: waits.SUPERLINK
        if res.HasField("task"):
            try:
                run_task(LocalRuntime(state, res.token, handlers))
            finally:
                (Path.cwd() / f"{EXIT_PREFIX}{res.task.task_id}.exit").write_text("0")


def _grid(client):
    import flwr.superlink.grid.http_grid as http_grid
    from flwr.superlink.grid import HttpGrid

    in_thread(http_grid)

    class LinkGrid(HttpGrid):
        """Flower's ``HttpGrid`` over ``client`` (in process): no connection to make or close."""

        def close(self) -> None:
            self._client = None

    grid = LinkGrid(token=client.token)
    grid._client = client  # pylint: disable=protected-access
    return grid


def run_task(client) -> None:
    """The ServerApp task whose token ``client`` sends, as ``run_serverapp`` runs it."""
    from flwr.common.config import get_fused_config_from_fab
    from flwr.common.constant import SubStatus
    from flwr.common.serde import context_from_proto, context_to_proto, run_from_proto
    from flwr.proto.runtime_pb2 import PullTaskInputRequest, PushTaskOutputRequest  # pylint: disable=E0611
    from flwr.server.run_serverapp import run
    from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
    from flwr.supercore.task_identity import TaskIdentity

    from privzv.training.engines.flower import apps, executor

    grid, context = _grid(client), None
    status, details = SubStatus.FAILED, "the ServerApp task failed"
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    try:
        res = client.PullTaskInput(PullTaskInputRequest())
        context, task_run = context_from_proto(res.context), run_from_proto(res.run)
        TaskIdentity.task_id, TaskIdentity.run_id = res.task_id, task_run.run_id  # as run_serverapp
        TaskIdentity.node_id = res.context.node_id  # (this process's one task: what a Message reads)
        if task_run.fab_id != executor.APP_ID:
            raise ValueError(
                f"this SuperLink runs privzv's ServerApp ({executor.APP_ID}) only, not {task_run.fab_id!r}"
            )
        grid.set_run(task_run)
        context.run_config = get_fused_config_from_fab(res.fab.content, task_run)
        context = run(grid=grid, context=context, server_app_dir="", loaded_server_app=apps.server_app)
        status, details = SubStatus.COMPLETED, ""
    except Exception:  # pylint: disable=broad-exception-caught  (the task is reported failed)
        traceback.print_exc()
    finally:
        try:
            client.PushTaskOutput(
                PushTaskOutputRequest(
                    context=None if context is None else context_to_proto(context),
                    sub_status=status,
                    details=details,
                )
            )
        finally:
            heartbeat.stop()
            grid.close()


def main() -> None:
    import flwr.superlink.main as link

    from privzv.training.engines.flower import control

    create = link.create_app

    def create_app(*args, **kwargs):
        app = create(*args, **kwargs)
        threading.Thread(
            target=serve, args=(app.state.linkstate_factory,), name="serverapp", daemon=True
        ).start()
        return app

    link.create_app = create_app
    control.superlink()


if __name__ == "__main__":
    main()
