"""Flower 1.41's waits in a message's path, made event-driven for privzv's one-message-at-a-time
protocol (the server sends a device one message and waits for its reply, so each wait is paid on
every message, not once per batch of messages as in Flower's horizontal rounds):

* Polls answered at once with nothing: a SuperNode asks the SuperLink for a message, the
  ServerApp asks for a reply, and each asks again after a sleep. :func:`hold` makes such a pull
  in privzv's SuperLink (``control.py``) a long poll: a pull that finds nothing is held in the
  server until something that may answer it is pushed there (:class:`Changes`: messages to a
  SuperNode, counted per node, messages to the ServerApp, objects, tasks, each counted by
  :func:`after`) or
  :data:`HOLD` s pass, and is then answered as Flower answers it; an object of a message that is
  not stored yet (a message becomes visible before all of its objects are) is held likewise. A
  message is passed on when it is pushed, with one request, not a poll every few ms
  (:data:`SUPERLINK`: what is held and what counts as a push).
* ``flwr.supernode.start_client_internal``: the SuperNode sleeps 3 s when the SuperLink has no
  message for it (``time.sleep``); :func:`poll` caps its sleeps at ``seconds``.
* ``pull_objects``: an object not stored yet is retried after 1 s, doubling to 10 s
  (``flwr.supercore.constant.PULL_INITIAL_BACKOFF``, ``PULL_BACKOFF_CAP``); :func:`quick_pulls`
  makes a module's ``pull_objects`` retry after :data:`PULL_BACKOFF` s, doubling to
  :data:`PULL_BACKOFF_CAP` s (a pull that reaches a holding server rarely needs it).
* privzv's own poll (the ServerApp's replies): :class:`Backoff`.

Nothing else changes: the same messages, answers, authentication and time limits as Flower's own.
"""

from __future__ import annotations

import collections
import functools
import importlib
import threading
import time
import types

PULL_BACKOFF = 0.01
FIRST_POLL = 0.002  # a poll's first wait: a device's next message tends to follow
PULL_BACKOFF_CAP = 1.0
HOLD = 1.0  # seconds a server holds a pull that finds nothing (Flower's HTTP clients wait 30 s)


class Changes:
    """Counts of one kind of push a server took, by key (a SuperNode's id, or None for any), which
    the pulls that it can answer wait on: a held pull wakes only when its key's count moves."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        self._changed = threading.Condition()

    def count(self, key=None) -> int:
        return self.counts[key]

    def bump(self, keys=(None,)) -> None:
        with self._changed:
            self.counts.update(keys)
            self._changed.notify_all()

    def wait(self, seen: int, seconds: float, key=None) -> int:
        """Wait until ``key``'s count is not ``seen`` (at once if it is not already), at most ``seconds``."""
        with self._changed:
            self._changed.wait_for(lambda: self.counts[key] != seen, timeout=max(seconds, 0.0))
            return self.counts[key]


def _anyone(*args, **kwargs) -> None:
    """The key of a push or pull that concerns every pull of its kind."""
    return None


def _everyone(*args, **kwargs) -> tuple:
    """The keys of a push that may answer any pull of its kind."""
    return (None,)


def _request(args, kwargs):
    """A Flower handler's request (Flower's routers pass it by position or as ``request``)."""
    return kwargs["request"] if "request" in kwargs else args[0]


def _node(*args, **kwargs) -> int:
    """A SuperNode's pull for messages concerns that node only."""
    return _request(args, kwargs).node.node_id


def _destinations(*args, **kwargs) -> set:
    """The ServerApp's push of messages concerns the nodes they are for."""
    return {m.metadata.dst_node_id for m in _request(args, kwargs).messages_list}


# this process's, one per kind of push: a held pull wakes only for a push that may answer it,
# a SuperNode's only for a message to that node
TO_NODES, TO_SERVER, OBJECTS, TASKS = Changes(), Changes(), Changes(), Changes()


def after(module: types.ModuleType, name: str, changes: Changes, keys=_everyone) -> None:
    """``module.name`` counts a change in ``changes`` for each of ``keys(*args, **kwargs)`` (by
    default one for any pull) after each call."""
    original = getattr(module, name)

    @functools.wraps(original)
    def counted(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        finally:
            changes.bump(keys(*args, **kwargs))

    setattr(module, name, counted)


def hold(
    module: types.ModuleType, name: str, empty, changes: Changes, seconds: float = HOLD, key=_anyone
) -> None:
    """``module.name`` called again after each change in ``changes`` for ``key(*args, **kwargs)``
    while ``empty(answer)``, for at most ``seconds``; then its last answer. A call whose answer is
    empty changes nothing in Flower's handlers, so repeating it is as if the client had asked later."""
    original = getattr(module, name)

    @functools.wraps(original)
    def held(*args, **kwargs):
        deadline, mine = time.monotonic() + seconds, key(*args, **kwargs)
        while True:
            seen = changes.count(mine)  # before the call: a push during it ends the wait at once
            answer = original(*args, **kwargs)
            left = deadline - time.monotonic()
            if left <= 0 or not empty(answer):
                return answer
            changes.wait(seen, left, mine)

    setattr(module, name, held)


def _no_messages(answer) -> bool:
    return not answer.messages_list


def _not_stored_yet(answer) -> bool:
    return answer.object_found and not answer.object_available


def _no_task(answer) -> bool:
    return not answer.HasField("task")


# (module, [handlers held: (name, empty, the pushes that wake it, the key of a call)], [handlers
# that push: (name, the pushes they count, the keys of a call)]) of the SuperLink
SUPERLINK = [
    (
        "flwr.superlink.servicer.fleet.fleet_handlers",  # the SuperNodes'
        [
            ("pull_messages", _no_messages, TO_NODES, _node),
            ("pull_object", _not_stored_yet, OBJECTS, _anyone),
        ],
        [("push_messages", TO_SERVER, _everyone), ("push_object", OBJECTS, _everyone)],
    ),
    (
        "flwr.superlink.servicer.runtime.runtime_handlers",  # the ServerApp's
        [
            ("pull_messages", _no_messages, TO_SERVER, _anyone),
            ("pull_object", _not_stored_yet, OBJECTS, _anyone),
            ("acquire_task", _no_task, TASKS, _anyone),
        ],
        [("push_messages", TO_NODES, _destinations), ("push_object", OBJECTS, _everyone)],
    ),
    ("flwr.superlink.servicer.control.control_handlers", [], [("start_run", TASKS, _everyone)]),
]


def long_polls(table: list) -> None:
    """Hold the pulls and count the pushes of ``table`` (:data:`SUPERLINK`)."""
    for path, held, pushes in table:
        module = importlib.import_module(path)
        for name, empty, changes, key in held:
            hold(module, name, empty, changes, key=key)
        for name, changes, keys in pushes:
            after(module, name, changes, keys)


def poll(module: types.ModuleType, seconds: float) -> None:
    """``module``'s ``time.sleep(s)`` sleeps ``min(s, seconds)``; its other uses of ``time`` as before."""
    fast = types.ModuleType("time")
    fast.__dict__.update(time.__dict__)
    fast.sleep = lambda s: time.sleep(min(s, seconds))
    module.time = fast


def quick_pulls(module: types.ModuleType) -> None:
    """``module.pull_objects`` (Flower's, imported by name) with privzv's short backoff."""
    from flwr.supercore.inflatable import inflatable_utils

    module.pull_objects = functools.partial(
        inflatable_utils.pull_objects, initial_backoff=PULL_BACKOFF, backoff_cap=PULL_BACKOFF_CAP
    )


class Backoff:
    """The pause before a client's next poll: none after a call the server held (a long poll
    has waited already), else :data:`FIRST_POLL` s, doubling up to ``cap`` while nothing comes."""

    def __init__(self, cap: float):
        self.cap, self.pause = cap, FIRST_POLL

    def reset(self) -> None:
        self.pause = FIRST_POLL

    def after(self, call_seconds: float) -> None:
        """Pause after a poll that found nothing and took ``call_seconds``."""
        if call_seconds >= HOLD / 2:
            self.reset()
            return
        time.sleep(self.pause)
        self.pause = min(2 * self.pause, self.cap)
