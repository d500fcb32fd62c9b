"""Device m's ClientApp tasks, run inside its SuperNode's process (``supernode.py``): the SuperNode
pulls a message from the SuperLink and stores it as a ClientApp task (Flower's own
``_pull_and_store_message``), then :func:`in_node` claims that task and answers it at once, in the
same thread, through the SuperNode's Runtime API handlers called in process (:class:`LocalRuntime`),
before the SuperNode pushes the reply on. No process and no HTTPS request per task: a message
costs the SuperNode's own requests to the SuperLink and the device's compute.

Flower 1.41 has no warm ClientApp: its SuperExec launches one ``flwr-clientapp`` process per task
(``flwr/supercore/superexec/executor/subprocess_executor.py``, ``SubprocessExecutor.launch``), and
that process pulls one task, answers it and exits (``flwr/supernode/runtime/run_clientapp.py``:
``pull_task_input`` once, then ``flwr_exit``); its warm executor pools are for Kubernetes and
agent/model/connector tasks only (``warm_executor_pool.WARM_EXECUTOR_TASK_TYPES``). The SuperNode
runs with ``--isolation process`` (Flower's mode for a ClientApp executor the operator provides),
so it starts no SuperExec; its Runtime API stays served with SuperExec authentication (no process
without the SuperNode's secret can take a task, and privzv's own take theirs as they are made).

The device lives in this process (:data:`PARTIES`, made by ``query.hello``): its data slice,
model, private generator and method state are never rebuilt per message and never leave the
process but into the device's own state folder at a checkpoint (``devicestate``); the task's
``context.state``, which the SuperNode serves to whoever pulls the task, stays empty. Each reply
is signed with the device's key (``apps.answer``). Only privzv's app runs: a task of another app
gets an error reply, never its code.
"""

from __future__ import annotations

import concurrent.futures
import functools
import traceback
import types

from flwr.app import Error, Message
from flwr.common.constant import ErrorCode, SubStatus
from flwr.common.serde import context_from_proto, run_from_proto
from flwr.proto.node_pb2 import Node  # pylint: disable=E0611
from flwr.proto.runtime_pb2 import AcquireTaskRequest, PullAppMessagesRequest, PullTaskInputRequest  # pylint: disable=E0611
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.inflatable.inflatable_protobuf_utils import (
    make_confirm_message_received_fn_protobuf,
    make_pull_object_fn_protobuf,
)
from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
from flwr.supercore.servicer.runtime import runtime_handlers as core_handlers
from flwr.supercore.task_identity import TaskIdentity
from flwr.supernode.runtime.run_clientapp import push_message, push_task_output
from flwr.supernode.servicer.runtime import runtime_handlers as node_handlers

from privzv.training.engines.flower import apps, waits

FIRST_BEAT = 10.0  # seconds into a task before its first heartbeat (Flower's come every 17.5-22.5 s)
APP_ID = "privzv/privzv-run"  # the FAB id of ``launcher.app_folder``'s app
PARTIES: dict = {}  # partition id -> the device's DeviceParty, alive between its messages

# the Runtime API calls a task makes -> (the module, the handler) the SuperNode's HTTP API runs for
# it (``flwr.supercore.routers.runtime.router``), looked up at each call
HANDLERS = {
    "PullTaskInput": (node_handlers, "pull_task_input"),
    "PullMessages": (node_handlers, "pull_messages"),
    "PullObject": (node_handlers, "pull_object"),
    "ConfirmMessageReceived": (node_handlers, "confirm_message_received"),
    "PushMessages": (node_handlers, "push_messages"),
    "PushObject": (node_handlers, "push_object"),
    "PushTaskOutput": (node_handlers, "push_task_output"),
    "SendTaskHeartbeat": (core_handlers, "send_task_heartbeat"),
}


def in_node(module: types.ModuleType) -> None:
    """``module._pull_and_store_message`` (``flwr.supernode.start_client_internal``'s) answers the
    ClientApp task it made before it returns (:func:`run_pending`), so that the SuperNode's
    ``_push_messages`` finds the reply at once; its confirmation that it received the message
    goes from a thread of its own (:func:`confirm_later`); the devices' transcripts are fsynced
    after the reply's push (off the round's path)."""
    pull, push = module._pull_and_store_message, module._push_messages

    @functools.wraps(pull)
    def pulled_and_answered(*args, **kwargs):
        kwargs["confirm_message_received"] = confirm_later(kwargs["confirm_message_received"])
        run_id = pull(*args, **kwargs)
        if run_id is not None:
            run_pending(kwargs["state"])
        return run_id

    @functools.wraps(push)
    def pushed_and_synced(*args, **kwargs):
        try:
            return push(*args, **kwargs)
        finally:
            for party in PARTIES.values():
                party.flush()

    module._pull_and_store_message, module._push_messages = pulled_and_answered, pushed_and_synced


CONFIRMS = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="confirm")


def confirm_later(confirm):
    """``confirm(run_id, message_id)`` (Flower's request that lets the SuperLink delete a pulled
    message's objects, which nothing in the round waits for) sent by :data:`CONFIRMS`, in order,
    while the device computes; a failure is logged, as the objects only stay stored longer."""

    def send(run_id: int, message_id: str) -> None:
        try:
            confirm(run_id, message_id)
        except Exception:  # pylint: disable=broad-exception-caught
            traceback.print_exc()

    return lambda run_id, message_id: CONFIRMS.submit(send, run_id, message_id) and None


def run_pending(state) -> None:
    """Claim every pending ClientApp task of the SuperNode's ``state`` and run it (as Flower's
    SuperExec takes one with ``AcquireTask``, here without a request)."""
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    while (res := core_handlers.acquire_task(request, state)).HasField("task"):
        run_task(LocalRuntime(state, res.token))


class LocalRuntime:
    """A Runtime API for the task of ``token``, called in the process that serves it (the
    SuperNode's: :data:`HANDLERS`; the SuperLink's: ``serverlink``): each call in ``handlers``
    authenticates the token as the HTTP API does
    (``flwr.supercore.dependencies.task.authenticate_task``) and runs the same handler."""

    def __init__(self, state, token: str, handlers: dict = HANDLERS):
        self.state, self.token, self.handlers = state, token, handlers

    def __getattr__(self, call: str):
        if call not in self.handlers:
            raise AttributeError(call)
        module, name = self.handlers[call]

        def invoke(request):
            task = self.state.get_task_by_token(self.token)
            if task is None:
                raise RuntimeError(f"Runtime API {call}: the task's token is not valid")
            return getattr(module, name)(request, self.state, task)

        return invoke


class LateHeartbeat(HeartbeatSender):
    """Flower's task heartbeat, its first one sent after :data:`FIRST_BEAT` s, not at the start:
    a claimed task lives ``HEARTBEAT_DEFAULT_INTERVAL`` (30 s) without one (Flower's
    ``claim_task``), and a device's task takes milliseconds, so most need no heartbeat request."""

    def _run(self) -> None:
        if not self._stop_event.wait(FIRST_BEAT):
            super()._run()


def run_task(client) -> None:
    """The ClientApp task whose token ``client`` sends: as ``flwr.supernode.runtime.run_clientapp``
    without its exit."""
    heartbeat = LateHeartbeat(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    context = reply = None
    status, details = SubStatus.FAILED, "the ClientApp task failed"
    try:
        message, context, run = pull_task_input(client)
        reply, status, details = answer(message, context, run.fab_id)
    except Exception:  # pylint: disable=broad-exception-caught  (the task is reported failed)
        traceback.print_exc()
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
            push_task_output(client, context, status, details)
        finally:
            heartbeat.stop()


def answer(message, context, fab_id: str):
    """(reply, status, details) of privzv's ClientApp for ``message`` of a run of app ``fab_id``:
    the app's reply, or, as Flower's ``run_clientapp`` makes it, an error reply when the app raises;
    a run of another app gets an error reply without running anything."""
    try:
        if fab_id != APP_ID:
            raise ValueError(f"this executor runs privzv's ClientApp ({APP_ID}) only, not {fab_id!r}")
        return apps.answer(message, context, PARTIES), SubStatus.COMPLETED, ""
    except Exception as exc:  # pylint: disable=broad-exception-caught  (an error reply, as Flower's)
        traceback.print_exc()
        details = f"{type(exc)}:<'{exc}'>"
        error = Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details)
        return Message(error, reply_to=message), SubStatus.FAILED, details


def pull_task_input(client):
    """The task's message, context and run: ``flwr.supernode.runtime.run_clientapp.pull_task_input``
    with ``waits``' short backoff (Flower's first wait for an object not stored yet is 1 s)."""
    res = client.PullTaskInput(PullTaskInputRequest())
    TaskIdentity.task_id, TaskIdentity.run_id = res.task_id, res.run.run_id
    TaskIdentity.node_id = res.context.node_id
    context, run = context_from_proto(res.context), run_from_proto(res.run)
    pulled = client.PullMessages(PullAppMessagesRequest())
    if not pulled.messages_list:
        raise RuntimeError("no message for this task from the SuperNode's Runtime API")
    node = Node(node_id=context.node_id)
    tree = pulled.message_object_trees[0]
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(client.ConfirmMessageReceived, node, context.run_id),
        return_type=Message,
        initial_backoff=waits.PULL_BACKOFF,
        backoff_cap=waits.PULL_BACKOFF_CAP,
    )
    message.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's pull_task_input
    return message, context, run
