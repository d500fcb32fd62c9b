"""White-box model inversion (He et al. 2019 rMLE): recovers features through an injective
model, beats the labels-only baseline, and learns nothing from embeddings that are pure noise."""

import numpy as np
import torch

from privzv.attacks import inversion


def _device(n=600, d=8, e=16, classes=4, seed=0):
    """Features = class mean + a per-record part; an injective bottom model (e >= d, tanh)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(classes, size=n)
    x = rng.normal(size=(classes, d))[y] * 0.5 + rng.normal(size=(n, d))
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(d, e), torch.nn.Tanh())
    with torch.no_grad():
        h = model(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
    return model, x, y, h


def test_inversion_recovers_features_beyond_the_labels():
    model, x, y, h = _device()
    out = inversion.model_inversion(model, h, x, y, aux=100)
    assert out["baseline"] == "labels regression"
    assert out["r2"] > 0.9 and out["r2"] - out["baseline_r2"] > 0.5


def test_inversion_of_noise_is_no_better_than_the_labels():
    model, x, y, h = _device()
    noise = np.random.default_rng(1).uniform(-1, 1, size=h.shape)
    out = inversion.model_inversion(model, noise, x, y, aux=100)
    assert out["mse"] >= out["baseline_mse"] * 0.95
