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
from privzv.training.methods import common


class VAFL(common.FirstOrderMethod):
    name = "vafl"
    RELEASED_BY = "device"
    PROTECTS = "none"

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
