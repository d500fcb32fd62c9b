"""Passive model completion (Fu et al., USENIX Security 2022), attacker = a device.

The device stacks a small classifier on its trained bottom model: its embeddings of its own
records, with the labels of a few records per class that it knows, predict the other records'
labels. Fu et al. fine-tune with semi-supervised MixMatch; this is the plain supervised version
(standardised embeddings, multinomial logistic regression), scored against the prior and against
the same classifier on the device's raw features (what the bottom model adds).
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from privzv.attacks import metrics
from privzv.errors import PrivzvError


def known_per_class(labels, per_class: int, seed: int) -> np.ndarray:
    """Indices of ``per_class`` records of every class, drawn at random (the attacker's labels)."""
    y = np.asarray(labels)
    if isinstance(per_class, bool) or not isinstance(per_class, (int, np.integer)) or per_class < 1:
        raise PrivzvError(f"per_class {per_class!r}: must be an integer >= 1")
    rng = np.random.default_rng(seed)
    picks = []
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        if len(members) <= per_class:
            raise PrivzvError(
                f"per_class {per_class}: class {c} has only {len(members)} records; "
                "need more than per_class to leave some to attack"
            )
        picks.append(rng.choice(members, per_class, replace=False))
    return np.sort(np.concatenate(picks))


def _fit_predict(x, y, known, seed):
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed))
    clf.fit(x[known], y[known])
    rest = np.setdiff1d(np.arange(len(y)), known)
    return rest, clf.predict(x[rest])


def model_completion(embeddings, labels, per_class: int = 10, seed: int = 0, raw_features=None) -> dict:
    """Accuracy of the completed model on the records whose labels the attacker does not know.

    ``embeddings[i]`` is the attacker's bottom-model output for its record i, ``labels[i]`` its
    true label (``per_class`` of them per class are the attacker's knowledge, the rest score it).
    With ``raw_features`` the same classifier on the raw features is reported as ``raw_accuracy``.
    """
    x = np.asarray(embeddings, dtype=float).reshape(len(embeddings), -1)
    y = np.asarray(labels)
    if len(x) != len(y):
        raise PrivzvError(f"embeddings, labels: lengths differ ({len(x)} vs {len(y)})")
    known = known_per_class(y, per_class, seed)
    rest, pred = _fit_predict(x, y, known, seed)
    out = metrics.classification_metrics(y[rest], pred)
    if raw_features is not None:
        raw = np.asarray(raw_features, dtype=float).reshape(len(y), -1)
        _, raw_pred = _fit_predict(raw, y, known, seed)
        out["raw_accuracy"] = metrics.accuracy(y[rest], raw_pred)
    out.update(known_per_class=int(per_class), evaluated=int(len(rest)))
    return out
