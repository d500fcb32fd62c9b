"""The transcript attacks by name: ``run_attack(name, run_dir, seed)`` attacks a finished run.

An attack reads the attacker's transcript only (``privzv.training.transcript.load``) and the
run's public config (``privzv.training.run_folder.public_config``, which refuses a path inside
the run's private area: the secret seed and noise states stay unread). The run's
dataset is loaded beside it for two things the attacker is granted or the scorer needs, kept
apart: the attacker's own features and its auxiliary knowledge (a few labels per class, a few
victim records), and the ground truth that scores the attack (labels, victim features).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import numpy as np

from privzv.attacks import (active_completion, feature_inference, inversion, label_inference,
                            membership, model_completion, party_models, semi_supervised)
from privzv.attacks.transcript_view import record_embeddings, wire_view
from privzv.errors import PrivzvError

ATTACKS = {
    "direct-label": "device reads labels from the sign of its per-sample gradients (Fu et al.)",
    "direct-label-eavesdropper": "the same rule on all the wire's downlinks (no device state)",
    "direct-label-summed": "the same rule on each record's estimates summed over its rows",
    "norm-scoring": "binary labels scored by per-sample gradient norm, AUC (Li et al.)",
    "cosine-scoring": "binary labels scored by gradient direction, AUC (Li et al.)",
    "model-completion": "classifier on the device's own bottom-model outputs, a few labels (Fu et al.)",
    "model-completion-semi": "device fine-tunes its bottom model + a head, MixMatch-style (Fu et al.)",
    "model-completion-active": "device amplifies its own updates in training, then completes (Fu et al.)",
    "feature-server": "server inverts a device's embeddings + its labels, auxiliary records (He et al.)",
    "feature-device": "device infers another device's features from its downlink + own features",
    "membership": "server scores train vs test records by the trained model's loss (Yeom et al.)",
    "feature-inversion": "server inverts inference-time embeddings through the device model (He et al.)",
}
NEEDS_MODELS = ("membership", "feature-inversion", "model-completion-semi")
WHITE_BOX = ("membership", "feature-inversion")   # granted every party's final model
DEFAULTS = {"attacker": 0, "victim": 1, "known_per_class": 10, "aux": 200, "regressor": "ridge"}


def run_attack(name: str, run_dir, seed: int = 0, **options) -> dict:
    """Attack the finished training run in ``run_dir``; returns the metrics and the run's setting.

    ``options`` (defaults in ``DEFAULTS``): ``attacker`` / ``victim`` device indices,
    ``known_per_class`` labels the attacker knows, ``aux`` auxiliary victim records, ``regressor``.
    ``nonfinite_values`` counts the NaN/inf/huge message values replaced before attacking
    (a diverged run; see ``privzv.attacks.transcript_view``).
    """
    _check_name(name)
    from privzv.training import run_folder, transcript

    run = Path(run_dir)
    saved = run_folder.public_config(run)
    cfg = saved["config"]

    dataset = _dataset(cfg["dataset"], cfg["devices"], cfg.get("data_dir"), cfg["seed"])
    out = attack_transcripts(name, lambda party: transcript.load(run, party), dataset, seed,
                             models=party_models.for_run(run, cfg, dataset, _reader(name, options)),
                             public=saved,
                             **options)
    out.update(run=str(run), method=cfg["method"], dataset=cfg["dataset"],
               server_kind=cfg["server_kind"], sigma=saved.get("sigma"),
               epsilon=cfg.get("epsilon"), threat=cfg.get("threat"))
    return out


def attack_transcripts(name: str, load: Callable[[str], object], dataset, seed: int = 0,
                       models: party_models.RunModels | None = None, public: dict | None = None,
                       **options) -> dict:
    """Run attack ``name`` on transcripts given by ``load(party)`` (a Transcript per party name).

    ``dataset`` (a ``privzv.training.data.VerticalDataset``) supplies the attacker's own features and
    auxiliary knowledge and the ground truth for scoring; nothing else of the run is read.
    ``models``: the run's trained models (``party_models.RunModels``). Model completion uses
    the attacker device's own clean bottom-model outputs when given (``source``
    "bottom-model"), else the last embedding of each record in its transcript (``source``
    "uplink": noised under VAFL). ``membership``, ``feature-inversion`` and
    ``model-completion-semi`` need them. ``public``: the run's public config (``config.json``:
    ``config`` and ``sigma``), which ``model-completion-active`` trains again with the attacker's
    malicious optimiser (``privzv.attacks.active_completion``).
    """
    _check_name(name)
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise PrivzvError(f"attack option {unknown[0]!r}: allowed are {', '.join(DEFAULTS)}")
    opt = {**DEFAULTS, **options}
    a, v = opt["attacker"], opt["victim"]
    for role, m in (("attacker", a), ("victim", v)):
        if not (isinstance(m, int) and 0 <= m < dataset.devices):
            raise PrivzvError(f"{role} {m!r}: allowed are device indices 0..{dataset.devices - 1}")
    y = dataset.y_train.numpy()
    x = [t.numpy() for t in dataset.x_train]

    if name in NEEDS_MODELS and models is None:
        raise PrivzvError(f"attack {name!r}: needs the run's trained models (checkpoint.pt)")
    if name == "membership":
        loss = lambda xs, labels: membership.joint_losses(   # noqa: E731
            models.head(), [models.device(m) for m in range(dataset.devices)], xs, labels)
        metrics = membership.loss_threshold(loss(dataset.x_train, dataset.y_train),
                                            loss(dataset.x_test, dataset.y_test), seed)
        return {"attack": name, "party": "server", "seed": seed, "options": opt,
                "metrics": metrics, "nonfinite_values": 0}
    if name in ("model-completion-semi", "model-completion-active"):
        return _completion(name, models, public, dataset, seed, opt)
    if name == "feature-inversion":       # what the server receives at inference: clean outputs
        metrics = inversion.model_inversion(models.device(v), models.outputs(v), x[v], y,
                                            aux=opt["aux"], seed=seed)
        return {"attack": name, "party": "server", "seed": seed, "options": opt,
                "metrics": metrics, "nonfinite_values": 0}
    if name == "direct-label-eavesdropper":
        view = wire_view(load("server"), party="eavesdropper")
        metrics, party = label_inference.direct_label_inference(view, y[view.records]), "eavesdropper"
    elif name == "feature-server":
        view = wire_view(load("server"), device=v)
        ids, emb = record_embeddings(view)
        metrics = feature_inference.server_feature_inference(
            emb, x[v][ids], y[ids], aux=opt["aux"], seed=seed, regressor=opt["regressor"])
        party = "server"
    else:
        party = f"device{a}"
        view = wire_view(load(party))
        if name == "direct-label":
            metrics = label_inference.direct_label_inference(view, y[view.records])
        elif name == "direct-label-summed":
            metrics = label_inference.summed_label_inference(view, y)
        elif name in ("norm-scoring", "cosine-scoring"):
            if dataset.num_classes != 2:
                raise PrivzvError(f"attack {name!r}: needs a binary task (e.g. breast-cancer); "
                                  f"{dataset.name} has {dataset.num_classes} classes")
            known = model_completion.known_per_class(y, opt["known_per_class"], seed)
            metrics = label_inference.binary_scoring(view, y[view.records], known,
                                                     name.split("-")[0])
        elif name == "model-completion":
            if models is None:
                (ids, emb), source = record_embeddings(view), "uplink"
            else:
                ids, emb, source = np.arange(len(y)), models.outputs(a), "bottom-model"
            metrics = model_completion.model_completion(emb, y[ids], opt["known_per_class"], seed,
                                                        raw_features=x[a][ids])
            metrics["source"] = source
        else:  # feature-device
            if a == v:
                raise PrivzvError(f"victim {v}: must differ from the attacker device {a}")
            ids, downlink = view.last_per_record(view.feedback)
            metrics = feature_inference.device_feature_inference(
                x[a][ids], downlink, x[v][ids], aux=opt["aux"], seed=seed,
                regressor=opt["regressor"])
    return {"attack": name, "party": party, "seed": seed, "options": opt, "metrics": metrics,
            "nonfinite_values": view.nonfinite}


def _reader(name: str, options: dict) -> str:
    """Whose models attack ``name`` may read: the attacker device's own, or (the white-box
    attacks, granted the deployed joint model) every party's."""
    if name in WHITE_BOX:
        return party_models.WHITE_BOX
    return f"device{options.get('attacker', DEFAULTS['attacker'])}"


def _completion(name: str, models, public, dataset, seed: int, opt: dict) -> dict:
    """Fu et al.'s semi-supervised and active model completion by device ``opt["attacker"]``.

    Semi-supervised: the attacker's trained bottom model, fine-tuned (baseline beside the prior:
    the supervised completion on the same model, ``supervised_accuracy``). Active: the run trained
    again with the attacker's optimiser amplified (baseline: passive completion on the honest
    run's bottom model, ``passive_accuracy``, when the run has its checkpoint)."""
    a, per_class = opt["attacker"], opt["known_per_class"]
    x, y = dataset.x_train[a], dataset.y_train.numpy()
    if name == "model-completion-semi":
        metrics = semi_supervised.semi_supervised_completion(models.device(a), x, y, per_class, seed)
        metrics["supervised_accuracy"] = model_completion.model_completion(
            models.outputs(a), y, per_class, seed)["accuracy"]
    else:
        from privzv.training import seeds
        from privzv.training.config import TrainConfig

        if public is None:
            raise PrivzvError(f"attack {name!r}: needs the run's public config (config.json)")
        cfg = TrainConfig.from_dict(public["config"])
        model, accuracy = active_completion.malicious_run(
            cfg, dataset, a, sigma=public.get("sigma") or 0.0,
            secret_seed=seeds.derive(seed, "active-completion"))
        metrics = model_completion.model_completion(party_models.outputs(model, x), y, per_class,
                                                    seed, raw_features=x.numpy())
        metrics.update(boost=active_completion.BOOST, malicious_test_accuracy=accuracy)
        if models is not None:
            metrics["passive_accuracy"] = model_completion.model_completion(
                models.outputs(a), y, per_class, seed)["accuracy"]
    return {"attack": name, "party": f"device{a}", "seed": seed, "options": opt,
            "metrics": metrics, "nonfinite_values": 0}


@functools.lru_cache(maxsize=2)
def _dataset(name: str, devices: int, data_dir, seed: int):
    """The run's dataset, loaded once for consecutive attacks on runs of the same data (read only)."""
    from privzv.training import data

    return data.load(name, devices, data_dir, seed=seed)


def _check_name(name: str) -> None:
    if name not in ATTACKS:
        raise PrivzvError(f"--attack {name!r}: allowed are {', '.join(ATTACKS)}")
