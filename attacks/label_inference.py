"""Label inference by a device (or an eavesdropper) from the downlink it saw.

- Direct label inference (Fu et al., USENIX Security 2022): when the server sums the
  devices' outputs into the logits z and uses softmax cross-entropy, the gradient a device receives
  is dL/dz = softmax(z) - onehot(y): negative exactly at the true class. The label is the index of
  the most negative coordinate. Under DPZV or ZOO-VFL the device holds only a batch scalar and
  its own perturbed outputs (:meth:`View.gradient_rows`), and the same rule stays near chance.
  Summed over a record's rows (every round it appears in), the estimates' noise from the other
  records of each batch averages out while the record's own share adds up: the passive attacker
  then guesses once per record (``summed_label_inference``).
- Norm and direction scoring on binary tasks (Li et al., ICLR 2022): the per-sample
  gradient's norm, and its cosine with a reference built from a few records of known label.
  Scores are oriented with the same known records and reported as AUC.

The attacks take a :class:`~attacks.transcript_view.View` only; the true labels given beside it
are used to score the predictions, never to make them. Each result also reports a control
(``control_accuracy``, ``control_auc``): the same attack with every downlink value replaced by 1
(:meth:`View.without_downlink`), i.e. what the attacker's own uplinks give without the server's
reply. Under a batch scalar the cosine score of a row whose step has rows of known label equals
its control (the scalar's sign cancels).
"""

from __future__ import annotations

import numpy as np

from privzv.attacks import metrics
from privzv.attacks.transcript_view import View
from privzv.errors import PrivzvError

SCORINGS = ("norm", "cosine")


def direct_predictions(gradients: np.ndarray) -> np.ndarray:
    """Fu et al.'s rule: per row, the class whose gradient coordinate is the most negative."""
    g = np.asarray(gradients, dtype=float)
    if g.ndim != 2 or g.shape[1] < 2:
        raise PrivzvError(f"gradients: need shape (rows, classes >= 2), got {g.shape}")
    return np.argmin(g, axis=1)


def direct_label_inference(view: View, row_labels) -> dict:
    """Predict every row's label from ``view`` and score against ``row_labels`` (vs the prior)."""
    y = np.asarray(row_labels)
    out = metrics.classification_metrics(y, direct_predictions(view.gradient_rows()))
    control = direct_predictions(view.without_downlink().gradient_rows())
    out.update(
        control_accuracy=metrics.accuracy(y, control),
        rows=int(len(y)),
        feedback=view.feedback_kind,
        party=view.party,
    )
    return out


def summed_label_inference(view: View, labels) -> dict:
    """The same rule on each record's gradient estimates summed over its rows; one guess per
    record, scored against ``labels`` (indexed by record id) vs the prior."""
    y = np.asarray(labels)
    ids, grads = view.sum_per_record(view.gradient_rows())
    out = metrics.classification_metrics(y[ids], direct_predictions(grads))
    _, control = view.sum_per_record(view.without_downlink().gradient_rows())
    out.update(
        control_accuracy=metrics.accuracy(y[ids], direct_predictions(control)),
        records=int(len(ids)),
        rows=int(len(view.steps)),
        feedback=view.feedback_kind,
        party=view.party,
    )
    return out


def norm_scores(gradients: np.ndarray) -> np.ndarray:
    """L2 norm of each row (Li et al.'s norm attack)."""
    return np.linalg.norm(np.asarray(gradients, dtype=float), axis=1)


def cosine_scores(
    gradients: np.ndarray, steps: np.ndarray, known: np.ndarray, known_labels: np.ndarray
) -> np.ndarray:
    """Cosine of each row with its step's reference direction (Li et al.'s direction attack).

    The reference of a step is ``sum_k (2 y_k - 1) g_k / |g_k|`` over the rows of known label
    (``known`` mask, ``known_labels`` in {0, 1}) at that step; a step without such rows uses the
    latest earlier reference (the first one before any). Where the known rows cancel out at
    every step (no direction at all) every score is 0.
    """
    g = np.asarray(gradients, dtype=float)
    unit = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)
    steps = np.asarray(steps)
    uniq, step_index = np.unique(steps, return_inverse=True)
    signs = np.where(np.asarray(known_labels) == 1, 1.0, -1.0)
    refs = np.zeros((len(uniq), g.shape[1]))
    np.add.at(refs, step_index[known], signs[:, None] * unit[known])
    has = np.linalg.norm(refs, axis=1) > 0
    if not has.any():
        return np.zeros(len(g))
    fill = np.maximum.accumulate(np.where(has, np.arange(len(uniq)), -1))
    fill[fill < 0] = np.flatnonzero(has)[0]
    ref = refs[fill][step_index]
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    return np.sum(unit * ref, axis=1)


def binary_scoring(view: View, row_labels, known_records, scoring: str = "norm") -> dict:
    """Norm or cosine scoring of ``view``'s rows on a binary task, as AUC on the unknown rows.

    ``known_records`` are the record ids whose labels the attacker knows (a few per class); they
    orient the score (known positives must score higher on average) and give the cosine reference.
    The rows of known records are excluded from the evaluation.
    """
    if scoring not in SCORINGS:
        raise PrivzvError(f"scoring {scoring!r}: allowed are {', '.join(SCORINGS)}")
    if view.records is None:
        raise PrivzvError("binary scoring needs the attacker's batch ids (a device's view)")
    y = np.asarray(row_labels).astype(int)
    known = np.isin(view.records, np.asarray(known_records))
    if np.unique(y[known]).size != 2:
        raise PrivzvError("known_records: need records of both classes among the observed rows")
    scores = _oriented(view, scoring, known, y)
    out = metrics.scoring_metrics(y[~known], scores[~known])
    out["control_auc"] = metrics.roc_auc(
        y[~known], _oriented(view.without_downlink(), scoring, known, y)[~known]
    )
    out.update(scoring=scoring, rows=int((~known).sum()), feedback=view.feedback_kind, party=view.party)
    return out


def _oriented(view: View, scoring: str, known: np.ndarray, y: np.ndarray) -> np.ndarray:
    grads = view.gradient_rows()
    if scoring == "norm":
        scores = norm_scores(grads)
    else:
        scores = cosine_scores(grads, view.steps, known, y[known])
    if scores[known & (y == 1)].mean() < scores[known & (y == 0)].mean():
        scores = -scores
    return scores
