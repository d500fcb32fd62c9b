"""A party's own trained model, read from the run folder's checkpoint (its own state only).

A device holds its bottom model, the server its head. An attacker that is a party may use its own
model: a VAFL device adds the forward noise itself, so its clean bottom-model outputs -- not the
noised uplink in its transcript -- are what it completes a model from (Fu et al. 2022).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from privzv.errors import PrivzvError


class RunModels:
    """The trained models of a finished run, loaded on demand, as ``reader`` sees them: a party
    (``"device0"``, ...: its own bottom model only, read from its own private state,
    ``privzv.training.run_folder.party_state``), or ``WHITE_BOX`` (an attack granted every
    party's final model, as the deployed joint model: membership, inversion). The head is public
    (a DP mechanism's output in a private run)."""

    def __init__(self, run, cfg: dict, dataset, reader: str):
        self.run, self.cfg, self.dataset, self.reader = Path(run), cfg, dataset, reader

    def device(self, m: int) -> torch.nn.Module:
        from privzv.training.messages import device_name

        if self.reader not in (WHITE_BOX, device_name(m)):
            raise PrivzvError(f"device{m}'s model: its own secret; {self.reader} cannot read it")
        return device_model(self.run, self.cfg, self.dataset, m)

    def head(self) -> torch.nn.Module:
        return head_model(self.run, self.cfg, self.dataset)

    def outputs(self, m: int) -> np.ndarray:
        """Device m's clean outputs on all its training records [n, embed_dim]."""
        return outputs(self.device(m), self.dataset.x_train[m])


WHITE_BOX = "white-box"  # a reader granted every party's final model (the deployed model)


def for_run(run, cfg: dict, dataset, reader: str) -> RunModels | None:
    """The run's models as ``reader`` sees them, or None when the run folder has no checkpoint."""
    from privzv.training.run_folder import CHECKPOINT

    return RunModels(run, cfg, dataset, reader) if (Path(run) / CHECKPOINT).is_file() else None


def _state(run: Path, party: str | None) -> dict:
    """The last checkpoint's state as ``party`` sees it (its own private part only; None: the
    public part only)."""
    from privzv.training.run_folder import CHECKPOINT, party_state

    if not (Path(run) / CHECKPOINT).is_file():
        raise PrivzvError(f"--run {str(run)!r}: no {CHECKPOINT} (the party's trained model)")
    return party_state(run, party)


def device_model(run, cfg: dict, dataset, m: int) -> torch.nn.Module:
    """Device ``m``'s bottom model at the end of the run (eval mode), read as device ``m``."""
    from privzv.training import models
    from privzv.training.messages import device_name

    model = models.device_model(
        dataset, m, cfg["embed_dim"], cfg.get("device_model"), cfg.get("model_weights")
    )
    _load(model, lambda: _state(run, device_name(m))["devices"][m]["model"], f"device{m}'s model")
    return model.eval()


def head_model(run, cfg: dict, dataset) -> torch.nn.Module:
    """The server's head at the end of the run (eval mode; public)."""
    from privzv.training import models

    head = models.server_model(cfg["devices"], cfg["embed_dim"], dataset.num_classes, kind=cfg["server_kind"])
    _load(head, lambda: _state(run, None)["server"]["head"], "the server's head")
    return head.eval()


def _load(model: torch.nn.Module, state, what: str) -> None:
    """``model.load_state_dict(state())``; a checkpoint without it, or with one of another
    shape, is a ``PrivzvError`` naming the file."""
    from privzv.training.run_folder import CHECKPOINT

    try:
        model.load_state_dict(state())
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
        raise PrivzvError(
            f"{CHECKPOINT}: {what}: missing or not the run's model ({type(exc).__name__})"
        ) from None


@torch.no_grad()
def outputs(model: torch.nn.Module, x: torch.Tensor, batch: int = 512) -> np.ndarray:
    """``model`` applied to every row of ``x`` (no noise, no clip): [n, embed_dim]."""
    return torch.cat([model(x[i : i + batch]) for i in range(0, len(x), batch)]).double().numpy()
