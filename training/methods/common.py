"""Pieces shared by the methods: per-record losses, first-order head and device updates, the
first-order methods' base class, the device side of a seeded ZO step."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from privzv.release import Release
from privzv.training import zo
from privzv.training.methods.base import Method


def losses(head: nn.Module, embeddings: Sequence[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """Per-record cross-entropy of the head on the M embeddings: shape [B]."""
    return nn.functional.cross_entropy(head(list(embeddings)), labels, reduction="none")


def with_row(table_rows: list[torch.Tensor], m: int, emb: torch.Tensor) -> list[torch.Tensor]:
    """The M embeddings of a batch with device m's (fresh) embedding in place of its stale one."""
    rows = list(table_rows)
    rows[m] = emb
    return rows


def sgd(params, lr: float, momentum: float) -> torch.optim.SGD | None:
    """SGD with momentum over ``params``, or None when there is nothing to train."""
    params = [p for p in params if p.requires_grad]
    return torch.optim.SGD(params, lr=lr, momentum=momentum) if params else None


def first_order_step(optimizer: torch.optim.Optimizer | None, loss: torch.Tensor) -> None:
    """One first-order step on ``loss`` (no-op without an optimiser)."""
    if optimizer is None:
        return
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def lr(config_value: float | None, default: float) -> float:
    return default if config_value is None else float(config_value)


def dp_clip(config, sigma: float) -> float | None:
    """C when the run adds noise (the ZO baselines clip only under DP, as published), else None."""
    return config.clip if (config.private or sigma > 0) else None


def noted_seed(device) -> int:
    """``device.step_seed()``, noted in the device's transcript (the device knows it)."""
    seed = device.step_seed()
    device.note("seed", {"seed": torch.tensor([seed], dtype=torch.int64)})
    return seed


def embedding_gradients(server, optimizer, m: int, ids: torch.Tensor, emb: torch.Tensor,
                        train: bool) -> torch.Tensor:
    """Server side of first-order VFL: per-record gradients dl_i/dh_i [B, E] of the loss w.r.t.
    device m's embedding ``emb`` (the stale table for the others), and, if ``train``, one SGD step
    of the head on the batch-mean loss. Row i depends only on record i (the head is row-wise)."""
    leaf = emb.detach().clone().requires_grad_(True)
    per = losses(server.head, with_row(server.table.gather(ids), m, leaf), server.labels[ids])
    (grads,) = torch.autograd.grad(per.sum(), leaf, retain_graph=train)
    if train:
        first_order_step(optimizer, per.mean())
    return grads.detach()


class FirstOrderDevices:
    """Mixin for methods whose devices train by backpropagating a received embedding gradient."""

    def setup_devices(self, devices, default_lr: float) -> None:
        rate = lr(self.config.lr_device, default_lr)
        self.device_optimizers = {d.index: sgd(d.model.parameters(), rate, self.config.momentum)
                                  for d in devices}

    def backpropagate(self, device, grad: torch.Tensor) -> None:
        """Device m: backpropagate ``grad`` through the embedding kept in ``scratch['h']``; step."""
        if self.train_devices:
            opt = self.device_optimizers[device.index]
            opt.zero_grad(set_to_none=True)
            device.scratch["h"].backward(grad)
            opt.step()

    def optimizer_states(self, server_optimizer) -> dict:
        return {"devices": {m: o.state_dict() for m, o in self.device_optimizers.items()},
                "server": server_optimizer.state_dict() if server_optimizer else None}

    def load_optimizer_states(self, server_optimizer, state: dict) -> None:
        for m, o in self.device_optimizers.items():
            o.load_state_dict(state["devices"][m])
        if server_optimizer is not None and state["server"] is not None:
            server_optimizer.load_state_dict(state["server"])


class FirstOrderMethod(FirstOrderDevices, Method):
    """Base of vafl and fo-vector: first-order devices and head (SGD with momentum); the release
    is one clipped vector of dimension E per record: ``Release(C, B, "per-sample", dim=E)``."""

    LR_DEVICE = 0.05
    LR_SERVER = 0.05

    @classmethod
    def release(cls, config) -> Release:
        return Release(clip=config.clip, batch_size=config.batch_size, aggregate="per-sample",
                       neighbors=config.neighbors, dim=config.embed_dim)

    def setup(self, devices, server) -> None:
        self.setup_devices(devices, self.LR_DEVICE)
        self.optimizer = sgd(server.head.parameters(), lr(self.config.lr_server, self.LR_SERVER),
                             self.config.momentum)

    def extra_state(self) -> dict:
        return self.optimizer_states(self.optimizer)

    def load_extra_state(self, state: dict) -> None:
        self.load_optimizer_states(self.optimizer, state)


def loss_differences(server, m: int, stale: list[torch.Tensor], labels: torch.Tensor,
                     h_a: torch.Tensor, h_b: torch.Tensor, lam: float) -> torch.Tensor:
    """Per-record (l_i(h_a) - l_i(h_b)) / lam with device m's row replaced (papers/000 eq. (7)),
    the other devices' rows from the stale table ``stale``; no autograd."""
    with torch.no_grad():
        return (losses(server.head, with_row(stale, m, h_a), labels)
                - losses(server.head, with_row(stale, m, h_b), labels)) / lam


def perturbed_forwards(device, ids: torch.Tensor, shifts: Sequence[float]) -> list[torch.Tensor]:
    """Device side of a seeded ZO step (DPZV, ZOO-VFL): for each shift s in ``shifts``, in order,
    move the parameters in place by s * u (one draw and one add over ``device.flat``; nothing for
    s == 0) and run the model on the batch ``ids``; return the embeddings. u = u(seed) with
    seed = ``device.step_seed()``; the seed and ||g|| (computed from the first draw) are kept in
    ``device.scratch`` and the seed is noted in the device's transcript (the device knows it).
    At least one shift must be non-zero (lambda > 0)."""
    seed = noted_seed(device)
    x = device.x[ids]
    norm, outputs = None, []
    with torch.no_grad():
        for shift in shifts:
            if shift:
                norm = zo.perturb_(device.flat, seed, shift, norm)
            outputs.append(device.model(x))
    device.scratch.update(seed=seed, norm=norm)
    return outputs
