"""``python -m privzv.training.engines.flower.supernode ARGS``: ``flower-supernode ARGS`` with
Flower's fixed waits in a message's path made event-driven (``waits``): the executor's requests
for a task, its message and its objects are long polls, answered when the SuperNode has one; the
SuperNode's own waits for the executor's reply end at the executor's push (at most
``PRIVZV_SUPERNODE_POLL`` seconds, default 0.01, between looks; Flower: 3 s without a message,
0.5 s for a reply), and a message object not yet at the SuperLink is retried after 0.01 s
(Flower: 1 s; privzv's SuperLink holds that pull until the object is there).

privzv's protocol sends one message at a time to a device, so every message would wait for those
sleeps. Everything else is Flower's own SuperNode; ``flower-supernode`` itself works too, at
about 3 s more per message.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    import flwr.supernode.start_client_internal as node
    from flwr.supernode.cli import flower_supernode

    from privzv.training.engines.flower import waits

    waits.long_polls(waits.SUPERNODE)
    waits.after(node, "_pull_and_store_message")  # a task and its message stored: the executor's
    waits.poll(node, float(os.environ.get("PRIVZV_SUPERNODE_POLL", "0.01")))
    waits.quick_pulls(node)
    sys.argv[0] = "flower-supernode"
    flower_supernode()


if __name__ == "__main__":
    main()
