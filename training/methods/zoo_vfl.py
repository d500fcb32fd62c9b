"""ZOO-VFL (Zhang et al., CIKM 2021; a baseline in arXiv:2502.20565 and 2306.16077): ZO on devices and server.

Round with active device m, batch I (|I| = B):

device   seed s, u = u(s) uniform on the sqrt(d_m) sphere (training.zo, as DPZV).
         h = h(w; x_I); w <- w - lam*u; h^ = h(w; x_I); send ids, h, h^.
         (one-sided two-point estimator, arXiv:2306.16077, eqs. (2)-(3); perturbing by -lam*u instead of
         +lam*u is the same estimator, u and -u being equally likely, and leaves w where DPZV's
         restore-and-update step expects it)
server   delta_i = (L_i(h) - L_i(h^)) / lam with the stale table for the other devices;
         Delta = sum_i delta_i / B (B the configured batch size, also for an epoch's smaller
         last batch, as DPZV), sent as one float32. table[m, I] <- h.
         Head: zeroth-order update (two-point, seeded from the server's own generator; DPZV's),
         in a private run with clipped per-example derivatives and noise (``methods.head``).
device   w <- w + (lam - eta*Delta) * u: restores and updates in one pass (DPZV's step).

DP option (downlink, the same release as DPZV's): clip each delta_i to [-C, C] (NaN -> 0,
+-inf -> +-C), add z ~ N(0, sigma^2) from the server's own generator to the sum / B:
``Release(clip=C, batch_size=B, aggregate="mean")``. Dividing by B, not by the batch's length,
keeps the sensitivity 2C/B on an epoch's smaller last batch. Without DP nothing is clipped (the baseline
as published). arXiv:2502.20565v2 instead evaluated this baseline with VAFL's forward embedding noise.
"""

from __future__ import annotations

import dataclasses

from privzv.training import zo
from privzv.training.messages import SERVER
from privzv.training.methods import common
from privzv.training.methods.czofo import only_device_threats
from privzv.training.methods.dpzv import DPZV


class ZooVFL(DPZV):
    name = "zoo-vfl"
    LR_DEVICE = 5e-3
    LR_SERVER = 0.005
    UPLINK = ("h", "h_perturbed")
    MULTI_DIRECTION = False  # one direction, as published
    ZO_DEVICE_RATE = False  # its published rate LR_DEVICE

    @classmethod
    def release(cls, config):
        only_device_threats(config)
        return super().release(config)

    @classmethod
    def zeroth_order_head(cls, config) -> bool:
        return True

    @classmethod
    def uplink_batch(cls, config) -> int:
        return config.batch_size

    def setup(self, devices, server) -> None:
        only_device_threats(self.config)
        self.config = dataclasses.replace(self.config, server_update="zo")
        super().setup(devices, server)
        self.clip = common.dp_clip(self.config, self.sigma)
        self.keep = None

    def shifts(self) -> tuple[float, float]:
        """h at w itself, then h^ after moving the parameters by -lam u."""
        return (0.0, -self.lam)

    def server_reply(self, server, up):
        m, ids, labels, h, h_perturbed = self.received(server, up)
        rows = common.with_row(server.table.gather(ids), m, h)
        delta = common.loss_differences(server, m, rows, labels, h, h_perturbed, self.lam)
        total = zo.clip_scalars(delta, self.clip).sum() / self.config.batch_size
        big_delta = server.noise.stream("downlink").add_gaussian(total, self.sigma).reshape(1).float()
        server.table.update(m, ids, h)
        if self.train_server:
            self.head.step(rows, labels)
        return self.message(SERVER, up.sender, "delta", delta=big_delta)


METHOD = ZooVFL
