"""Seed derivation: every random stream of a run is named, and derived from a seed.

Two roots: the public ``seed`` (data split, model init, batch order, activation, the devices'
perturbation seeds; :func:`derive`, SHA-256) and the ``secret_seed`` (the parties' private noise:
the server's DP noise and Poisson keep decisions, a device's forward noise; :func:`key`,
HMAC-SHA256, the keys of ``privzv.training.noise.KeyedNoise``). A device learns only the key of
its own stream; HMAC is a PRF, so it reveals neither the root nor another party's key, and the
secret root is drawn from the operating system's entropy unless a config fixes it (see
``privzv.training.config``).
"""

from __future__ import annotations

import hashlib
import hmac

import torch


def derive(root: int, *names: object) -> int:
    """A 63-bit seed for the stream ``names`` under ``root`` (SHA-256 of their text)."""
    text = "/".join(str(part) for part in (root, *names)).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 1


def generator(root: int, *names: object) -> torch.Generator:
    """A CPU torch.Generator seeded with ``derive(root, *names)``."""
    return torch.Generator().manual_seed(derive(root, *names))


def key(root: int, *names: object) -> bytes:
    """A 256-bit key for the secret stream ``names`` under ``root``: HMAC-SHA256 keyed by the
    root (RFC 2104; a PRF, so keys of different names are independent to anyone without it)."""
    text = "/".join(str(part) for part in names).encode()
    return hmac.new(int(root).to_bytes(8, "little"), text, hashlib.sha256).digest()


def secret_root(root: int, *names: object) -> int:
    """A 63-bit secret root for the sub-run ``names`` under the secret ``root`` (the first 8 bytes
    of :func:`key`): runs started from one secret seed draw independent noise, as runs with
    independent secret seeds would (two runs on one root would share every noise draw, and their
    releases together would not have the composed guarantee)."""
    return int.from_bytes(key(root, *names)[:8], "little") >> 1
