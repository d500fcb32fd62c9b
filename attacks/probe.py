"""Curious- and malicious-client probes against ZO feedback (label inference by a device).

arXiv:2306.16077, Sec. VI-B: a dummy client sends c and c + u and reads the loss difference, estimating
the gradient of the loss with respect to its output, g ~ (f(c+u) - f(c)) u; with a summing server
dL/dz_y = softmax(z)_y - 1 is the only negative coordinate, so argmin g is the label (Fu et al.
2022, "direct label inference"). Two server protocols, both computed by training's own server
step on a simulated server (head frozen, table filled with a benign device's embeddings):

- ``dpzv`` (``DPZV.server_reply``): one scalar per batch,
  Delta = (1/B) sum_i clip_[-C,C]((f(c_i + v_i) - f(c_i - v_i)) / lam) + N(0, sigma^2);
- ``per-sample`` (``CZOFO.server_reply`` with one direction, sigma 0): the paper's own protocol,
  d_i = (f(c_i + v_i) - f(c_i)) / lam per record, unclipped and unnoised.

Variants (v_i = lam u_i unless said otherwise):

- ``curious``: the paper's probe, one query per batch: random c_i, random u_i per record, and
  g_i = d_i u_i (d_i = Delta under ``dpzv``). A batch mean mixes B records: near the prior.
- ``malicious``: perturb one target record only (u_i = 0 for the B - 1 fillers, which then add 0
  to Delta) and repeat R times, u_r cycling through a random orthonormal basis of R^E scaled to
  norm sqrt(E): g = mean_r Delta_r u_r is (2/B) * grad exactly (up to clipping and O(lam^2))
  once R is a multiple of E, plus noise of std sigma * sqrt(E/R) per coordinate.
- ``saturating``: the same, but each probe pushes the target's quotient to the clip bound: v_r =
  t u_r with u_r a random unit vector and t = min(1, 100 C lam), so that |f(c+v) - f(c-v)| / lam
  ~ 2 t |<grad, u>| / lam exceeds C for all but nearly orthogonal u. Each reply is then
  sign(<grad, u_r>) C / B + noise: the largest signal a record can put into Delta. The estimate
  mean_r Delta_r u_r points along grad (1-bit compressed sensing: E[sign(<g,u>) u] is parallel
  to g for isotropic u; Plan & Vershynin 2013).
- ``duplicate-id``: the saturating probe with the target's id repeated B times in one uplink, so
  that all B terms of Delta are the target's: sensitivity 2C instead of 2C/B per release. A
  server that refuses repeated ids (the real server's check, ``privzv.training.sampling.malformed``,
  or a ``PrivzvError``) gets the single-copy saturating probe
  instead; ``refused`` counts those replies.

Each probe is one more release containing the target; DP bounds these attacks only if those
releases are accounted (and, for ``duplicate-id``, only if the server bounds a record's weight).

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
from privzv.training import models, sampling
from privzv.training.config import TrainConfig
from privzv.training.messages import SERVER, device_name
from privzv.training.methods.czofo import CZOFO
from privzv.training.methods.dpzv import DPZV
from privzv.training.noise import SeededNoise
from privzv.training.parties import EmbeddingTable, Server
from privzv.training.run import new_secret_seed

ATTACKER = 0  # device index of the attacking client; device 1 is benign
HEADS = ("sum", "mlp")
PROTOCOLS = ("dpzv", "per-sample")
VARIANTS = ("curious", "malicious", "saturating", "duplicate-id")


@dataclasses.dataclass
class ProbeSetup:
    """A server (frozen head, table of benign embeddings) and the method that replies."""

    method: DPZV | CZOFO
    server: Server
    embed_dim: int
    num_classes: int
    protocol: str = "dpzv"
    checks_uplinks: bool = True  # the real server's uplink check (``sampling.malformed``)


def simulated_server(
    labels,
    num_classes: int,
    *,
    head: str = "sum",
    sigma: float = 0.0,
    clip: float = 10.0,
    batch_size: int = 64,
    lam: float = 1e-3,
    protocol: str = "dpzv",
    seed: int = 0,
    secret_seed: int | None = None,
) -> ProbeSetup:
    """Two devices, the attacker's row of the table zeroed, the benign row N(0, 1) embeddings.

    ``protocol="per-sample"`` replies with per-record loss differences (the paper's protocol,
    VFL-CZOFO's server with one direction): no clip, no noise (``sigma`` must be 0). The server's
    noise is seeded by ``secret_seed`` (None: the OS's entropy), never by ``seed``, which the
    attacker knows.
    """
    if head not in HEADS:
        raise PrivzvError(f"head {head!r}: allowed are {', '.join(HEADS)}")
    if protocol not in PROTOCOLS:
        raise PrivzvError(f"protocol {protocol!r}: allowed are {', '.join(PROTOCOLS)}")
    if protocol == "per-sample" and sigma != 0:
        raise PrivzvError(f"sigma {sigma!r}: the per-sample protocol is the paper's, without noise")
    labels = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    embed_dim = num_classes if head == "sum" else 16
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        head_model = models.server_model(2, embed_dim, num_classes, kind=head)
    table = EmbeddingTable(2, len(labels), embed_dim)
    gen = torch.Generator().manual_seed(seed)
    table.data[1] = torch.randn(len(labels), embed_dim, generator=gen)
    server = Server(
        head=head_model,
        labels=labels,
        table=table,
        noise=SeededNoise(new_secret_seed() if secret_seed is None else secret_seed, "probe-server-noise"),
    )
    name = "dpzv" if protocol == "dpzv" else "czofo"
    config = TrainConfig(
        method=name,
        devices=2,
        batch_size=batch_size,
        clip=clip,
        lam=lam,
        embed_dim=embed_dim,
        server_kind=head,
        freeze="server",
    )
    method = (DPZV if protocol == "dpzv" else CZOFO)(config, sigma=sigma)
    method.setup([], server)
    return ProbeSetup(method, server, embed_dim, num_classes, protocol)


def _reply(setup: ProbeSetup, ids: torch.Tensor, c: torch.Tensor, u: torch.Tensor) -> float:
    """One DPZV round for the attacker's uplink (c +- lam u); the server's Delta."""
    return float(_feedback(setup, ids, c, setup.method.lam * u)[0])


def _feedback(setup: ProbeSetup, ids: torch.Tensor, c: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The reply to one uplink of the attacker, per row [B]: Delta repeated (``dpzv``, uplink
    c +- v) or the per-record difference (``per-sample``, uplink c and c + v)."""
    name = device_name(ATTACKER)
    if setup.protocol == "dpzv":
        up = setup.method.message(name, SERVER, "embeddings", ids=ids, h_plus=c + v, h_minus=c - v)
    else:
        up = setup.method.message(name, SERVER, "embeddings", ids=ids, h=c, h_perturbed=(c + v)[:, None, :])
    reason = sampling.malformed(up, len(setup.server.labels)) if setup.checks_uplinks else None
    if reason is not None:
        raise PrivzvError(f"uplink refused: {reason}")
    if setup.protocol == "dpzv":
        return setup.method.server_reply(setup.server, up)["delta"].double().expand(len(ids))
    return setup.method.server_reply(setup.server, up)["d"][:, 0].double()


def curious(setup: ProbeSetup, ids, seed: int = 0) -> np.ndarray:
    """Gradient estimates g_i = d_i * u_i, one query per batch of B records of ``ids``."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    b, out = setup.method.config.batch_size, []
    for start in range(0, len(ids), b):
        batch = ids[start : start + b]
        c = torch.randn(len(batch), setup.embed_dim, generator=gen)
        u = torch.randn(len(batch), setup.embed_dim, generator=gen)
        out.append(_feedback(setup, batch, c, setup.method.lam * u)[:, None] * u)
    return torch.cat(out).numpy()


def _fillers(setup: ProbeSetup, target: int) -> torch.Tensor:
    n, b = len(setup.server.labels), setup.method.config.batch_size
    return torch.tensor([i for i in range(min(n, b + 1)) if i != target][: b - 1], dtype=torch.long)


def malicious(setup: ProbeSetup, ids, repeats: int, seed: int = 0) -> np.ndarray:
    """Gradient estimate of each target in ``ids`` from ``repeats`` probes perturbing it alone."""
    _check_repeats(repeats)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    e, lam = setup.embed_dim, setup.method.lam
    out = np.zeros((len(ids), e))
    for j, target in enumerate(ids.tolist()):
        batch = torch.cat([torch.tensor([target]), _fillers(setup, target)])
        c = torch.zeros(len(batch), e)
        basis = torch.linalg.qr(torch.randn(e, e, generator=gen))[0]
        for r in range(repeats):
            v = torch.zeros(len(batch), e)
            v[0] = basis[:, r % e] * e**0.5 * lam
            out[j] += float(_feedback(setup, batch, c, v)[0]) * v[0].numpy() / (lam * repeats)
    return out


def saturation_step(clip: float, lam: float) -> float:
    """t of the saturating probe: |v| = t makes 2 t |<grad, u>| / lam >= C once |<grad, u>| >=
    0.005 (|grad| <= sqrt(2) for softmax cross-entropy), capped at 1 to stay near c."""
    return min(1.0, 100.0 * clip * lam)


def saturating(
    setup: ProbeSetup, ids, repeats: int, seed: int = 0, duplicate: bool = False
) -> tuple[np.ndarray, int]:
    """Saturating probes (``duplicate``: the target's id B times per uplink); (estimates, refused)."""
    _check_repeats(repeats)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    e, b = setup.embed_dim, setup.method.config.batch_size
    t = saturation_step(setup.method.config.clip, setup.method.lam)
    out, refused = np.zeros((len(ids), e)), 0
    for j, target in enumerate(ids.tolist()):
        single = torch.cat([torch.tensor([target]), _fillers(setup, target)])
        for _ in range(repeats):
            u = torch.randn(e, generator=gen)
            u /= u.norm()
            reply = None
            if duplicate:
                try:
                    reply = _feedback(
                        setup, torch.full((b,), target), torch.zeros(b, e), (t * u).expand(b, e).clone()
                    )[0]
                except PrivzvError:  # the server refuses repeated ids
                    refused += 1
            if reply is None:
                v = torch.zeros(len(single), e)
                v[0] = t * u
                reply = _feedback(setup, single, torch.zeros(len(single), e), v)[0]
            out[j] += float(reply) * u.numpy() / repeats
    return out, refused


def _check_repeats(repeats) -> None:
    if not (isinstance(repeats, int) and not isinstance(repeats, bool) and repeats >= 1):
        raise PrivzvError(f"--repeats {repeats!r}: must be an integer >= 1")


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


def run_probe(
    setup: ProbeSetup, variant: str, ids, repeats: int = 10, seed: int = 0
) -> tuple[np.ndarray, int]:
    """Gradient estimates of ``ids`` by ``variant`` on ``setup``; (estimates, refused replies)."""
    if variant not in VARIANTS:
        raise PrivzvError(f"variant {variant!r}: allowed are {', '.join(VARIANTS)}")
    if variant == "curious":
        return curious(setup, ids, seed), 0
    if variant == "malicious":
        return malicious(setup, ids, repeats, seed), 0
    return saturating(setup, ids, repeats, seed, duplicate=variant == "duplicate-id")


def label_inference(
    labels,
    num_classes: int,
    *,
    variant: str = "malicious",
    repeats: int = 10,
    targets: int = 200,
    aux_per_class: int = 5,
    head: str = "sum",
    sigma: float = 0.0,
    clip: float = 10.0,
    batch_size: int = 64,
    protocol: str = "dpzv",
    seed: int = 0,
    secret_seed: int | None = None,
    setup: ProbeSetup | None = None,
) -> dict:
    """Run a probe on ``targets`` records of ``labels``; accuracy, prior and advantage.

    ``seed`` is the attacker's (targets, probe directions); ``secret_seed`` the server's noise.
    ``setup``: a prepared server (e.g. a test's); by default ``simulated_server`` with the
    arguments given here.
    """
    if variant not in VARIANTS:
        raise PrivzvError(f"variant {variant!r}: allowed are {', '.join(VARIANTS)}")
    labels = np.asarray(labels)
    setup = setup or simulated_server(
        labels,
        num_classes,
        head=head,
        sigma=sigma,
        clip=clip,
        batch_size=batch_size,
        protocol=protocol,
        seed=seed,
        secret_seed=secret_seed,
    )
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    aux_ids = np.array([], dtype=int)
    if head == "mlp":
        aux_ids = np.concatenate([order[labels[order] == k][:aux_per_class] for k in range(num_classes)])
    target_ids = np.setdiff1d(order, aux_ids, assume_unique=True)[:targets]
    aux = (None, None)
    refused = 0
    if head == "mlp":
        aux_grads, refused = run_probe(setup, variant, aux_ids, repeats, seed + 1)
        aux = (aux_grads, labels[aux_ids])
    grads, more = run_probe(setup, variant, target_ids, repeats, seed)
    pred = predict(setup, grads, *aux)
    out = metrics.classification_metrics(labels[target_ids], pred)
    out.update(
        variant=variant,
        repeats=1 if variant == "curious" else repeats,
        head=head,
        sigma=setup.method.sigma,
        clip=setup.method.config.clip,
        batch_size=setup.method.config.batch_size,
        protocol=setup.protocol,
        targets=int(len(target_ids)),
        refused=refused + more,
        seed=seed,
    )
    return out
