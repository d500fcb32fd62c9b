"""Semi-supervised (MixMatch-style) model completion: beats the prior on features that carry the
label, falls to it on labels independent of the features, leaves the bottom model unchanged."""

import numpy as np
import pytest
import torch
from torch import nn

from privzv.attacks import semi_supervised as ss
from privzv.errors import PrivzvError


def _records(n=800, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(classes, size=n)
    means = rng.normal(size=(classes, 12))
    x = torch.tensor(means[y] * 0.8 + rng.normal(size=(n, 12)), dtype=torch.float32)
    return x, y


def _bottom(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))


def test_completion_beats_prior_and_keeps_the_bottom_model():
    x, y = _records()
    bottom = _bottom()
    before = [p.clone() for p in bottom.parameters()]
    out = ss.semi_supervised_completion(bottom, x, y, per_class=5, seed=0, steps=200)
    assert out["advantage"] > 0.4 and out["evaluated"] == len(y) - 25
    assert all(torch.equal(a, b) for a, b in zip(before, bottom.parameters()))


def test_completion_on_independent_labels_is_prior():
    x, y = _records()
    shuffled = np.random.default_rng(1).permutation(y)
    out = ss.semi_supervised_completion(_bottom(), x, shuffled, per_class=5, seed=0, steps=200)
    assert abs(out["advantage"]) < 0.06


def test_sharpen_lowers_entropy_and_keeps_rows_normalised():
    p = torch.tensor([[0.5, 0.3, 0.2], [0.25, 0.25, 0.5]])
    q = ss.sharpen(p, 0.5)
    assert torch.allclose(q.sum(1), torch.ones(2))
    assert torch.allclose(q[0], torch.tensor([25, 9, 4]) / 38.0)
    assert (q.max(1).values > p.max(1).values).all()


def test_bad_input_is_refused():
    x, y = _records(n=100)
    with pytest.raises(PrivzvError, match="lengths differ"):
        ss.semi_supervised_completion(_bottom(), x, y[:50])
    with pytest.raises(PrivzvError, match="steps"):
        ss.semi_supervised_completion(_bottom(), x, y, per_class=2, steps=0)
