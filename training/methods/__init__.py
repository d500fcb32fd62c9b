"""Training methods: the registry ``--method NAME`` -> Method class (see ``methods.base``)."""

from __future__ import annotations

import importlib

from privzv.errors import PrivzvError

MODULES = {
    "dpzv": "privzv.training.methods.dpzv",
    "vafl": "privzv.training.methods.vafl",
    "fo-vector": "privzv.training.methods.fo_vector",
    "zoo-vfl": "privzv.training.methods.zoo_vfl",
    "czofo": "privzv.training.methods.czofo",
    "rr-prior": "privzv.training.methods.rr_prior",
}
METHODS = tuple(MODULES)
DEFAULT = "dpzv"  # TrainConfig.method's default


def get(name: str):
    """The Method class registered as ``name`` (each module defines exactly one ``METHOD``)."""
    if name not in MODULES:
        raise PrivzvError(f"--method {name!r}: allowed are {', '.join(METHODS)}")
    return importlib.import_module(MODULES[name]).METHOD
