"""fo-vector: first-order VFL with backward vector noise, the downlink counterpart of DPZV.

Round with active device m, batch I:
device   h = h(w; x_I); send ids, h.
server   table[m, I] <- h; per-record gradients g_i = dl_i/dh_i; each clipped to L2 norm C;
         g~_i = g_i + N(0, sigma^2 I) from the server's own generator; head step (DP-SGD in a
         private run, ``methods.head``); send g~ [B, E].
device   backpropagate g~ / B (the batch mean) through h; SGD step (momentum).

The release is one noisy clipped gradient per record: ``Release(clip=C, batch_size=B,
aggregate="per-sample", dim=embed_dim)`` with the head's update: same secret (labels, via the downlink) and observer
(the device) as DPZV, noise of dimension E instead of 1. Unlike DPZV's, its device update
J(x_I)^T g carries the batch's raw features into every later release, so the run's epsilon covers
labels only (``PROTECTS = "label"``, ``common.FirstOrderDevices``).
"""

from __future__ import annotations

import math

from privzv.training import zo
from privzv.training.messages import SERVER, device_index, device_name
from privzv.training.methods import common


class FOVector(common.FirstOrderMethod):
    name = "fo-vector"
    DEFAULT_CLIP = common.VECTOR_CLIP

    def downlink_noise_norm(self) -> float:
        """sigma sqrt(E / B): B rows of E noise values each, averaged over the batch."""
        return self.sigma * math.sqrt(self.config.embed_dim / self.config.batch_size)

    def device_send(self, device, ids):
        h = device.embed(ids)
        device.scratch["h"] = h
        return self.message(device_name(device.index), SERVER, "embedding", ids=ids, h=h.detach())

    def server_reply(self, server, up):
        m, ids, h = device_index(up.sender), up["ids"], up["h"]
        server.table.update(m, ids, h)
        grads = common.embedding_gradients(server, self.head, m, ids, h, self.train_server)
        if not self.config.no_clip:
            grads = zo.clip_rows(grads, self.config.clip)
        noisy = server.noise.stream("downlink").add_gaussian(grads, self.sigma)
        return self.message(SERVER, up.sender, "gradient", g=noisy)

    def device_receive(self, device, down):
        self.backpropagate(device, down["g"] / len(down["g"]))


METHOD = FOVector
