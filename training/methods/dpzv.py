"""DPZV (papers/000 Algorithm 1, with the corrections of DESIGN.md "DPZV as implemented").

Round with active device m, batch I (|I| = B):

device   seed s = device.step_seed(); u = u(s) uniform on the sqrt(d_m) sphere (training.zo).
         w <- w + lam*u; h+ = h(w; x_I); w <- w - 2*lam*u; h- = h(w; x_I)     (eq. (6))
         send ids, h+, h-.   (keeps s, ||g|| and one copy of w for a bit-exact device_abort;
                             u is never stored)
server   delta_i = (f~(h+_i) - f~(h-_i)) / lam with the stale table for the other devices (eq. (7));
         c_i = clip_[-C,C](delta_i), NaN -> 0, +-inf -> +-C;  Delta = sum_i c_i / B + z,
         z ~ N(0, sigma^2) from the server's own generator                      (eq. (8))
         table[m, I] <- (h+ + h-)/2; head update: first-order SGD (default) or ZO (eq. (3)),
         a DP mechanism of its own in a private run (``methods.head``). send Delta (one float32).
device   w <- w + (lam - eta*Delta) * u: restores and updates in one pass       (eq. (9))

Secret subsampling (threat ``secret-subsampling``): the device sends a super-batch of B' records;
the server keeps each with probability p = B/B' using its own generator and tells nobody;
Delta = sum_{i kept} c_i / B + z (divided by the expected size B, so the sensitivity stays
2C/B). The release is ``Release(clip=C, batch_size=B, aggregate="mean")`` with the head's update
(``head.with_head``). If the server sends nothing (a refused uplink, a spent budget) the device
puts back the parameters it had before its step (``device_abort``, bit for bit).
Ablations: sigma = 0 (no noise), ``no_clip`` (no clipping; NaN/inf -> 0; never with noise).
"""
from __future__ import annotations

import torch

from privzv.release import Release
from privzv.training import zo
from privzv.training.messages import SERVER, device_index, device_name
from privzv.training.methods import common, head
from privzv.training.methods.base import Method


class DPZV(Method):
    name = "dpzv"
    LR_DEVICE = 0.03
    LR_SERVER = 0.05
    UPLINK = ("h_plus", "h_minus")   # names of the two embeddings sent, in order of computation

    @classmethod
    def release(cls, config) -> Release:
        return head.with_head(Release(clip=config.clip, batch_size=config.batch_size,
                                      aggregate="mean", neighbors=config.neighbors), config)

    @classmethod
    def uplink_batch(cls, config) -> int:
        return config.super_batch if config.threat == "secret-subsampling" else config.batch_size

    def setup(self, devices, server) -> None:
        cfg = self.config
        self.lam = cfg.lam
        self.clip = None if cfg.no_clip else cfg.clip
        self.lr_device = common.lr(cfg.lr_device, self.LR_DEVICE)
        self.keep = (cfg.batch_size / cfg.super_batch if cfg.threat == "secret-subsampling" else None)
        if cfg.server_update == "fo":
            self.head = head.first_order(cfg, server, self.head_dp, self.LR_SERVER)
        else:
            self.head = head.ZerothOrderHead(server.head, common.lr(cfg.lr_server, self.LR_SERVER),
                                             self.lam, server.noise, self.head_dp)
        self.buffers = ({d.index: torch.zeros_like(d.flat) for d in devices}
                        if cfg.device_momentum else {})

    # device, first half ---------------------------------------------------------------------
    def shifts(self) -> tuple[float, float]:
        """In-place moves of the parameters before each forward: +lam u, then -2 lam u (eq. (6))."""
        return (self.lam, -2.0 * self.lam)

    def device_send(self, device, ids):
        embeddings = common.perturbed_forwards(device, ids, self.shifts())
        return self.message(device_name(device.index), SERVER, "embeddings",
                            ids=ids, **dict(zip(self.UPLINK, embeddings)))

    # server ---------------------------------------------------------------------------------
    def received(self, server, up) -> tuple:
        """(m, ids, labels, first embedding, second embedding) of an uplink."""
        ids = up["ids"]
        return (device_index(up.sender), ids, server.labels[ids], *(up[k] for k in self.UPLINK))

    def server_reply(self, server, up):
        m, ids, labels, h_plus, h_minus = self.received(server, up)
        stale = server.table.gather(ids)
        delta = common.loss_differences(server, m, stale, labels, h_plus, h_minus, self.lam)
        kept = torch.ones(len(ids), dtype=torch.bool)
        if self.keep is not None:
            kept = server.noise.bernoulli(len(ids), self.keep)
            server.note("keep", {"mask": kept})
        clipped = zo.clip_scalars(delta, self.clip)
        total = clipped[kept].sum() / self.config.batch_size
        big_delta = server.noise.add_gaussian(total, self.sigma).reshape(1).float()
        h_mid = (h_plus + h_minus) / 2
        server.table.update(m, ids, h_mid)
        if self.train_server:   # the round's kept records only (a DP head steps even on none)
            self.head.step([r[kept] for r in common.with_row(stale, m, h_mid)], labels[kept])
        return self.message(SERVER, up.sender, "delta", delta=big_delta)

    # device, second half --------------------------------------------------------------------
    def device_abort(self, device):
        common.restore_after_abort(device)

    def device_receive(self, device, down):
        seed, norm = device.scratch["seed"], device.scratch["norm"]
        delta = float(down["delta"]) if self.train_devices else 0.0
        if device.index not in self.buffers:
            # restore + update in one pass (eq. (9))
            zo.perturb_(device.flat, seed, self.lam - self.lr_device * delta, norm)
            return
        u = zo.direction(device.flat, seed)       # transient: this pass's draw, then dropped
        with torch.no_grad():
            buf = self.buffers[device.index].mul_(self.config.device_momentum).add_(u, alpha=delta)
            device.flat.add_(u, alpha=self.lam).add_(buf, alpha=-self.lr_device)

    def extra_state(self) -> dict:
        return {"optimizer": self.head.state_dict(), "buffers": self.buffers}

    def load_extra_state(self, state: dict) -> None:
        self.head.load_state_dict(state["optimizer"])
        self.buffers = state["buffers"]


METHOD = DPZV
