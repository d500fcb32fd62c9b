"""Feature inference: the server inverts a device's embeddings, or a device reads another's features.

- attacker = server (He et al. 2019, "Model inversion attacks against collaborative inference",
  its inverse-network attack; VFLAIR's TBM): an inverse model from the embeddings the
  server received for a record to that record's features on the victim device, trained on a few
  auxiliary records whose features the server knows. The server owns every record's label, so
  its baseline is the same regressor on the one-hot labels alone (labels predict features: R^2
  ~0.3 on digits), and the attack regresses on [labels, embeddings]: the gain over the baseline
  is what the embeddings add. Without labels the baseline is the auxiliary mean (R^2 = 0).
  Forward vector noise (VAFL) noises these embeddings; DPZV sends them clean.
- attacker = a device: the other device's features regressed on the downlink rows the attacker
  received plus its own features, trained on a few auxiliary records; baseline: the same regressor
  on the attacker's own features alone (what it could infer without the protocol).

Both report MSE and R^2 of the attack and of its baseline on the non-auxiliary records.
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from privzv.attacks import metrics
from privzv.errors import PrivzvError

REGRESSORS = ("ridge", "mlp")


def _regressor(kind: str, seed: int):
    if kind == "ridge":
        return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 4, 15)))
    if kind == "mlp":
        return make_pipeline(
            StandardScaler(),
            MLPRegressor(
                hidden_layer_sizes=(128,),
                alpha=1e-2,
                max_iter=2000,
                early_stopping=True,
                validation_fraction=0.15,
                n_iter_no_change=50,
                random_state=seed,
            ),
        )
    raise PrivzvError(f"regressor {kind!r}: allowed are {', '.join(REGRESSORS)}")


def _flat(name: str, x, n: int | None = None) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    arr = arr.reshape(len(arr), -1)
    if n is not None and len(arr) != n:
        raise PrivzvError(f"{name}: {len(arr)} rows, expected {n}")
    return arr


def split_auxiliary(n: int, aux: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random ``aux`` auxiliary record positions (the attacker's knowledge) and the rest."""
    if isinstance(aux, bool) or not isinstance(aux, (int, np.integer)) or not 2 <= aux < n - 1:
        raise PrivzvError(f"aux {aux!r}: must be an integer in [2, {n - 2}] (records: {n})")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[:aux]), np.sort(order[aux:])


def fit_predict(kind, x, y, aux, rest, seed):
    """Fit on the auxiliary rows; predict the rest with inputs clipped to the auxiliary range.

    The clip keeps the attacker from extrapolating on inputs unlike any it was fitted on (a
    diverged run's huge embeddings would otherwise give absurd reconstructions).
    """
    model = _regressor(kind, seed).fit(x[aux], y[aux])
    inputs = np.clip(x[rest], x[aux].min(axis=0), x[aux].max(axis=0))
    return model.predict(inputs).reshape(len(rest), -1)


def one_hot(labels) -> np.ndarray:
    """Labels as one-hot rows over the classes present (the server's own knowledge)."""
    y = np.asarray(labels).reshape(-1)
    return (y[:, None] == np.unique(y)[None, :]).astype(float)


def server_feature_inference(
    embeddings, features, labels=None, aux: int = 200, seed: int = 0, regressor: str = "ridge"
) -> dict:
    """Reconstruct ``features`` (victim device, a row per record) from the server's ``embeddings``.

    ``labels`` (the server's, a row per record): the baseline is the regressor on the labels
    alone and the attack uses [labels, embeddings]; ``None``: baseline = the auxiliary mean.
    """
    h = _flat("embeddings", embeddings)
    x = _flat("features", features, len(h))
    known, rest = split_auxiliary(len(h), aux, seed)
    if labels is None:
        pred = fit_predict(regressor, h, x, known, rest, seed)
        base, name = np.broadcast_to(x[known].mean(axis=0), pred.shape), "aux-mean"
    else:
        y = _flat("labels", one_hot(labels), len(h))
        pred = fit_predict(regressor, np.hstack([y, h]), x, known, rest, seed)
        base, name = fit_predict(regressor, y, x, known, rest, seed), "labels regression"
    out = metrics.regression_metrics(x[rest], pred, baseline_pred=base)
    out.update(aux=int(aux), evaluated=int(len(rest)), regressor=regressor, baseline=name)
    return out


def device_feature_inference(
    own_features, downlink, target_features, aux: int = 200, seed: int = 0, regressor: str = "ridge"
) -> dict:
    """Infer ``target_features`` (another device) from ``downlink`` rows plus ``own_features``."""
    own = _flat("own_features", own_features)
    fb = _flat("downlink", downlink, len(own))
    target = _flat("target_features", target_features, len(own))
    known, rest = split_auxiliary(len(own), aux, seed)
    pred = fit_predict(regressor, np.hstack([own, fb]), target, known, rest, seed)
    base = fit_predict(regressor, own, target, known, rest, seed)
    out = metrics.regression_metrics(target[rest], pred, baseline_pred=base)
    out.update(
        aux=int(aux), evaluated=int(len(rest)), regressor=regressor, baseline="own-features regression"
    )
    return out
