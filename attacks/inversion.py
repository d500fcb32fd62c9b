"""White-box model inversion of a device's embeddings by the server (He, Zhang & Lee 2019, "Model
inversion attacks against collaborative inference", Sec. 4: regularised maximum likelihood).

The embeddings are those the server receives at inference time: the trained bottom model's
outputs for each record, which none of the methods noise (their DP noise is training-time only;
training-time uplinks come from older models, which the final model does not invert well).
Given a device's bottom model f and the embedding h the server received for a record, find

    x^ = argmin_x ||f(x) - h||^2 + lam ||x - x_0||^2,    x within the auxiliary records' range,

by Adam from x_0 = the auxiliary mean (the prior), projecting onto the per-feature range after
each step. The attack is granted the device's trained model (white box: a model published after
training, or a colluding party) -- an upper bound on the server's black-box inverse network
(``feature_inference``, which needs no model). Scored like ``feature-server``: MSE / R^2 on the
non-auxiliary records against the server's labels-only regression (or the auxiliary mean).
"""

from __future__ import annotations

import numpy as np
import torch

from privzv.attacks import feature_inference, metrics
from privzv.errors import PrivzvError


def invert(
    model: torch.nn.Module,
    embeddings,
    x_init,
    low,
    high,
    *,
    steps: int = 500,
    lr: float = 0.05,
    reg: float = 1e-3,
) -> np.ndarray:
    """rMLE reconstruction of the inputs whose outputs under ``model`` are ``embeddings``."""
    h = torch.as_tensor(np.asarray(embeddings), dtype=torch.float32)
    x0 = torch.as_tensor(np.asarray(x_init), dtype=torch.float32).expand(len(h), *np.shape(x_init))
    lo = torch.as_tensor(np.asarray(low), dtype=torch.float32)
    hi = torch.as_tensor(np.asarray(high), dtype=torch.float32)
    x = x0.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    for p in model.parameters():
        p.requires_grad_(False)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - h) ** 2).sum() + reg * ((x - x0) ** 2).sum()
        loss.backward()
        opt.step()
        with torch.no_grad():
            x.copy_(torch.maximum(torch.minimum(x, hi), lo))
    return x.detach().double().numpy()


def model_inversion(
    model: torch.nn.Module, embeddings, features, labels=None, aux: int = 200, seed: int = 0, steps: int = 500
) -> dict:
    """Invert ``embeddings`` (a row per record) through ``model``; score against ``features``."""
    h = np.asarray(embeddings, dtype=float)
    x = np.asarray(features, dtype=float)
    if len(h) != len(x):
        raise PrivzvError(f"embeddings, features: {len(h)} vs {len(x)} rows")
    known, rest = feature_inference.split_auxiliary(len(h), aux, seed)
    flat = x.reshape(len(x), -1)
    prior = x[known].mean(axis=0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        rec = invert(model, h[rest], prior, x[known].min(axis=0), x[known].max(axis=0), steps=steps).reshape(
            len(rest), -1
        )
    if labels is None:
        base, name = np.broadcast_to(flat[known].mean(axis=0), rec.shape), "aux-mean"
    else:
        y = feature_inference.one_hot(labels)
        base = feature_inference.fit_predict("ridge", y, flat, known, rest, seed)
        name = "labels regression"
    out = metrics.regression_metrics(flat[rest], rec, baseline_pred=base)
    out.update(aux=int(aux), evaluated=int(len(rest)), baseline=name, steps=steps)
    return out
