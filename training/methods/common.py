"""Pieces shared by the methods: per-record losses, first-order device updates, the first-order
methods' base class, the device side of a seeded ZO step and its undo. The head's
step (plain or DP) is in :mod:`privzv.training.methods.head`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from privzv.release import Release
from privzv.training import accelerator, zo
from privzv.training.messages import SERVER
from privzv.training.methods import head
from privzv.training.methods.base import DEVICE, Method
from privzv.training.methods.head import losses


def with_row(table_rows: list[torch.Tensor], m: int, emb: torch.Tensor) -> list[torch.Tensor]:
    """The M embeddings of a batch with device m's (fresh) embedding in place of its stale one."""
    rows = list(table_rows)
    rows[m] = emb
    return rows


def sgd(params, lr: float, momentum: float) -> torch.optim.SGD | None:
    """SGD with momentum over ``params``, or None when there is nothing to train."""
    params = [p for p in params if p.requires_grad]
    return torch.optim.SGD(params, lr=lr, momentum=momentum) if params else None


def lr(config_value: float | None, default: float) -> float:
    return default if config_value is None else float(config_value)


def dp_clip(config, sigma: float) -> float | None:
    """C when the run adds noise (the ZO baselines clip only under DP, as published), else None."""
    return config.clip if (config.private or sigma > 0) else None


def noted_seeds(device, directions: int = 1) -> list[int]:
    """``device.step_seed(k)`` for k < ``directions``, noted in the device's transcript (the
    device knows them)."""
    seeds = [device.step_seed(k) for k in range(directions)]
    device.note("seed", {"seed": torch.tensor(seeds, dtype=torch.int64)})
    return seeds


def noted_seed(device) -> int:
    """``device.step_seed()``, noted in the device's transcript."""
    return noted_seeds(device)[0]


def embedding_gradients(
    server, head_step, m: int, ids: torch.Tensor, emb: torch.Tensor, train: bool
) -> torch.Tensor:
    """Server side of first-order VFL: per-record gradients dl_i/dh_i [B, E] of the loss w.r.t.
    device m's embedding ``emb`` (the stale table for the others), and, if ``train``, the head's
    step (``head.FirstOrderHead``) on the same rows, after the gradients. Row i depends only on
    record i (the head is row-wise)."""
    rows = server.table.gather(ids)
    labels = server.labels[ids]
    leaf = emb.detach().clone().requires_grad_(True)
    per = losses(server.head, with_row(rows, m, leaf), labels)
    (grads,) = torch.autograd.grad(per.sum(), leaf)
    if train:
        head_step.step(with_row(rows, m, emb.detach()), labels)
    return grads.detach()


# C of the methods that clip and noise a per-record gradient vector on the downlink (fo-vector,
# czofo) where none is given or tuned: every sweep of them chose it (training/tuned.py, HPARAMS:
# digits and mnist-5k). DPZV's C = 10 bounds a scalar loss difference; on these vectors it is far
# above their norms, so the noise (proportional to C) grows 100-fold for no signal. vafl takes it
# for its noised embeddings too, with a device rate that undoes the clip's shrinking of its
# gradient (``methods.vafl.EMBED_NORM``).
VECTOR_CLIP = 0.1
# The noise a first-order device step takes from a noised downlink: rate x nu at most
# (``FirstOrderDevices.device_rate``). Measured on breast-cancer, fo-vector, epsilon 2, C = 0.1,
# seed 0 (sigma 7.28, nu 5.15): rate 0.05 (the method's default) ends in test loss 8e8, 5e-4
# (digits' and mnist-5k's tuned rate) at 0.781; 5e-4 x 5.15 = 2.6e-3 (docs/training.md).
DEVICE_NOISE_STEP = 2.5e-3


class FirstOrderDevices:
    """Mixin for methods whose devices train by backpropagating a received embedding gradient.

    The device update J(x_I)^T g depends on the batch's raw features, and every later embedding
    of every record depends on that update: a record's features reach releases whose batch does
    not contain it, outside any noise. Their epsilon therefore covers labels only (docs/accounting.md,
    "Threat model contract"; ``tests/training/test_neighbours.py`` shows the releases move)."""

    PROTECTS = "label"
    # every device's first-order optimiser (its state is a non-DP function of its features); a
    # pooled DP head's open window (``methods.head``), where present
    SECRET_STATE = ((("devices", "*"), DEVICE), (("server", "head_pool"), SERVER))

    def downlink_noise_norm(self) -> float:
        """nu: the expected L2 norm of the noise in the batch-mean embedding gradient [B, E] a
        device backpropagates (0: its downlink carries no noise)."""
        return 0.0

    def device_rate(self) -> float:
        """The device rate where ``--lr-device`` is open: ``LR_DEVICE``, capped at
        ``DEVICE_NOISE_STEP / nu`` (:meth:`downlink_noise_norm`), so that the noise a step takes
        from the downlink is at most DEVICE_NOISE_STEP in the embedding gradient's units, whatever
        sigma (docs/training.md, "Stable defaults of the vector-noise methods")."""
        nu = self.downlink_noise_norm()
        return min(self.LR_DEVICE, DEVICE_NOISE_STEP / nu) if nu > 0 else self.LR_DEVICE

    def default_rate(self, name: str) -> tuple[float, str]:
        if name != "lr_device" or not self.downlink_noise_norm() > 0:
            return super().default_rate(name)  # type: ignore[misc]
        return self.device_rate(), (
            f"min({type(self).__name__}.LR_DEVICE, {DEVICE_NOISE_STEP:g} / nu), nu = "
            f"{self.downlink_noise_norm():.4g} the downlink noise norm (methods.common.device_rate)"
        )

    def setup_devices(self, devices) -> None:
        rate = lr(self.config.lr_device, self.device_rate())
        self.device_optimizers = {
            d.index: sgd(d.model.parameters(), rate, self.config.momentum) for d in devices
        }

    def backpropagate(self, device, grad: torch.Tensor) -> None:
        """Device m: backpropagate ``grad`` through the embedding kept in ``scratch['h']``; step."""
        if self.train_devices:
            opt = self.device_optimizers[device.index]
            opt.zero_grad(set_to_none=True)
            device.scratch["h"].backward(grad)
            opt.step()

    def setup_head(self, server) -> None:
        """``self.head``: the server head's first-order step, DP when ``self.head_dp`` is set."""
        self.head = head.first_order(self.config, server, self.head_dp, self.LR_SERVER)

    def extra_state(self) -> dict:
        return {
            "devices": {m: o.state_dict() for m, o in self.device_optimizers.items()},
            "server": self.head.state_dict(),
        }

    def load_extra_state(self, state: dict) -> None:
        for m, o in self.device_optimizers.items():
            o.load_state_dict(state["devices"][m])
        self.head.load_state_dict(state["server"])


class FirstOrderMethod(FirstOrderDevices, Method):
    """Base of vafl and fo-vector: first-order devices and head (SGD with momentum); the release
    is one clipped vector of dimension E per record: ``Release(C, B, "per-sample", dim=E)``,
    with the head's DP update (``head.with_head``)."""

    LR_DEVICE = 0.05
    LR_SERVER = 0.05

    @classmethod
    def release(cls, config) -> Release:
        return head.with_head(
            Release(
                clip=config.clip,
                batch_size=config.batch_size,
                aggregate="per-sample",
                neighbors=config.neighbors,
                dim=config.embed_dim,
                protects=cls.PROTECTS,
            ),
            config,
        )

    def setup(self, devices, server) -> None:
        self.setup_devices(devices)
        self.setup_head(server)


def loss_differences(
    server,
    m: int,
    stale: list[torch.Tensor],
    labels: torch.Tensor,
    h_a: torch.Tensor,
    h_b: torch.Tensor,
    lam: float,
) -> torch.Tensor:
    """Per-record (l_i(h_a) - l_i(h_b)) / lam with device m's row replaced (arXiv:2502.20565v3, eq. (7)),
    the other devices' rows from the stale table ``stale``; no autograd."""
    with torch.no_grad():
        return (
            losses(server.head, with_row(stale, m, h_a), labels)
            - losses(server.head, with_row(stale, m, h_b), labels)
        ) / lam


def perturbed_forwards(
    device, ids: torch.Tensor, shifts: Sequence[float], directions: int = 1
) -> list[torch.Tensor]:
    """Device side of a seeded ZO step (DPZV, ZOO-VFL) along ``directions`` = K directions
    u_1..u_K, u_k = u(seed_k), seed_k = ``device.step_seed(k)`` (noted in the device's
    transcript). For each direction, for each shift s in ``shifts``, in order: move the
    parameters in place by s * u_k (one chunked draw; nothing for s == 0) and run the model on
    the batch ``ids``; then, except after the last direction, move back by -sum(shifts) * u_k, so
    that every direction starts at w. Returns one embedding per shift: [B, E] for K = 1,
    [B, K, E] stacked over the directions otherwise. The seeds and their ||g|| are kept in
    ``device.scratch`` (``seeds``, ``norms``); the parameters end at w + sum(shifts) * u_K, which
    the update (or :func:`undo_perturbation`) takes back. At least one shift must be non-zero."""
    seeds = noted_seeds(device, directions)
    x = accelerator.load(device.x[ids], device.place)  # once for every forward
    norms, outputs = [], []
    with torch.no_grad():
        for k, seed in enumerate(seeds):
            norm, outs = None, []
            for shift in shifts:
                if shift:
                    norm = zo.perturb_(device.flat, seed, shift, norm)
                outs.append(device.forward(x))
            if k < directions - 1:
                zo.perturb_(device.flat, seed, -sum(shifts), norm)
            norms.append(norm)
            outputs.append(outs)
    device.scratch.update(seeds=seeds, norms=norms)
    if directions == 1:
        return outputs[0]
    return [torch.stack(per_shift, dim=1) for per_shift in zip(*outputs)]


def undo_perturbation(device, shifts: Sequence[float]) -> None:
    """Undo :func:`perturbed_forwards` (the server refused the uplink and sent nothing back): move
    by -sum(shifts) * u_K. Exact up to float32 rounding (the in-place moves do not cancel bit for
    bit); no copy of the parameters is kept. Since the scheduler asks the ledger before a device
    computes, only a refused (malformed or malicious) uplink comes here, never a budget stop."""
    zo.perturb_(device.flat, device.scratch["seeds"][-1], -sum(shifts), device.scratch["norms"][-1])
