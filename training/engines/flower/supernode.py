"""``python -m privzv.training.engines.flower.supernode ARGS``: ``flower-supernode ARGS`` (run with
``--isolation process``) that answers device m's ClientApp tasks in its own process
(``executor.in_node``: the device lives there from ``query.hello`` on), with Flower's fixed waits
in a message's path made event-driven: the SuperNode's pull of its next message is a long poll at
privzv's SuperLink (``waits``), its sleep after a pull that found nothing is at most
``PRIVZV_SUPERNODE_POLL`` seconds (default 0.01; Flower: 3 s), and a message object not yet at the
SuperLink is retried after 0.01 s (Flower: 1 s; privzv's SuperLink holds that pull until the
object is there).

Everything else is Flower's own SuperNode: TLS to the SuperLink, node authentication, its Runtime
API (TLS, SuperExec authentication) for any other executor.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    import flwr.supernode.start_client_internal as node
    import torch
    from flwr.supernode.cli import flower_supernode

    from privzv.training.engines.flower import executor, waits

    torch.set_num_threads(1)  # as the ServerApp's: a device's ops are small, and intra-op threads
    # wait for each other's cores (a 2-core machine under load: 14 ms a linear layer with 2)
    executor.in_node(node)
    waits.poll(node, float(os.environ.get("PRIVZV_SUPERNODE_POLL", "0.01")))
    waits.quick_pulls(node)
    sys.argv[0] = "flower-supernode"
    flower_supernode()


if __name__ == "__main__":
    main()
