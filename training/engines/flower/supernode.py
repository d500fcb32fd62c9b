"""``python -m privzv.training.engines.flower.supernode ARGS``: ``flower-supernode ARGS`` with
Flower's fixed waits in a message's path shortened (``waits``): it looks for a message or a
ClientApp's reply after 2 ms, doubling while none comes, up to ``PRIVZV_SUPERNODE_POLL`` seconds
(default 0.05; Flower: 3 s and 0.5 s), and retries a message object not yet at the SuperLink
after 0.01 s (Flower: 1 s).

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

    waits.poll(node, float(os.environ.get("PRIVZV_SUPERNODE_POLL", "0.05")))
    waits.quick_pulls(node)
    sys.argv[0] = "flower-supernode"
    flower_supernode()


if __name__ == "__main__":
    main()
