"""VFL-CZOFO (arXiv:2306.16077, "cascaded hybrid optimisation"): ZO across the wire, first order inside.

Round with active device m, batch I (|I| = B), n = ``PERTURBATIONS`` directions, lam = smoothing:

device   h_i = F_m(w_m; x_i) (autograd graph kept locally); for k = 1..n draw u_ik uniform on the
         unit sphere of R^E, one per record, from the device's step seed; send ids, h [B, E] and
         h^_ik = h_i + lam * u_ik [B, n, E].           (arXiv:2306.16077, Sec. III-B; the authors' code)
server   d_ik = (L_i(h^_ik) - L_i(h_i)) / lam: per-record loss differences with the stale table for
         the other devices (arXiv:2306.16077: the losses h_{i,m}, h^_{i,m} per sample). Send d [B, n].
         Head: first-order SGD on the batch mean loss (eq. (4)); DP-SGD in a private run
         (``methods.head``). table[m, I] <- h.
device   g_i = (E / n) * sum_k d_ik u_ik estimates dL_i/dh_i (eq. (3), phi(E) = E for the unit
         sphere); backpropagate g / B through the local model, SGD step (first order, with the
         run's ``momentum``).

The server sends d_ik / the loss differences rather than both losses of arXiv:2306.16077: the same
information for the device's estimator, one value per record and direction.

DP option (per-sample feedback, no batch averaging; docs/training.md, "Methods"): the
server clips each record's vector (d_i1..d_in) to L2 norm C (NaN/inf zeroed first, so the bound
holds whatever the losses) and adds N(0, sigma^2) to every value from its own generator. One
round is ``Release(clip=C, batch_size=B, aggregate="per-sample", dim=n)``: replacing one record
changes one row by at most 2C in L2. The devices train first order, so the run's epsilon covers
labels only (``PROTECTS = "label"``, ``common.FirstOrderDevices``). Without DP the feedback is not
clipped (the baseline of the paper). arXiv:2502.20565v2 instead evaluated this baseline with VAFL's forward embedding noise.
"""

from __future__ import annotations

import math

import torch

from privzv.errors import PrivzvError
from privzv.release import Release
from privzv.training import zo
from privzv.training.messages import SERVER, device_index, device_name
from privzv.training.methods import common, head
from privzv.training.methods.base import Method

PERTURBATIONS = 5  # n, arXiv:2502.20565v2, App. G Table 3


def unit_directions(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Directions uniform on the unit sphere of the last axis of ``shape``, from ``seed``."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    return g / g.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def embedding_gradient(d: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """ZO estimate of dL_i/dh_i, [B, E]: (E / n) * sum_k d_ik u_ik (arXiv:2306.16077, eq. (3), phi(E) = E
    for u uniform on the unit sphere, averaged over the n directions). ``d`` [B, n], ``u`` [B, n, E]."""
    n, embed_dim = u.shape[1], u.shape[2]
    return (embed_dim / n) * (d[:, :, None] * u).sum(dim=1)


def only_device_threats(config) -> None:
    """The baselines have no secret subsampling: refuse an accounting that would assume it."""
    if config.threat == "secret-subsampling":
        raise PrivzvError(
            f"--threat secret-subsampling: --method {config.method} does not "
            "implement it (only dpzv does); use device or eavesdropper"
        )


class CZOFO(common.FirstOrderDevices, Method):
    name = "czofo"
    LR_DEVICE = 0.05
    LR_SERVER = 0.05
    DEFAULT_CLIP = common.VECTOR_CLIP

    def downlink_noise_norm(self) -> float:
        """sigma E / sqrt(n B): a record's n noise values reach its gradient as (E / n) sum_k z_k u_k
        (squared norm E^2 sigma^2 / n in expectation, the u_k unit), averaged over the batch."""
        return self.sigma * self.config.embed_dim / math.sqrt(PERTURBATIONS * self.config.batch_size)

    @classmethod
    def release(cls, config) -> Release:
        only_device_threats(config)
        return head.with_head(
            Release(
                clip=config.clip,
                batch_size=config.batch_size,
                aggregate="per-sample",
                neighbors=config.neighbors,
                dim=PERTURBATIONS,
                protects=cls.PROTECTS,
            ),
            config,
        )

    def uplink_shapes(self, n: int) -> dict[str, tuple[int, ...]]:
        e = self.config.embed_dim
        return {"h": (n, e), "h_perturbed": (n, PERTURBATIONS, e)}

    def setup(self, devices, server) -> None:
        cfg = self.config
        self.lam = cfg.lam
        self.clip = common.dp_clip(cfg, self.sigma)
        self.setup_devices(devices)
        self.setup_head(server)

    def device_send(self, device, ids):
        seed = common.noted_seed(device)
        with torch.set_grad_enabled(self.train_devices):
            h = device.embed(ids)
        u = unit_directions(seed, (len(h), PERTURBATIONS, h.shape[1])).to(h.device)
        device.scratch.update(seed=seed, h=h)
        h = h.detach()
        return self.message(
            device_name(device.index),
            SERVER,
            "embeddings",
            ids=ids,
            h=h,
            h_perturbed=h[:, None, :] + self.lam * u,
        )

    def server_reply(self, server, up):
        m = device_index(up.sender)
        ids, h, h_perturbed = up["ids"], up["h"], up["h_perturbed"]
        labels = server.labels[ids]
        rows = common.with_row(server.table.gather(ids), m, h)
        with torch.no_grad():
            base = common.losses(server.head, rows, labels)
            diffs = (
                torch.stack(
                    [
                        common.losses(server.head, common.with_row(rows, m, hp), labels)
                        for hp in h_perturbed.unbind(dim=1)
                    ],
                    dim=1,
                )
                - base[:, None]
            )
        per_record = self.clip_feedback(diffs / self.lam)  # [B, n]
        noisy = server.noise.stream("downlink").add_gaussian(per_record, self.sigma)
        server.table.update(m, ids, h)
        if self.train_server:  # after the feedback is computed (arXiv:2306.16077, Alg. 1, lines 9-11)
            self.head.step(rows, labels)
        return self.message(SERVER, up.sender, "loss_differences", d=noisy.float())

    def clip_feedback(self, per_record: torch.Tensor) -> torch.Tensor:
        """Each record's row of n values clipped to L2 norm C (DP); non-finite values -> 0."""
        if self.clip is None:
            return torch.nan_to_num(per_record, nan=0.0, posinf=0.0, neginf=0.0)
        return zo.clip_rows(per_record, self.clip)

    def device_receive(self, device, down):
        if not self.train_devices:
            return
        h = device.scratch["h"]
        u = unit_directions(device.scratch["seed"], (len(h), PERTURBATIONS, h.shape[1])).to(h.device)
        self.backpropagate(device, embedding_gradient(down["d"], u) / len(h))  # d(mean loss)/dh


METHOD = CZOFO
