"""Curious- and malicious-client probes against DPZV's downlink scalar (label inference).

papers/002 Sec. VI-B: a dummy client sends c and c + u and reads the loss difference, estimating
the gradient of the loss with respect to its output, g ~ (f(c+u) - f(c)) u; with a summing server
dL/dz_y = softmax(z)_y - 1 is the only negative coordinate, so argmin g is the label (Fu et al.
2022, "direct label inference"). Against DPZV the reply is one scalar per batch,

    Delta = (1/B) sum_i clip_[-C,C]((f(c_i + lam u_i) - f(c_i - lam u_i)) / lam) + N(0, sigma^2),

computed here by training's own DPZV server step (``DPZV.server_reply``), with the server's
head frozen for the probe and its table filled with a benign device's embeddings.

- ``curious``: the paper's probe, one query per batch: random c_i, random u_i per record, and
  g_i = Delta * u_i. The batch mean mixes B records, so this stays near the prior.
- ``malicious``: perturb one target record only (u_i = 0 for the B - 1 fillers, which then add 0
  to Delta) and repeat R times, u_r cycling through a random orthonormal basis of R^E scaled to
  norm sqrt(E): g = mean_r Delta_r u_r is (2/B) * grad exactly (up to clipping and O(lam^2))
  once R is a multiple of E, plus noise of std sigma * sqrt(E/R) per coordinate. Each probe is one
  more release containing the target; DP bounds this attack only if those releases are accounted.

Decision rule: ``argmin g`` for a summing head ("sum"); for an MLP head ("mlp") the attacker
probes ``aux_per_class`` records of known label the same way and predicts the nearest class
centroid of the normalised g (a few known labels, as in Fu et al.'s model completion).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from privzv.attacks import metrics
from privzv.errors import PrivzvError
from privzv.training import models
from privzv.training.config import TrainConfig
from privzv.training.messages import SERVER, device_name
from privzv.training.methods.dpzv import DPZV
from privzv.training.noise import SeededNoise
from privzv.training.parties import EmbeddingTable, Server
from privzv.training.run import new_secret_seed

ATTACKER = 0  # device index of the attacking client; device 1 is benign
HEADS = ("sum", "mlp")


@dataclasses.dataclass
class ProbeSetup:
    """A DPZV server (frozen head, table of benign embeddings) and the method that replies."""

    method: DPZV
    server: Server
    embed_dim: int
    num_classes: int


def simulated_server(labels, num_classes: int, *, head: str = "sum", sigma: float = 0.0,
                     clip: float = 10.0, batch_size: int = 64, lam: float = 1e-3,
                     seed: int = 0, secret_seed: int | None = None) -> ProbeSetup:
    """Two devices, the attacker's row of the table zeroed, the benign row N(0, 1) embeddings.

    The server's noise is seeded by ``secret_seed`` (None: the OS's entropy), never by ``seed``,
    which the attacker knows.
    """
    if head not in HEADS:
        raise PrivzvError(f"head {head!r}: allowed are {', '.join(HEADS)}")
    labels = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    embed_dim = num_classes if head == "sum" else 16
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        head_model = models.server_model(2, embed_dim, num_classes, kind=head)
    table = EmbeddingTable(2, len(labels), embed_dim)
    gen = torch.Generator().manual_seed(seed)
    table.data[1] = torch.randn(len(labels), embed_dim, generator=gen)
    server = Server(head=head_model, labels=labels, table=table,
                    noise=SeededNoise(new_secret_seed() if secret_seed is None else secret_seed,
                                      "probe-server-noise"))
    config = TrainConfig(method="dpzv", devices=2, batch_size=batch_size, clip=clip, lam=lam,
                         embed_dim=embed_dim, server_kind=head, freeze="server")
    method = DPZV(config, sigma=sigma)
    method.setup([], server)
    return ProbeSetup(method, server, embed_dim, num_classes)


def _reply(setup: ProbeSetup, ids: torch.Tensor, c: torch.Tensor, u: torch.Tensor) -> float:
    """One DPZV round for the attacker's uplink (c +- lam u); the server's Delta."""
    lam = setup.method.lam
    up = setup.method.message(device_name(ATTACKER), SERVER, "embeddings", ids=ids,
                              h_plus=c + lam * u, h_minus=c - lam * u)
    return float(setup.method.server_reply(setup.server, up)["delta"])


def curious(setup: ProbeSetup, ids, seed: int = 0) -> np.ndarray:
    """Gradient estimates g_i = Delta * u_i, one query per batch of B records of ``ids``."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    b, out = setup.method.config.batch_size, []
    for start in range(0, len(ids), b):
        batch = ids[start:start + b]
        c = torch.randn(len(batch), setup.embed_dim, generator=gen)
        u = torch.randn(len(batch), setup.embed_dim, generator=gen)
        out.append(_reply(setup, batch, c, u) * u)
    return torch.cat(out).numpy()


def malicious(setup: ProbeSetup, ids, repeats: int, seed: int = 0) -> np.ndarray:
    """Gradient estimate of each target in ``ids`` from ``repeats`` probes perturbing it alone."""
    if not (isinstance(repeats, int) and repeats >= 1):
        raise PrivzvError(f"--repeats {repeats!r}: must be an integer >= 1")
    gen = torch.Generator().manual_seed(seed)
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    n, b = len(setup.server.labels), setup.method.config.batch_size
    out = np.zeros((len(ids), setup.embed_dim))
    for j, target in enumerate(ids.tolist()):
        fillers = torch.tensor([i for i in range(min(n, b + 1)) if i != target][:b - 1],
                               dtype=torch.long)
        batch = torch.cat([torch.tensor([target]), fillers])
        c = torch.zeros(len(batch), setup.embed_dim)
        basis = torch.linalg.qr(torch.randn(setup.embed_dim, setup.embed_dim, generator=gen))[0]
        for r in range(repeats):
            u = torch.zeros(len(batch), setup.embed_dim)
            u[0] = basis[:, r % setup.embed_dim] * setup.embed_dim ** 0.5
            out[j] += _reply(setup, batch, c, u) * u[0].numpy() / repeats
    return out


def predict(setup: ProbeSetup, grads: np.ndarray, aux_grads=None, aux_labels=None) -> np.ndarray:
    """Labels from gradient estimates: argmin (sum head) or nearest class centroid (aux)."""
    if aux_grads is None:
        if setup.method.config.server_kind != "sum":
            raise PrivzvError("an MLP head needs auxiliary records of known label")
        return grads.argmin(axis=1)
    unit = lambda g: g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)  # noqa: E731
    aux_labels = np.asarray(aux_labels)
    classes = np.unique(aux_labels)
    centroids = np.stack([unit(aux_grads[aux_labels == k]).mean(axis=0) for k in classes])
    return classes[(unit(grads) @ centroids.T).argmax(axis=1)]


def label_inference(labels, num_classes: int, *, variant: str = "malicious", repeats: int = 10,
                    targets: int = 200, aux_per_class: int = 5, head: str = "sum",
                    sigma: float = 0.0, clip: float = 10.0, batch_size: int = 64,
                    seed: int = 0, secret_seed: int | None = None) -> dict:
    """Run a probe on ``targets`` records of ``labels``; accuracy, prior and advantage.

    ``seed`` is the attacker's (targets, probe directions); ``secret_seed`` the server's noise.
    """
    if variant not in ("curious", "malicious"):
        raise PrivzvError(f"variant {variant!r}: allowed are curious, malicious")
    labels = np.asarray(labels)
    setup = simulated_server(labels, num_classes, head=head, sigma=sigma, clip=clip,
                             batch_size=batch_size, seed=seed, secret_seed=secret_seed)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    aux_ids = np.array([], dtype=int)
    if head == "mlp":
        aux_ids = np.concatenate([order[labels[order] == k][:aux_per_class]
                                  for k in range(num_classes)])
    target_ids = np.setdiff1d(order, aux_ids, assume_unique=True)[:targets]
    probe = ((lambda ids, s: curious(setup, ids, s)) if variant == "curious"
             else (lambda ids, s: malicious(setup, ids, repeats, s)))
    aux = (probe(aux_ids, seed + 1), labels[aux_ids]) if head == "mlp" else (None, None)
    pred = predict(setup, probe(target_ids, seed), *aux)
    out = metrics.classification_metrics(labels[target_ids], pred)
    out.update(variant=variant, repeats=repeats if variant == "malicious" else 1, head=head,
               sigma=sigma, clip=clip, batch_size=batch_size, targets=int(len(target_ids)),
               seed=seed)
    return out
