"""Membership inference against the trained VFL model (head and device bottom models).

Attacker = the server at inference time: to predict a record it receives every device's
embedding of it (computed by the trained bottom models) and holds the head and the labels, so it
can evaluate the joint model's loss on any candidate record. The loss-threshold attack (Yeom et
al. 2018, "Privacy Risk in Machine Learning", the baseline of Carlini et al. 2022's LiRA paper)
scores a record by its negative loss: training records (members) tend to have lower loss.

Evaluated on equal numbers of members (training records) and non-members (test records), drawn
at random; reported as AUC (baseline 0.5) and TPR at FPR 1e-3 / 1e-2 (``metrics.scoring_metrics``).
"""

from __future__ import annotations

import numpy as np
import torch

from privzv.attacks import metrics
from privzv.errors import PrivzvError


@torch.no_grad()
def joint_losses(head, device_models, features, labels, batch: int = 512) -> np.ndarray:
    """Per-record cross-entropy of ``head`` on the devices' outputs for ``features`` (a list,
    one tensor per device) and ``labels``."""
    y = torch.as_tensor(labels, dtype=torch.long)
    out = []
    for i in range(0, len(y), batch):
        emb = [m(x[i : i + batch]) for m, x in zip(device_models, features)]
        out.append(torch.nn.functional.cross_entropy(head(emb), y[i : i + batch], reduction="none"))
    return torch.cat(out).double().numpy()


def loss_threshold(member_losses, nonmember_losses, seed: int = 0) -> dict:
    """Score = -loss on a balanced random sample of members and non-members; AUC and TPRs."""
    a = np.asarray(member_losses, dtype=float).ravel()
    b = np.asarray(nonmember_losses, dtype=float).ravel()
    if a.size < 2 or b.size < 2:
        raise PrivzvError("membership inference: need at least 2 members and 2 non-members")
    n = min(a.size, b.size)
    rng = np.random.default_rng(seed)
    a, b = rng.choice(a, n, replace=False), rng.choice(b, n, replace=False)
    scores = -np.nan_to_num(np.concatenate([a, b]), nan=np.inf, posinf=1e30)
    labels = np.concatenate([np.ones(n, int), np.zeros(n, int)])
    out = metrics.scoring_metrics(labels, scores)
    out.update(
        members=int(n),
        nonmembers=int(n),
        baseline_auc=0.5,
        mean_member_loss=float(a.mean()),
        mean_nonmember_loss=float(b.mean()),
    )
    return out
