"""Train with your own ``torch.nn.Module``s (the Opacus / Flower habit: you build the models,
privzv runs the protocol).

    from privzv.training import fit, TrainConfig
    summary = fit(TrainConfig(devices=2, epsilon=1.0), dataset, "runs/mine",
                  devices=[net0, net1], head=head)

The run is an ordinary one (same config, run folder, ledger, privacy accounting and methods);
``devices`` are trained in place. Each module is checked before training by one dry forward on 2
records. The run's config.json records each module's architecture (``models.fingerprint``): a
resume gives the modules again and they must match. The CLI cannot rebuild such a run: ``privzv
train --resume`` and ``privzv attack run`` refuse it in one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from privzv.errors import PrivzvError
from privzv.training import data, models, run
from privzv.training.config import TrainConfig
from privzv.training.library_models import first_line

DRY_RECORDS = 2  # records of the dry forward that checks each module before training


def fit(
    config: TrainConfig | None,
    dataset: data.VerticalDataset,
    out,
    *,
    devices: Sequence[nn.Module] | None = None,
    head: nn.Module | None = None,
    **options,
) -> dict:
    """Train ``config`` on ``dataset`` (a ``VerticalDataset``) in the run folder ``out`` with the
    given ``devices`` (one module per device: its feature batch -> [B, embed_dim]) and ``head``
    (the list of M embeddings -> [B, num_classes] logits); either left None is privzv's own
    (``--device-model`` / ``--server-kind``). The run's ``dataset`` is ``dataset.name``.
    ``options``: ``run.train``'s (``resume``, ``extend``, ``secret_seed``, ``overwrite``,
    ``checkpoint_every``, ``progress``, ``announce``). Returns the run's summary. A resume takes
    ``config`` None (or the run's, longer with ``extend``), the same dataset and modules of the
    same architecture. Refusals are one-line ``PrivzvError``s naming the module.
    """
    if not isinstance(dataset, data.VerticalDataset):
        raise PrivzvError(f"dataset {type(dataset).__name__}: must be a privzv.training.data.VerticalDataset")
    unknown = sorted(set(options) - set(TRAIN_OPTIONS))
    if unknown:
        raise PrivzvError(f"fit() option {unknown[0]!r}: allowed are {', '.join(TRAIN_OPTIONS)}")
    given = models.Given(None if devices is None else tuple(devices), head)
    if config is None and not options.get("resume"):
        raise PrivzvError("config None: only with resume=True (the run's saved config)")
    if config is not None:
        if not isinstance(config, TrainConfig):
            raise PrivzvError(f"config {type(config).__name__}: must be a privzv.training.TrainConfig")
        config = dataclasses.replace(config, dataset=dataset.name)  # the run is labelled by its data
    check_modules(run.saved_config(out, python=True) if config is None else config, dataset, given)
    return run.train(config, Path(out), dataset=dataset, given=given, **options)


# run.train's options that fit passes on (engine: the devices of a Python run live here)
TRAIN_OPTIONS = ("resume", "extend", "secret_seed", "overwrite", "checkpoint_every", "progress", "announce")


def check_modules(config: TrainConfig, dataset: data.VerticalDataset, given: models.Given) -> None:
    """Each given module against what the run needs: one per device, fp32 parameters, parameters
    where the devices train, and a dry forward on ``DRY_RECORDS`` records giving [2, embed_dim]
    (devices) and [2, num_classes] (the head)."""
    if dataset.devices != config.devices:
        raise PrivzvError(
            f"dataset {dataset.name!r}: has {dataset.devices} devices; the config has {config.devices}"
        )
    outputs = []
    if given.devices is not None:
        if len(given.devices) != config.devices:
            raise PrivzvError(
                f"devices: {len(given.devices)} modules given; need one per device ({config.devices})"
            )
        for m, module in enumerate(given.devices):
            what = f"device {m}'s module ({type(module).__name__})"
            _check_parameters(what, module, needed=config.freeze != "devices")
            x = dataset.x_train[m][:DRY_RECORDS]
            outputs.append(_dry(what, module, x, [len(x), config.embed_dim], f"its features {list(x.shape)}"))
    head = f"the head ({type(given.head).__name__})"
    if given.head is not None:
        _check_parameters(head, given.head, needed=False)
    parties = [(f"device {m}'s module", d) for m, d in enumerate(given.devices or ())]
    _check_own_parameters(parties + ([("the head", given.head)] if given.head is not None else []))
    if given.head is not None:
        n = min(DRY_RECORDS, len(dataset.y_train))
        embeddings = outputs or [torch.zeros(n, config.embed_dim) for _ in range(config.devices)]
        _dry(
            head,
            given.head,
            embeddings,
            [n, dataset.num_classes],
            f"{config.devices} embeddings [{n}, {config.embed_dim}]",
        )


def _check_parameters(what: str, module, needed: bool) -> None:
    if not isinstance(module, nn.Module):
        raise PrivzvError(f"{what}: must be a torch.nn.Module")
    models.check_per_record(what, module)
    params = dict(module.named_parameters())
    if needed and not params:
        raise PrivzvError(f"{what}: has no parameters; the devices train theirs (or freeze='devices')")
    bad = next(((name, p.dtype) for name, p in params.items() if p.dtype != torch.float32), None)
    if bad:
        raise PrivzvError(
            f"{what}: parameter {bad[0]!r} is {bad[1]}; privzv trains fp32 parameters (.float())"
        )


def _check_own_parameters(parties: list[tuple[str, nn.Module]]) -> None:
    """No parameter is shared between two given modules (each party trains its own: a device's
    parameters become views of its own flat buffer, ``zo.flatten_``)."""
    owner: dict[int, str] = {}
    for what, module in parties:
        for p in module.parameters():
            if owner.setdefault(id(p), what) != what:
                raise PrivzvError(
                    f"{what}: shares parameters with {owner[id(p)]}; each party needs its own module"
                )


@torch.no_grad()
def _dry(what: str, module: nn.Module, inputs, shape: list[int], given: str) -> torch.Tensor:
    """``module(inputs)`` in eval mode (its modes and torch's generator restored): the output,
    which must be an fp32 tensor of ``shape``."""
    modes = [(sub, sub.training) for sub in module.modules()]
    module.eval()
    try:
        with torch.random.fork_rng(devices=[]):
            out = module(inputs)
    except Exception as exc:  # noqa: BLE001 -- any failure of a user's forward is one line
        raise PrivzvError(f"{what}: its forward on {given} failed ({first_line(exc)})") from None
    finally:
        for sub, mode in modes:
            sub.training = mode
    if not isinstance(out, torch.Tensor) or list(out.shape) != shape or out.dtype != torch.float32:
        got = f"{out.dtype} {list(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise PrivzvError(f"{what}: on {given} it returned {got}; expected torch.float32 {shape}")
    return out
