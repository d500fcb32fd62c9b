"""Flower 1.41's fixed waits in a message's path, shortened for privzv's one-message-at-a-time
protocol (the server sends a device one message and waits for its reply, so each wait is paid on
every message, not once per batch of messages as in Flower's horizontal rounds):

* ``flwr.supernode.start_client_internal``: the SuperNode sleeps 3 s when the SuperLink has no
  message for it and 0.5 s between looks for the ClientApp's reply (``time.sleep``); :func:`poll`
  makes each a short wait that doubles while nothing changes, up to ``seconds``.
* ``pull_objects``: an object of a message that is not stored yet (a message becomes visible
  before all of its objects are) is retried after 1 s, doubling to 10 s
  (``flwr.supercore.constant.PULL_INITIAL_BACKOFF``, ``PULL_BACKOFF_CAP``): the SuperNode pulling
  a message from the SuperLink, the ServerApp pulling a reply, a ClientApp pulling its task.
  :func:`quick_pulls` makes a module's ``pull_objects`` retry after :data:`PULL_BACKOFF` s,
  doubling to :data:`PULL_BACKOFF_CAP` s.

Nothing else changes: the same messages, tries and time limits as Flower's own.
"""

from __future__ import annotations

import functools
import time
import types

PULL_BACKOFF = 0.01
FIRST_POLL = 0.002  # the SuperNode's first wait after a change: a device's next message tends to follow
PULL_BACKOFF_CAP = 1.0


def poll(module: types.ModuleType, seconds: float, first: float = FIRST_POLL) -> None:
    """``module``'s ``time.sleep(s)`` sleeps ``first`` s, doubling on each call in a row up to
    ``seconds`` (never more than ``s``); a call with another ``s`` (the SuperNode's other wait)
    starts again at ``first``. Its other uses of ``time`` as before."""
    fast = types.ModuleType("time")
    fast.__dict__.update(time.__dict__)
    last = {"asked": None, "pause": first}

    def sleep(s: float) -> None:
        pause = min(2 * last["pause"], seconds) if last["asked"] == s else first
        last.update(asked=s, pause=pause)
        time.sleep(min(s, pause))

    fast.sleep = sleep
    module.time = fast


def quick_pulls(module: types.ModuleType) -> None:
    """``module.pull_objects`` (Flower's, imported by name) with privzv's short backoff."""
    from flwr.supercore.inflatable import inflatable_utils

    module.pull_objects = functools.partial(
        inflatable_utils.pull_objects, initial_backoff=PULL_BACKOFF, backoff_cap=PULL_BACKOFF_CAP
    )
