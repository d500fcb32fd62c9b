"""``python -m privzv.training.engines.flower.supernode ARGS``: ``flower-supernode ARGS`` polling its
SuperLink every ``PRIVZV_SUPERNODE_POLL`` seconds (default 0.2) when idle.

Flower 1.41's SuperNode sleeps 3 s whenever it finds no message; privzv's protocol sends one
message at a time to a device, so every message would wait for that sleep. This wrapper shortens
only that sleep (``flwr.supernode.start_client_internal``'s ``time.sleep``); everything else is
Flower's own SuperNode. ``flower-supernode`` itself works too, at about 3 s more per message.
"""
from __future__ import annotations

import os
import sys
import time
import types


def main() -> None:
    import flwr.supernode.start_client_internal as node
    from flwr.supernode.cli import flower_supernode

    poll = float(os.environ.get("PRIVZV_SUPERNODE_POLL", "0.2"))
    fast = types.ModuleType("time")
    fast.__dict__.update(time.__dict__)
    fast.sleep = lambda seconds: time.sleep(min(seconds, poll))
    node.time = fast
    sys.argv[0] = "flower-supernode"
    flower_supernode()


if __name__ == "__main__":
    main()
