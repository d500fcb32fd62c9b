"""``python -m privzv.training.engines.flower.executor --runtime-api-address HOST:PORT
--root-certificates CA --superexec-auth-secret-file FILE``: one long-lived process that runs every
ClientApp task of its SuperNode (``--isolation process``), over TLS (the SuperNode's Runtime API
certificate, signed by ``CA``), signing its task requests with the SuperNode's SuperExec secret
(Flower's SuperExec authentication: no process without that secret can take the device's tasks).

Flower 1.41 has no warm ClientApp: its SuperExec launches one ``flwr-clientapp`` process per task
(``flwr/supercore/superexec/executor/subprocess_executor.py``, ``SubprocessExecutor.launch``), and
that process pulls one task, answers it and exits (``flwr/supernode/runtime/run_clientapp.py``:
``pull_task_input`` once, then ``flwr_exit``); its warm executor pools are for Kubernetes and
agent/model/connector tasks only (``warm_executor_pool.WARM_EXECUTOR_TASK_TYPES``). Each message
to a device thus cost a Python process with flwr and torch imports (2-3 CPU s).

Started beside a SuperNode run with ``--isolation process`` (Flower's mode for a ClientApp
executor that the operator starts), this process does what Flower's SuperExec and
``flwr-clientapp`` do together, over the same Runtime API of the SuperNode, without a process per
task: it acquires a ClientApp task (``AcquireTask``), pulls its message and context with the
task's token (as Flower's ``pull_task_input``), runs privzv's ClientApp (``apps.client_app``) on
them, and pushes the reply and the context back (``push_message``, ``push_task_output``). It runs
only privzv's app: a task of another app gets an error reply, never its code.

The device lives in this process (:data:`PARTIES`, made by ``query.hello``): its data slice,
model, private generator and method state are never rebuilt per message and never leave the
process but into the device's own state folder at a checkpoint (``devicestate``); the task's
``context.state``, which the SuperNode serves to whoever pulls the task, stays empty. Each reply is signed with the device's key (``apps.answer``).
"""

from __future__ import annotations

import argparse
import time
import traceback
from pathlib import Path

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
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.interceptors.http.superexec_auth import SuperExecAuthHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supercore.task_identity import TaskIdentity
from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

from privzv.training.engines.flower import apps, waits

FIRST_BEAT = 10.0  # seconds into a task before its first heartbeat (Flower's come every 17.5-22.5 s)
POLL = 0.05  # the longest pause between AcquireTask calls that the SuperNode does not hold
APP_ID = "privzv/privzv-run"  # the FAB id of ``launcher.app_folder``'s app
PARTIES: dict = {}  # partition id -> the device's DeviceParty, alive between its messages


ACQUIRE = "/flwr.proto.Runtime/AcquireTask"  # the call Flower's SuperExec authentication protects


def serve(address: str, certificates: str, secret: bytes, poll: float = POLL) -> None:
    """Run the SuperNode's ClientApp tasks at Runtime API ``address`` (TLS, CA ``certificates``),
    one after another, forever, each taken with SuperExec ``secret``."""
    tasks = _client(
        address,
        certificates,
        RuntimeVersionHttpInterceptor(component_name="SuperExec"),
        SuperExecAuthHttpInterceptor(master_secret=secret, protected_methods=[ACQUIRE]),
    )
    token = TaskToken()
    client = _client(
        address, certificates, RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"), token
    )
    backoff = waits.Backoff(poll)
    while True:
        asked = time.monotonic()
        res = tasks.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]))
        if res.HasField("task") and res.token:
            token.token = res.token
            run_task(client)
            backoff.reset()  # a device's next task tends to follow soon
        else:
            backoff.after(time.monotonic() - asked)


class TaskToken(RuntimeTokenHttpInterceptor):
    """The token of the task being run, on every request of the executor's one task client (one
    TLS connection for all tasks, not a client and a handshake per message)."""

    def __init__(self):
        super().__init__("unset")

    @property
    def token(self) -> str:
        return self._token

    @token.setter
    def token(self, value: str) -> None:
        self._token = value


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
            for party in PARTIES.values():  # the transcript's fsync, off the round's path
                party.flush()


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
    with ``waits``' short backoff. The SuperNode creates the task before it has pulled the
    message's objects from the SuperLink; Flower's own pull then waits 1 s, which a process started
    per task (seconds) never hits, but a waiting executor hits on every message."""
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


def _client(address: str, certificates: str, *interceptors):
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=False,
        root_certificates=certificates,
        interceptors=list(interceptors),
        retry_invoker=make_simple_http_retry_invoker(),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API, HOST:PORT")
    ap.add_argument(
        "--root-certificates", required=True, help="CA certificate (PEM) of the SuperNode's Runtime API"
    )
    ap.add_argument(
        "--superexec-auth-secret-file",
        required=True,
        help="the SuperNode's SuperExec secret (raw bytes, as its --superexec-auth-secret-file)",
    )
    ap.add_argument("--poll", type=float, default=POLL, help=f"seconds between task polls (default {POLL})")
    args = ap.parse_args(argv)
    secret = Path(args.superexec_auth_secret_file).read_bytes()
    serve(args.runtime_api_address, args.root_certificates, secret, args.poll)


if __name__ == "__main__":
    main()
