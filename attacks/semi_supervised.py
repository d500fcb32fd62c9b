"""Semi-supervised passive model completion (Fu et al., USENIX Security 2022, Sec. 5.1).

The attacker device fine-tunes a copy of its trained bottom model plus a small head on the few
records whose labels it knows and on all its other (unlabelled) records, with a small version of
MixMatch (Berthelot et al., NeurIPS 2019), the semi-supervised method Fu et al. use:

1. augment: x + N(0, (``noise`` s)^2) per feature, s the feature's standard deviation (the
   tabular stand-in for image augmentation);
2. guess the label of each unlabelled record: the mean softmax over ``K`` augmentations,
   sharpened p^(1/T) / sum p^(1/T);
3. mixup (lambda ~ Beta(alpha, alpha), lambda' = max(lambda, 1 - lambda)) of the labelled and the
   guessed batches with a shuffle of both;
4. loss: cross-entropy on the mixed labelled part + ``lambda_u`` (ramped up linearly over the
   steps) times the squared error between softmax and the mixed guesses on the unlabelled part.

Scored on the records whose labels the attacker does not know, against the prior and against
``model_completion``'s supervised classifier on the same bottom model's outputs.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from privzv.attacks import metrics
from privzv.attacks.model_completion import known_per_class
from privzv.errors import PrivzvError

STEPS, BATCH, LR = 300, 64, 1e-3
K, T, ALPHA, LAMBDA_U, NOISE = 2, 0.5, 0.75, 25.0, 0.1


def sharpen(p: torch.Tensor, temperature: float = T) -> torch.Tensor:
    """MixMatch's sharpening: p^(1/T), renormalised per row."""
    q = p ** (1.0 / temperature)
    return q / q.sum(dim=1, keepdim=True)


def semi_supervised_completion(
    bottom: nn.Module, x: torch.Tensor, labels, per_class: int = 10, seed: int = 0, steps: int = STEPS
) -> dict:
    """Accuracy of the fine-tuned bottom model + head on the records with unknown labels.

    ``bottom``: the attacker's trained bottom model (copied, not changed); ``x``: its features
    of every record; ``labels``: the true labels (``per_class`` per class known, the rest score).
    """
    y = np.asarray(labels)
    if len(x) != len(y):
        raise PrivzvError(f"features, labels: lengths differ ({len(x)} vs {len(y)})")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise PrivzvError(f"steps {steps!r}: must be an integer >= 1")
    known = known_per_class(y, per_class, seed)
    rest = np.setdiff1d(np.arange(len(y)), known)
    classes = int(y.max()) + 1
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    x = x.float()
    net = _network(bottom, x, classes)
    scale = NOISE * x[rest].std(dim=0, keepdim=True)
    onehot = torch.eye(classes)[torch.as_tensor(y)]  # read at known records only
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    augment = lambda v: v + scale * torch.randn(v.shape, generator=gen)  # noqa: E731
    for step in range(steps):
        lab = torch.as_tensor(known)[torch.randint(len(known), (BATCH,), generator=gen)]
        unl = torch.as_tensor(rest)[torch.randint(len(rest), (BATCH,), generator=gen)]
        views = [augment(x[unl]) for _ in range(K)]
        with torch.no_grad():
            guess = sharpen(torch.stack([net(v).softmax(1) for v in views]).mean(0))
        xs = torch.cat([augment(x[lab])] + views)
        ys = torch.cat([onehot[lab]] + [guess] * K)
        lam = float(torch.distributions.Beta(ALPHA, ALPHA).sample())
        lam = max(lam, 1 - lam)
        perm = torch.randperm(len(xs), generator=gen)
        mixed_x, mixed_y = lam * xs + (1 - lam) * xs[perm], lam * ys + (1 - lam) * ys[perm]
        logits = net(mixed_x)
        loss_x = -(mixed_y[:BATCH] * logits[:BATCH].log_softmax(1)).sum(1).mean()
        loss_u = ((logits[BATCH:].softmax(1) - mixed_y[BATCH:]) ** 2).mean()
        loss = loss_x + LAMBDA_U * min(1.0, step / steps) * loss_u
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        pred = net(x[rest]).argmax(1).numpy()
    out = metrics.classification_metrics(y[rest], pred)
    out.update(known_per_class=int(per_class), evaluated=int(len(rest)), steps=steps)
    return out


def _network(bottom: nn.Module, x: torch.Tensor, classes: int) -> nn.Module:
    """A trainable copy of ``bottom`` followed by a small head (one hidden layer)."""
    copied = copy.deepcopy(bottom).train()
    for p in copied.parameters():
        p.requires_grad_(True)
    with torch.no_grad():
        dim = copied(x[:1]).reshape(1, -1).shape[1]
    return nn.Sequential(copied, nn.Flatten(), nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, classes))
