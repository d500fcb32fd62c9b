"""DPZV (arXiv:2502.20565v3, Algorithm 1, with the corrections in docs/training.md, "Methods").

Round with active device m, batch I (|I| = B), K = ``directions`` (default 1, the paper's):

device   seeds s_k = device.step_seed(k); u_k = u(s_k) uniform on the sqrt(d_m) sphere
         (training.zo). For each k: w <- w + lam*u_k; h+_k = h(w; x_I); w <- w - 2*lam*u_k;
         h-_k = h(w; x_I)  (eq. (6)); then, except for the last k, w <- w + lam*u_k.
         send ids, h+, h- ([B, E] for K = 1, [B, K, E] otherwise). Keeps the seeds and ||g_k||;
         u is never stored, nor is a copy of w.
server   delta_ik = (f~(h+_ik) - f~(h-_ik)) / lam with the stale table for the other devices
         (eq. (7)). K = 1: c_i = clip_[-C,C](delta_i), NaN -> 0, +-inf -> +-C. K > 1: record i's
         vector (delta_i1..delta_iK) scaled to L2 norm <= C as one vector (``zo.clip_rows``,
         non-finite -> 0). Delta = sum_i c_i / B + z, z ~ N(0, sigma^2 I_K) from the server's
         own generator (eq. (8)): a K-dim Gaussian mechanism of L2 sensitivity 2C/B
         (replace-one) or C/B (add-remove), whatever K, so the accounting does not change.
         table[m, I] <- mean of the 2K embeddings; head update: first-order SGD (default) or ZO
         (eq. (3)), a DP mechanism of its own in a private run (``methods.head``). send Delta
         (K float32).
device   w <- w + (lam - eta*Delta_K/K) * u_K and w <- w - (eta*Delta_k/K) * u_k for k < K:
         restores and updates along the average of the K directions (eq. (9) for K = 1). With
         ``device_momentum`` beta: buf <- beta*buf + sum_k Delta_k u_k / K; w <- w + lam*u_K -
         eta*buf, chunk by chunk.

Secret subsampling (threat ``secret-subsampling``): the device sends a super-batch of B' records;
the server keeps each with probability p = B/B' using its own generator and tells nobody;
Delta = sum_{i kept} c_i / B + z (divided by the expected size B, so the sensitivity stays
2C/B). The release is ``Release(clip=C, batch_size=B, aggregate="mean", dim=K)`` with the
head's update (``head.with_head``). If the server refuses the uplink and sends nothing, the
device moves back by lam*u_K (``device_abort``; exact up to float32 rounding). A budget stop
never reaches a device: the scheduler asks the ledger before the device computes.
Ablations: sigma = 0 (no noise), ``no_clip`` (no clipping; NaN/inf -> 0; never with noise).
"""

from __future__ import annotations

import torch

from privzv.release import Release
from privzv.training import zo
from privzv.training.messages import SERVER, device_index, device_name
from privzv.training.methods import common, head
from privzv.training.methods.base import DEVICE, Method


class DPZV(Method):
    name = "dpzv"
    LR_DEVICE = 0.03
    LR_SERVER = 0.05
    UPLINK = ("h_plus", "h_minus")  # names of the two embeddings sent, in order of computation
    MULTI_DIRECTION = True
    ZO_DEVICE_RATE = True
    # ZO momentum (a function of every device's releases, kept by its device); a pooled DP
    # head's open window (``methods.head``), where present
    SECRET_STATE = ((("buffers", "*"), DEVICE), (("optimizer", "head_pool"), SERVER))

    @classmethod
    def release(cls, config) -> Release:
        return head.with_head(
            Release(
                clip=config.clip,
                batch_size=config.batch_size,
                aggregate="mean",
                neighbors=config.neighbors,
                dim=config.directions,
                protects=cls.PROTECTS,
            ),
            config,
        )

    @classmethod
    def zeroth_order_head(cls, config) -> bool:
        return config.server_update == "zo"

    @classmethod
    def uplink_batch(cls, config) -> int:
        return config.super_batch if config.threat == "secret-subsampling" else config.batch_size

    def uplink_shapes(self, n: int) -> dict[str, tuple[int, ...]]:
        k, e = self.config.directions, self.config.embed_dim
        return {name: (n, e) if k == 1 else (n, k, e) for name in self.UPLINK}

    def setup(self, devices, server) -> None:
        cfg = self.config
        self.lam = cfg.lam
        self.directions = cfg.directions
        self.clip = None if cfg.no_clip else cfg.clip
        self.lr_device = common.lr(cfg.lr_device, self.LR_DEVICE)
        self.keep = cfg.batch_size / cfg.super_batch if cfg.threat == "secret-subsampling" else None
        if cfg.server_update == "fo":
            self.head = head.first_order(cfg, server, self.head_dp, self.LR_SERVER)
        else:
            self.head = head.zeroth_order_step(
                cfg, server, self.head_dp, common.lr(cfg.lr_server, self.LR_SERVER), self.lam
            )
        self.buffers = {d.index: torch.zeros_like(d.flat) for d in devices} if cfg.device_momentum else {}

    # device, first half ---------------------------------------------------------------------
    def shifts(self) -> tuple[float, float]:
        """In-place moves of the parameters before each forward: +lam u, then -2 lam u (eq. (6))."""
        return (self.lam, -2.0 * self.lam)

    def device_send(self, device, ids):
        embeddings = common.perturbed_forwards(device, ids, self.shifts(), self.directions)
        return self.message(
            device_name(device.index), SERVER, "embeddings", ids=ids, **dict(zip(self.UPLINK, embeddings))
        )

    # server ---------------------------------------------------------------------------------
    def received(self, server, up) -> tuple:
        """(m, ids, labels, first embedding, second embedding) of an uplink."""
        ids = up["ids"]
        return (device_index(up.sender), ids, server.labels[ids], *(up[k] for k in self.UPLINK))

    def server_reply(self, server, up):
        m, ids, labels, h_plus, h_minus = self.received(server, up)
        stale = server.table.gather(ids)
        kept = torch.ones(len(ids), dtype=torch.bool, device=labels.device)
        if self.keep is not None:
            kept = server.noise.stream("keep").bernoulli(len(ids), self.keep).to(labels.device)
            server.note("keep", {"mask": kept})
        total = self.clipped_mean(server, m, stale, labels, h_plus, h_minus, kept)
        big_delta = server.noise.stream("downlink").add_gaussian(total, self.sigma).reshape(-1).float()
        h_mid = (h_plus + h_minus) / 2
        if self.directions > 1:
            h_mid = h_mid.mean(dim=1)
        server.table.update(m, ids, h_mid)
        if self.train_server:  # the round's kept records only (a DP head steps even on none)
            self.head.step([r[kept] for r in common.with_row(stale, m, h_mid)], labels[kept])
        return self.message(SERVER, up.sender, "delta", delta=big_delta)

    def clipped_mean(self, server, m, stale, labels, h_plus, h_minus, kept) -> torch.Tensor:
        """The release before noise: sum over the kept records of each record's clipped loss
        differences, / B. K = 1: a scalar, each delta_i clipped to [-C, C]; K > 1: [K], each
        record's K-vector clipped to L2 norm C as one vector (sensitivity 2C/B either way)."""
        if self.directions == 1:
            delta = common.loss_differences(server, m, stale, labels, h_plus, h_minus, self.lam)
            return zo.clip_scalars(delta, self.clip)[kept].sum() / self.config.batch_size
        delta = torch.stack(
            [
                common.loss_differences(server, m, stale, labels, h_plus[:, k], h_minus[:, k], self.lam)
                for k in range(self.directions)
            ],
            dim=1,
        )
        clipped = (
            zo.clip_rows(delta, self.clip)
            if self.clip is not None
            else torch.nan_to_num(delta, nan=0.0, posinf=0.0, neginf=0.0)
        )
        return clipped[kept].sum(dim=0) / self.config.batch_size

    # device, second half --------------------------------------------------------------------
    def device_abort(self, device):
        common.undo_perturbation(device, self.shifts())

    def device_receive(self, device, down):
        seeds, norms = device.scratch["seeds"], device.scratch["norms"]
        k_count = len(seeds)
        deltas = down["delta"].tolist() if self.train_devices else [0.0] * k_count
        steps = [d / k_count for d in deltas]  # along the average of the K directions
        if device.index not in self.buffers:
            for k, (seed, norm, step) in enumerate(zip(seeds, norms, steps)):
                restore = self.lam if k == k_count - 1 else 0.0  # the last direction's +lam (eq. (9))
                zo.perturb_(device.flat, seed, restore - self.lr_device * step, norm)
            return
        buf = self.buffers[device.index]
        with torch.no_grad():
            for at, us in zo.sphere_chunks(
                device.flat.numel(), seeds, norms, device.flat.dtype, device.place
            ):
                b = buf[at].mul_(self.config.device_momentum)
                for u, step in zip(us, steps):
                    b.add_(u, alpha=step)
                device.flat[at].add_(us[-1], alpha=self.lam).add_(b, alpha=-self.lr_device)

    def extra_state(self) -> dict:
        return {"optimizer": self.head.state_dict(), "buffers": self.buffers}

    def load_extra_state(self, state: dict) -> None:
        self.head.load_state_dict(state["optimizer"])
        self.buffers = {m: b.to(self.buffers[m].device) for m, b in state["buffers"].items()}


METHOD = DPZV
