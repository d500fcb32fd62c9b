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
"""

from __future__ import annotations

import threading
import traceback
from pathlib import Path

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
    from flwr.superlink.grid import HttpGrid

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
