"""VAFL (Chen et al. 2020), the papers' first-order asynchronous baseline with forward vector noise.

Round with active device m, batch I:
device   h = h(w; x_I); each row clipped to L2 norm C; h~ = h + N(0, sigma^2 I) drawn from the
         device's private generator (the server never sees h or the noise); send ids, h~.
server   table[m, I] <- h~; loss on the batch (stale rows for the others); head SGD step;
         send g = d mean-loss / d h~  [B, E].
device   backpropagate g through the clipped embedding; SGD step (momentum).

The release is the noisy embedding, one per record: ``Release(clip=C, batch_size=B,
aggregate="per-sample", dim=embed_dim)``. Its secret is the device's features, observed by the
server: a different secret and observer than DPZV's downlink (docs/training.md,
"Methods"). The claim holds for each release alone, not for the run: the device's update
J(x_I)^T g moves its model by the batch's raw features, and the server sees every later
embedding of other records through that model, outside the noise. So its epsilon is no
whole-run guarantee (``PROTECTS = "none"``; ``tests/training/test_neighbours.py``). The device draws the noise, so it records the release in the ledger
(``RELEASED_BY``). The release has no head update: against the server (the observer of this
secret) the head is the server's own computation from DP embeddings and its own labels, so noise
on it would buy nothing; the labels are not protected by VAFL at all (the downlink gradient is
exact), and its epsilon says nothing about them.
"""

from __future__ import annotations

import dataclasses

from privzv.training import zo
from privzv.training.messages import SERVER, device_index, device_name
from privzv.training.methods import common, head

# The head's rate where ``--lr-server`` is open: at most HEAD_INPUT_STEP / s, s = M E sigma^2 the
# expected squared norm of the noise on one record's head input (normalised LMS, Nagumo & Noda
# 1967: an SGD step moves a linear layer's output by rate * ||x||^2 per unit of error, stable while
# that is O(1); the noise-free part, at most M C^2, is what the method's 0.05 was chosen for). At
# epsilon 10 on digits (sigma 0.632, C 0.1, s = 25.6, seed 0) the head at rate 0.05 ends at 0.100
# (the majority class), at 0.012 at 0.397 (docs/training.md, "Stable defaults of the vector-noise
# methods").
HEAD_INPUT_STEP = 0.3
# The device's rate where ``--lr-device`` is open, in a noised run: LR_DEVICE (chosen unclipped)
# times (EMBED_NORM / min(C, EMBED_NORM))^2. A row clipped to norm C < |h| passes the gradient
# through (C/|h|) times the projection off h, so a parameter step moves the head's input by
# (C/|h|)^2 times the unclipped step; EMBED_NORM is the embedding norm of the unclipped reference
# (the devices' initial embeddings: median norm 0.25 to 1.13 on the embedded datasets, seed 0,
# ``benchmarks/stable_defaults_grid.py --embedding-norms``).
# With noise the head's rate is capped (HEAD_INPUT_STEP) and the devices must carry the learning:
# at C = 0.1 (the default, ``methods.common.VECTOR_CLIP``) the rate is 5; seed 0, digits at
# epsilon 2 and 10 went from 0.100 and 0.406 to 0.428 and 0.828 (docs/results.md, "Stable
# defaults"). Without noise the head learns at LR_SERVER and rescales itself to the clipped rows,
# so the devices keep LR_DEVICE: at 5 their unclipped test embeddings grew (digits: test loss 351).
EMBED_NORM = 1.0


class VAFL(common.FirstOrderMethod):
    name = "vafl"
    RELEASED_BY = "device"
    PROTECTS = "none"
    DEFAULT_CLIP = common.VECTOR_CLIP  # in a private run (``default_clip``)

    @classmethod
    def default_clip(cls, config) -> float | None:
        """C where none is given or tuned: with noise VECTOR_CLIP (C = 10 lies far above the
        embeddings' norms, so the noise, proportional to C, grows with no more signal:
        docs/training.md, "Stable defaults"); without noise defaults.CLIP, which clips nothing
        (the test embeddings are not clipped, and a head trained on rows clipped to 0.1 then sees
        far larger ones: the test loss rises, tests/training/test_methods.py)."""
        return cls.DEFAULT_CLIP if config.private else None

    def head_input_power(self, head_module) -> float:
        """s = M E sigma^2 gain^2: the expected squared norm of the noise on one record's input to
        the head ``head_module`` (its public ``gain`` where it has one): M embeddings of E values,
        each with noise of std sigma."""
        cfg = self.config
        return cfg.devices * cfg.embed_dim * self.sigma**2 * getattr(head_module, "gain", 1.0) ** 2

    def setup_head(self, server) -> None:
        self.input_power = s = self.head_input_power(server.head)
        self.server_rate = min(self.LR_SERVER, HEAD_INPUT_STEP / s) if s > 0 else self.LR_SERVER
        self.head = head.first_order(self.config, server, None, self.server_rate)

    def device_rate(self) -> float:
        """LR_DEVICE (EMBED_NORM / min(C, EMBED_NORM))^2 with noise: the unclipped step of the
        head's input through a clip to C (``EMBED_NORM``); LR_DEVICE without noise or clipping."""
        clip = None if self.config.no_clip or not self.sigma else self.config.clip
        return self.LR_DEVICE * (EMBED_NORM / min(clip or EMBED_NORM, EMBED_NORM)) ** 2

    def default_rate(self, name: str) -> tuple[float, str]:
        rate = self.device_rate() if name == "lr_device" else self.LR_DEVICE
        if rate != self.LR_DEVICE:
            return rate, (
                f"VAFL.LR_DEVICE (EMBED_NORM / min(C, EMBED_NORM))^2 with noise, EMBED_NORM "
                f"{EMBED_NORM:g} (methods.vafl.device_rate)"
            )
        if name != "lr_server":
            return super().default_rate(name)
        return self.server_rate, (
            f"min(VAFL.LR_SERVER, {HEAD_INPUT_STEP:g} / s), s = M E sigma^2 = "
            f"{self.input_power:.4g} (methods.vafl.HEAD_INPUT_STEP)"
        )

    @classmethod
    def release(cls, config):
        return dataclasses.replace(super().release(config), head=None, protects=cls.PROTECTS)

    def device_send(self, device, ids):
        h = device.embed(ids)
        if not self.config.no_clip:
            h = zo.clip_rows(h, self.config.clip)
        device.scratch["h"] = h
        noisy = device.noise.add_gaussian(h.detach(), self.sigma)
        return self.message(device_name(device.index), SERVER, "embedding", ids=ids, h=noisy)

    def server_reply(self, server, up):
        m, ids, h = device_index(up.sender), up["ids"], up["h"]
        server.table.update(m, ids, h)
        grads = common.embedding_gradients(server, self.head, m, ids, h, self.train_server)
        return self.message(SERVER, up.sender, "gradient", g=grads / len(ids))

    def device_receive(self, device, down):
        self.backpropagate(device, down["g"])


METHOD = VAFL
