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

Defaults of a private run (issue 22 item 5; docs/results.md, "Stable defaults"). Where no C is
given or tuned, ``DEFAULT_CLIP`` = 1: the loss differences are small (median |delta_i| 0.11 to
0.51 at initialisation on the embedded datasets) and the noise is proportional to C, so DPZV's
C = 10 clips nothing and cuts the release's signal-to-noise ratio 7 to 11 times against C = 1
(``benchmarks/zoo_vfl_diagnostics.py --loss-differences``). Where no device rate is given or tuned:
:meth:`ZooVFL.device_rate`, the published step eta C at any C, capped so that the noise alone moves
each device weight by at most ``NOISE_DRIFT`` over the run. Where no head rate is given:
:meth:`ZooVFL.head_rate`, the ZO step limited by the head's noise and its parameter count. A
private head steps on a secret sample of the table by default (``methods.head``, as the
first-order heads) with the share ``HEAD_TABLE_SHARE`` = 0.75 of each round's 1/z^2, not their
0.99; the rule, derived for the head on the round's batch, was re-measured for the sampled one on
seed 100 and kept (docs/results.md, "Stable defaults").

DP option (downlink, the same release as DPZV's): clip each delta_i to [-C, C] (NaN -> 0,
+-inf -> +-C), add z ~ N(0, sigma^2) from the server's own generator to the sum / B:
``Release(clip=C, batch_size=B, aggregate="mean")``. Dividing by B, not by the batch's length,
keeps the sensitivity 2C/B on an epoch's smaller last batch. Without DP nothing is clipped (the baseline
as published). arXiv:2502.20565v2 instead evaluated this baseline with VAFL's forward embedding noise.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from privzv.training import zo
from privzv.training.messages import SERVER
from privzv.training.methods import common
from privzv.training.methods.czofo import only_device_threats
from privzv.training.methods.dpzv import DPZV

# A private device step moves the weights by eta Delta u, |Delta| <= C before noise and the noise
# proportional to C, so the step scales as eta C: the published rate LR_DEVICE at the paper's C = 10
# (arXiv:2502.20565v2, App. G) is this product at any C.
RATE_TIMES_CLIP = 0.05
# The noise's drift over a run: a device step moves each weight by eta z u_j (u_j of variance 1 on
# the sqrt(d) sphere, z ~ N(0, sigma^2)); heavy-ball momentum mu sums n such steps into a random
# walk of standard deviation eta sigma sqrt(n) / (1 - mu) per weight, whatever d. Measured on
# mnist1d (seed 0, secret seed 0, C = 1; docs/results.md, "Stable defaults"): a drift of 2 ends at
# test loss 163, 0.49 learns (accuracy 0.157, test loss 2.79).
NOISE_DRIFT = 0.5
# The head's step eta C_h: with C_h below its per-example derivatives (medians 0.62 to 1.05 at
# initialisation, ``benchmarks/zoo_vfl_diagnostics.py --head-derivatives``) a clipped step is about
# the step of the unclipped head at rate eta C_h, and 0.01 is the largest such rate that learned
# without noise on mnist1d (``--head --rates``: 0.01 ends at 0.230, 0.03 oscillates, 0.06 diverges).
HEAD_RATE_TIMES_CLIP = 0.01
# The head's noise drift over a run (one step a round, no momentum: eta sigma_h sqrt(T) per
# weight), as NOISE_DRIFT for the devices but 0.1: at the noise bound alone (drift 0.3 on the
# 5,000-round runs) mnist-5k at epsilon 2 fell from 0.190 to 0.124; at 0.1 it ends at 0.177
# (docs/results.md, "Stable defaults").
HEAD_DRIFT = 0.1


class ZooVFL(DPZV):
    name = "zoo-vfl"
    LR_DEVICE = 5e-3
    LR_SERVER = 0.005
    UPLINK = ("h", "h_perturbed")
    MULTI_DIRECTION = False  # one direction, as published
    ZO_DEVICE_RATE = False  # its own rule (device_rate)
    DEFAULT_CLIP = 1.0  # where none is given or tuned (module docstring)
    # its downlink trains its devices: at head.TABLE_SHARE 0.99 the downlink's z_d is 10 z (its
    # sigma 2.28 on breast-cancer at epsilon 2, against 1.11 with the head on the round's batch).
    # Of 0.5, 0.75, 0.9 and 0.99 (six tuning cells each, seed 100; docs/results.md, "Stable
    # defaults") 0.75 had the best mean and beat the majority class in every cell.
    HEAD_TABLE_SHARE = 0.75

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
        records = max([len(server.labels), *(len(d.x) for d in devices)])  # D, public: the server's
        # labels, or a device's own rows (a Flower device process sets up with an empty server;
        # the Flower server with no devices)
        self.device_steps = self.config.epochs * math.ceil(records / self.config.batch_size)
        self.lr_device = common.lr(self.config.lr_device, self.device_rate())
        place = next((p.device for p in server.head.parameters()), None)
        zeros = [torch.zeros(1, self.config.embed_dim, device=place)] * self.config.devices
        with torch.no_grad():  # K: the head's outputs (public, its architecture)
            self.classes = server.head(zeros).shape[-1]
        self.head_size = sum(p.numel() for p in self.head.params)  # P
        self.head_steps = self.config.devices * self.device_steps  # T: one a round
        self.head.lr = common.lr(self.config.lr_server, self.head_rate())

    def device_rate(self) -> float:
        """The device rate where ``--lr-device`` is open: ``LR_DEVICE`` without noise; in a private
        run RATE_TIMES_CLIP / C, capped at NOISE_DRIFT (1 - mu) / (sigma sqrt(n)), n = epochs
        ceil(D / B) the steps of each device, mu the device momentum, so that the noise's random
        walk moves each device weight by at most NOISE_DRIFT (a standard deviation) over the run."""
        if not (self.sigma and self.clip):
            return self.LR_DEVICE
        cap = NOISE_DRIFT * (1 - self.config.device_momentum) / (self.sigma * math.sqrt(self.device_steps))
        return min(RATE_TIMES_CLIP / self.clip, cap)

    def head_rate(self) -> float:
        """The head rate where ``--lr-server`` is open: ``LR_SERVER`` without a DP head; else
        HEAD_RATE_TIMES_CLIP / C_h, capped at ln(K) / (sigma_h^2 P), P the head's parameters, and
        at HEAD_DRIFT / (sigma_h sqrt(T)), T = M n its steps. A ZO step along v on the sqrt(P)
        sphere with a clipped scalar plus N(0, sigma_h^2) gains eta |g|^2 and loses
        (L/2) eta^2 sigma_h^2 P to the noise (Nesterov and Spokoiny 2017: the ZO rate shrinks like
        1/P), so the best rate is |g|^2 / (L sigma_h^2 P), and |g|^2 / (2L), at most what one step
        can remove, is below the initial cross-entropy ln K: half that bound. The last cap keeps
        the noise's random walk to HEAD_DRIFT per weight (docs/results.md, "Stable defaults")."""
        dp = self.head_dp
        if dp is None or not dp.sigma:
            return self.LR_SERVER
        return min(
            HEAD_RATE_TIMES_CLIP / dp.clip,
            math.log(self.classes) / (dp.sigma**2 * self.head_size),
            HEAD_DRIFT / (dp.sigma * math.sqrt(self.head_steps)),
        )

    def default_rate(self, name: str) -> tuple[float, str]:
        head = name == "lr_server"
        rate = self.head_rate() if head else self.device_rate()
        if rate == (self.LR_SERVER if head else self.LR_DEVICE):
            return super().default_rate(name)
        if head:
            return rate, (
                f"min({HEAD_RATE_TIMES_CLIP:g} / C_h, ln(K) / (sigma_h^2 P), {HEAD_DRIFT:g} / (sigma_h "
                f"sqrt(T))), K = {self.classes}, P = {self.head_size}, T = {self.head_steps:g} "
                "(methods.zoo_vfl.head_rate)"
            )
        return rate, (
            f"min({RATE_TIMES_CLIP:g} / C, {NOISE_DRIFT:g} (1 - mu) / (sigma sqrt(n))), n = "
            f"{self.device_steps:g} steps of each device (methods.zoo_vfl.device_rate)"
        )

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
