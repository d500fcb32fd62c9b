"""A run that diverged stops: non-finite test loss or parameters are a failure (exit code 1),
never a result written as accuracy 0.0 with NaN in the outputs (docs/cli.md, "Exit codes")."""
from __future__ import annotations

import math

import torch

from privzv.cliutil import Failed


class Diverged(Failed):
    """Training produced NaN or infinite values."""


def check(sched, evaluation) -> None:
    """Raise :class:`Diverged` if ``evaluation``'s test loss or any model parameter of ``sched``
    (devices and server head) is NaN or infinite."""
    models = [(f"device{d.index}", d.model) for d in sched.devices] + [("server", sched.server.head)]
    bad = [name for name, model in models
           if not all(bool(torch.isfinite(p).all()) for p in model.parameters())]
    if bad or not math.isfinite(evaluation.test_loss):
        what = f"non-finite parameters in {', '.join(bad)}" if bad else \
            f"test loss {evaluation.test_loss}"
        raise Diverged(f"training diverged by round {sched.round} ({what}); lower the learning "
                       "rates (--lr-device, --lr-server) or --lam")
