"""Where the processes of a Flower run live and how they reach each other.

:data:`LOCAL` (``privzv train --engine flower``): every process on this machine's 127.0.0.1. A
:class:`Network` with command prefixes puts the server's processes (SuperLink, the ServerApp's
SuperExec, ``flwr``) and each device's (its SuperNode and executor) where the prefix runs them,
e.g. ``ip netns exec NS`` for network namespaces joined by veth pairs
(``tests/training/test_flower_network.py``): the SuperLink listens on ``bind`` and device m
reaches it at ``links[m]``; inside each place the SuperLink and each SuperNode's Runtime API are
also reached on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Network:
    server: tuple[str, ...] = ()  # command prefix of the server's processes
    devices: tuple[tuple[str, ...], ...] = ()  # device m's command prefix (none: ())
    bind: str = "127.0.0.1"  # the SuperLink's --host
    links: tuple[str, ...] = ()  # device m's address of the SuperLink (none: 127.0.0.1)

    def device(self, m: int) -> tuple[str, ...]:
        return self.devices[m] if self.devices else ()

    def link(self, m: int) -> str:
        return self.links[m] if self.links else "127.0.0.1"

    def link_hosts(self) -> list[str]:
        """The addresses the SuperLink's certificate is valid for."""
        return sorted({"127.0.0.1", *self.links})


LOCAL = Network()
