"""The long-lived ClientApp executor (``executor.answer``): privzv's app answers its messages in
the executor's process, the device kept there (nothing of it in the task's context) and every
reply signed; a task of another app, or one the app cannot answer, gets an error reply."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.common.constant import SubStatus  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from privzv.training import seeds  # noqa: E402
from privzv.training.config import TrainConfig  # noqa: E402
from privzv.training.engines.flower import apps, codec, executor  # noqa: E402

KEY = b"\x07" * 32


@pytest.fixture
def task(monkeypatch, tmp_path):
    """A task's message factory and context, as ``pull_task_input`` sets them up."""
    for name, value in (("_run_id", 1), ("_node_id", 9), ("_task_id", 2)):
        monkeypatch.setattr(TaskIdentity, name, value)
    (tmp_path / apps.NOISE_KEY).write_text(seeds.key(7, "device", 0).hex())
    (tmp_path / apps.REPLY_KEY).write_text(KEY.hex())
    monkeypatch.setattr(executor, "PARTIES", {})
    context = Context(
        run_id=1,
        node_id=9,
        node_config={"partition-id": 0, "folder": str(tmp_path)},
        state=RecordDict(),
        run_config={},
    )

    def message(kind: str, content: RecordDict) -> Message:
        msg = Message(codec.pack(content), dst_node_id=9, message_type=kind)
        msg.metadata.__dict__["_message_id"] = msg.object_id
        return msg

    return message, context


def _hello() -> RecordDict:
    config = TrainConfig(dataset="digits", devices=2)
    return RecordDict({"config": ConfigRecord({"json": json.dumps(config.to_dict()), "sigma": 1.5})})


def test_executor_keeps_the_device_in_its_process_and_signs_its_replies(task):
    """Issue 25 item 1: the task's context (served by the SuperNode to whoever pulls the task)
    carries nothing of the device: not its model, not its noise generator's state."""
    message, context = task
    hello = message("query.hello", _hello())
    reply, status, details = executor.answer(hello, context, executor.APP_ID)
    assert status == SubStatus.COMPLETED and details == "" and not reply.has_error()
    content = codec.unpack(reply.content)
    assert content["node"]["partition-id"] == 0
    assert codec.verify(KEY, hello.metadata.message_id, content)
    assert len(context.state.keys()) == 0
    assert executor.PARTIES[0].method.sigma == 1.5 and executor.PARTIES[0].m == 0


def test_executor_refuses_another_app_and_reports_a_failing_message(task):
    message, context = task
    reply, status, details = executor.answer(message("query.hello", _hello()), context, "someone/else")
    assert status == SubStatus.FAILED and reply.has_error() and "someone/else" in reply.error.reason
    assert executor.PARTIES == {}  # nothing of privzv's app ran
    # a message the device cannot answer (send before hello): an error reply, the executor lives on
    reply, status, details = executor.answer(message("query.send", RecordDict({})), context, executor.APP_ID)
    assert status == SubStatus.FAILED and reply.has_error() and "before query.hello" in details
