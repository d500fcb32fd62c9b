"""Membership inference (loss threshold): finds a memorising model's members, not a fresh one's."""

import pytest
import torch

from privzv.attacks import membership
from privzv.errors import PrivzvError


class _Sum(torch.nn.Module):
    def forward(self, embeddings):
        return sum(embeddings)


def _memoriser(n=200, d=20, classes=4, fit=True, seed=0):
    """Random labels: a model can only get members right by memorising them."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2 * n, d, generator=gen)
    y = torch.randint(classes, (2 * n,), generator=gen)
    torch.manual_seed(seed)
    bottom = torch.nn.Sequential(torch.nn.Linear(d, 256), torch.nn.ReLU(), torch.nn.Linear(256, classes))
    if fit:
        opt = torch.optim.Adam(bottom.parameters(), lr=1e-2)
        for _ in range(300):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(bottom(x[:n]), y[:n]).backward()
            opt.step()
    losses = membership.joint_losses(_Sum(), [bottom], [x], y)
    return losses[:n], losses[n:]


def test_loss_threshold_finds_a_memorising_models_members():
    members, others = _memoriser()
    out = membership.loss_threshold(members, others)
    assert out["auc"] > 0.9 and out["members"] == out["nonmembers"] == 200


def test_loss_threshold_on_an_untrained_model_is_chance():
    members, others = _memoriser(fit=False)
    assert abs(membership.loss_threshold(members, others)["auc"] - 0.5) < 0.08


def test_membership_needs_both_sets_and_the_runs_models(tmp_path):
    with pytest.raises(PrivzvError, match="at least 2"):
        membership.loss_threshold([0.1], [0.2, 0.3])
    from privzv.attacks import registry
    from privzv.training import data

    ds = data.load("digits", 2)
    with pytest.raises(PrivzvError, match="trained models"):
        registry.attack_transcripts("membership", lambda p: None, ds)
