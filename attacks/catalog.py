"""The registered transcript attacks (``privzv.attacks.registry.ATTACKS``): one declaration each.

Each ``score(ctx)`` returns ``(metrics, nonfinite_values)``; the attack modules are imported
when an attack runs, so that building the CLI's parser stays light.
"""

from __future__ import annotations

import numpy as np

from privzv.attacks import active_completion
from privzv.attacks.registry import OWN, WHITE_BOX, Attack, Context, register
from privzv.attacks.transcript_view import record_embeddings, wire_view

WIRE = ("sent", "received")  # a party's uplinks and downlinks
MAJORITY = "majority class"


def _xy(ctx: Context):
    return [t.numpy() for t in ctx.dataset.x_train], ctx.dataset.y_train.numpy()


def _device_view(ctx: Context):
    return wire_view(ctx.load(f"device{ctx.attacker}"))


def _direct(ctx: Context):
    from privzv.attacks import label_inference

    view = _device_view(ctx)
    return label_inference.direct_label_inference(view, _xy(ctx)[1][view.records]), view.nonfinite


def _eavesdropper(ctx: Context):
    from privzv.attacks import label_inference

    view = wire_view(ctx.load("server"), party="eavesdropper")
    return label_inference.direct_label_inference(view, _xy(ctx)[1][view.records]), view.nonfinite


def _summed(ctx: Context):
    from privzv.attacks import label_inference

    view = _device_view(ctx)
    return label_inference.summed_label_inference(view, _xy(ctx)[1]), view.nonfinite


def _scoring(kind: str):
    def score(ctx: Context):
        from privzv.attacks import label_inference, model_completion

        y = _xy(ctx)[1]
        view = _device_view(ctx)
        known = model_completion.known_per_class(y, ctx.options["known_per_class"], ctx.seed)
        return label_inference.binary_scoring(view, y[view.records], known, kind), view.nonfinite

    return score


def _completion(ctx: Context):
    from privzv.attacks import model_completion

    x, y = _xy(ctx)
    a, nonfinite = ctx.attacker, 0
    if ctx.models is None:
        view = _device_view(ctx)
        (ids, emb), source, nonfinite = record_embeddings(view), "uplink", view.nonfinite
    else:
        ids, emb, source = np.arange(len(y)), ctx.models.outputs(a), "bottom-model"
    metrics = model_completion.model_completion(
        emb, y[ids], ctx.options["known_per_class"], ctx.seed, raw_features=x[a][ids]
    )
    metrics["source"] = source
    return metrics, nonfinite


def _semi(ctx: Context):
    """Semi-supervised completion: the attacker's trained bottom model, fine-tuned (beside it the
    supervised completion on the same model, ``supervised_accuracy``)."""
    from privzv.attacks import model_completion, semi_supervised

    a, per_class, y = ctx.attacker, ctx.options["known_per_class"], _xy(ctx)[1]
    metrics = semi_supervised.semi_supervised_completion(
        ctx.models.device(a), ctx.dataset.x_train[a], y, per_class, ctx.seed
    )
    metrics["supervised_accuracy"] = model_completion.model_completion(
        ctx.models.outputs(a), y, per_class, ctx.seed
    )["accuracy"]
    return metrics, 0


def _active(ctx: Context):
    """Active completion: the run trained again with the attacker's optimiser amplified (beside
    it passive completion of the honest run's bottom model, ``passive_accuracy``, when the run has
    its checkpoint)."""
    from privzv.attacks import model_completion, party_models
    from privzv.training import seeds
    from privzv.training.config import TrainConfig

    a, per_class = ctx.attacker, ctx.options["known_per_class"]
    x, y = ctx.dataset.x_train[a], ctx.dataset.y_train.numpy()
    cfg = TrainConfig.from_dict(ctx.public["config"])
    model, accuracy = active_completion.malicious_run(
        cfg,
        ctx.dataset,
        a,
        sigma=ctx.public.get("sigma") or 0.0,
        secret_seed=seeds.derive(ctx.seed, "active-completion"),
    )
    metrics = model_completion.model_completion(
        party_models.outputs(model, x), y, per_class, ctx.seed, raw_features=x.numpy()
    )
    metrics.update(boost=active_completion.BOOST, malicious_test_accuracy=accuracy)
    if ctx.models is not None:
        metrics["passive_accuracy"] = model_completion.model_completion(
            ctx.models.outputs(a), y, per_class, ctx.seed
        )["accuracy"]
    return metrics, 0


def _feature_server(ctx: Context):
    from privzv.attacks import feature_inference

    x, y = _xy(ctx)
    view = wire_view(ctx.load("server"), device=ctx.victim)
    ids, emb = record_embeddings(view)
    return feature_inference.server_feature_inference(
        emb,
        x[ctx.victim][ids],
        y[ids],
        aux=ctx.options["aux"],
        seed=ctx.seed,
        regressor=ctx.options["regressor"],
    ), view.nonfinite


def _feature_device(ctx: Context):
    from privzv.attacks import feature_inference
    from privzv.errors import PrivzvError

    a, v = ctx.attacker, ctx.victim
    if a == v:
        raise PrivzvError(f"victim {v}: must differ from the attacker device {a}")
    x, _ = _xy(ctx)
    view = _device_view(ctx)
    ids, downlink = view.last_per_record(view.feedback)
    return feature_inference.device_feature_inference(
        x[a][ids],
        downlink,
        x[v][ids],
        aux=ctx.options["aux"],
        seed=ctx.seed,
        regressor=ctx.options["regressor"],
    ), view.nonfinite


def _membership(ctx: Context):
    from privzv.attacks import membership

    ds, models = ctx.dataset, ctx.models
    loss = lambda xs, labels: membership.joint_losses(  # noqa: E731
        models.head(), [models.device(m) for m in range(ds.devices)], xs, labels
    )
    return membership.loss_threshold(loss(ds.x_train, ds.y_train), loss(ds.x_test, ds.y_test), ctx.seed), 0


def _inversion(ctx: Context):
    """What the server receives at inference: the device's clean outputs."""
    from privzv.attacks import inversion

    x, y = _xy(ctx)
    v = ctx.victim
    return inversion.model_inversion(
        ctx.models.device(v), ctx.models.outputs(v), x[v], y, aux=ctx.options["aux"], seed=ctx.seed
    ), 0


SUM_ONLY = ("sum",)
SUM_WHY = (
    "its rule reads labels from a summing server's logit gradients; behind an MLP head "
    "embedding coordinates are not class logits"
)

for _attack in (
    Attack(
        "direct-label",
        "device reads labels from the sign of its per-sample gradients (Fu et al.)",
        "device",
        "its downlinks and its own uplinks",
        MAJORITY,
        "accuracy",
        _direct,
        transcript=WIRE,
        server_kinds=SUM_ONLY,
        why=SUM_WHY,
    ),
    Attack(
        "direct-label-eavesdropper",
        "the same rule on all the wire's downlinks (no device state)",
        "eavesdropper",
        "every uplink and downlink on the wire",
        MAJORITY,
        "accuracy",
        _eavesdropper,
        transcript=WIRE,
        server_kinds=SUM_ONLY,
        why=SUM_WHY,
    ),
    Attack(
        "direct-label-summed",
        "the same rule on each record's estimates summed over its rows",
        "device",
        "its downlinks and its own uplinks",
        MAJORITY,
        "accuracy",
        _summed,
        transcript=WIRE,
        server_kinds=SUM_ONLY,
        why=SUM_WHY,
    ),
    Attack(
        "norm-scoring",
        "binary labels scored by per-sample gradient norm, AUC (Li et al.)",
        "device",
        "its downlinks and uplinks, 10 known labels per class",
        "chance",
        "auc",
        _scoring("norm"),
        transcript=WIRE,
        binary=True,
    ),
    Attack(
        "cosine-scoring",
        "binary labels scored by gradient direction, AUC (Li et al.)",
        "device",
        "its downlinks and uplinks, 10 known labels per class",
        "chance",
        "auc",
        _scoring("cosine"),
        transcript=WIRE,
        binary=True,
    ),
    Attack(
        "model-completion",
        "classifier on the device's own bottom-model outputs, a few labels (Fu et al.)",
        "device",
        "its own bottom model (else its uplinks), 10 known labels per class",
        MAJORITY,
        "accuracy",
        _completion,
        transcript=WIRE,
        models=OWN,
    ),
    Attack(
        "model-completion-semi",
        "device fine-tunes its bottom model + a head, MixMatch-style (Fu et al.)",
        "device",
        "its own bottom model, 10 known labels per class",
        MAJORITY,
        "accuracy",
        _semi,
        models=OWN,
        needs_models=True,
    ),
    Attack(
        "model-completion-active",
        "device amplifies its own updates in training, then completes (Fu et al.)",
        "device",
        "the run's public config; trains it again maliciously",
        MAJORITY,
        "accuracy",
        _active,
        models=OWN,
        methods=active_completion.METHODS,
        needs_public=True,
    ),
    Attack(
        "feature-server",
        "server inverts a device's embeddings + its labels, auxiliary records (He et al.)",
        "server",
        "device 1's uplinks, every label, 200 auxiliary records",
        "labels-only regression",
        "mse",
        _feature_server,
        transcript=WIRE,
    ),
    Attack(
        "feature-device",
        "device infers another device's features from its downlink + own features",
        "device",
        "its downlinks, its own features, 200 auxiliary records",
        "own-features-only regression",
        "mse",
        _feature_device,
        transcript=WIRE,
    ),
    Attack(
        "membership",
        "server scores train vs test records by the trained model's loss (Yeom et al.)",
        "server",
        "every party's final model (white box), the labels",
        "chance",
        "auc",
        _membership,
        models=WHITE_BOX,
        needs_models=True,
    ),
    Attack(
        "feature-inversion",
        "server inverts inference-time embeddings through the device model (He et al.)",
        "server",
        "device 1's inference-time outputs and model (white box), 200 auxiliary records",
        "labels-only regression",
        "mse",
        _inversion,
        models=WHITE_BOX,
        needs_models=True,
    ),
):
    register(_attack)
