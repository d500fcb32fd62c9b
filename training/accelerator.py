"""Where a run computes: ``--device cpu|cuda|auto`` and ``--autocast none|bf16|fp16``.

The parties' models, the head, the server's embedding table, the labels and the head's
per-example gradients live on the run's device; the dataset's features stay where the dataset put
them and each batch is moved per round (:func:`load`). What leaves a run is on the CPU:
transcripts, checkpoints (:func:`to_host`) and metrics, so a run made on CUDA resumes on a CPU.
This module and the secret-noise source (``privzv.training.noise``) are the places that name a
device; ``tests/training/test_accelerator.py`` scans the rest for hard-coded devices.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import torch

from privzv.errors import PrivzvError

CPU = torch.device("cpu")  # the host: transcripts, checkpoints, numpy, the secret-noise source


def _cuda(flag: str) -> torch.device:
    if not torch.cuda.is_available():
        raise PrivzvError(
            f"--device {flag}: CUDA is not available here (torch {torch.__version__}"
            f"{'' if torch.version.cuda else ', a CPU-only build'}); allowed: cpu, auto"
        )
    return torch.device("cuda", torch.cuda.current_device())


# --device NAME -> the torch device it resolves to here
DEVICES: dict[str, Callable[[], torch.device]] = {
    "cpu": lambda: CPU,
    "cuda": lambda: _cuda("cuda"),
    "auto": lambda: _cuda("auto") if torch.cuda.is_available() else CPU,
}

# --autocast NAME -> the dtype of the devices' forwards under autocast (None: fp32, no autocast)
AUTOCAST: dict[str, torch.dtype | None] = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# autocast dtypes each device type takes (torch's CPU autocast has no useful fp16)
AUTOCAST_ON = {"cpu": (torch.bfloat16,), "cuda": (torch.bfloat16, torch.float16)}


def resolve(name: str) -> torch.device:
    """The torch device of ``--device name``; PrivzvError for cuda without CUDA or another name."""
    if name not in DEVICES:
        raise PrivzvError(f"--device {name!r}: allowed are {', '.join(DEVICES)}")
    return DEVICES[name]()


def check_autocast(name: str, place: torch.device) -> None:
    """PrivzvError unless ``--autocast name`` runs on ``place``."""
    if name not in AUTOCAST:
        raise PrivzvError(f"--autocast {name!r}: allowed are {', '.join(AUTOCAST)}")
    dtype = AUTOCAST[name]
    if dtype is not None and dtype not in AUTOCAST_ON.get(place.type, ()):
        allowed = ["none"] + [k for k, v in AUTOCAST.items() if v in AUTOCAST_ON.get(place.type, ())]
        raise PrivzvError(
            f"--autocast {name}: not on device {place.type} (CUDA only); allowed there: {', '.join(allowed)}"
        )


def precision(name: str, place: torch.device) -> contextlib.AbstractContextManager:
    """The context of a device's forward: ``torch.autocast`` at ``--autocast name`` (parameters
    stay fp32), or nothing for "none"."""
    dtype = AUTOCAST[name]
    return contextlib.nullcontext() if dtype is None else torch.autocast(place.type, dtype=dtype)


def load(x: torch.Tensor, place: torch.device) -> torch.Tensor:
    """``x`` on ``place``: unchanged when it is there; a host tensor through pinned memory,
    copied without blocking (torch's pinned-memory cache keeps the block until the copy is done)."""
    if x.device == place:
        return x
    if x.device == CPU:
        return x.pin_memory().to(place, non_blocking=True)
    return x.to(place)


def to_host(obj):
    """``obj`` (tensors in dicts, lists and tuples) with every tensor on the CPU: what a run writes
    (checkpoints), whatever device it computed on (a CPU tensor is returned as it is)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(CPU)
    if isinstance(obj, dict):
        return {k: to_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_host(v) for v in obj)
    return obj


def numpy(x: torch.Tensor) -> np.ndarray:
    """``x`` as a numpy array (host code: label randomisation, the ledger's ids)."""
    return x.detach().to(CPU).numpy()


def platform(place: torch.device) -> dict:
    """What the bits of a run's releases depend on besides ``run.replay_platform``'s CPU facts:
    nothing more on the CPU; the GPU's name and CUDA version on CUDA."""
    if place.type != "cuda":
        return {}
    return {"accelerator": f"{torch.cuda.get_device_name(place)}, CUDA {torch.version.cuda}"}
