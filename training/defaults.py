"""The values a run uses where its config leaves them open (``None``), and where each came from.

Order, per field: the user's value (flag or ``--config``); else the tuned value of
``privzv.training.tuned.lookup(dataset, method, server_kind, records)`` (none with ``--records``:
the entries were swept at each dataset's default size); else the built-in default:

* ``clip`` C: the method's ``default_clip`` where it declares one (the methods that noise a
  per-record gradient vector on the downlink, and VAFL's noised embeddings in a private run:
  0.1, ``methods.common.VECTOR_CLIP``; a method releasing scalar loss differences: 1, its
  ``DEFAULT_CLIP``), else 10
  (arXiv:2502.20565v2, App. G).
* ``lr_device`` of a zeroth-order device step (DPZV): ``ZO_RATE / sqrt(d)``, d the largest device
  model's parameter count. A ZO step moves the weights by eta * |Delta| * sqrt(d) (u has norm
  sqrt(d), arXiv:2502.20565v3, eq. (9)) and Delta is clipped to [-C, C] before noise, so with this rate a
  noise-free step moves them by at most ``ZO_RATE * C`` whatever the model size; a fixed eta lets
  the step grow like sqrt(d) (docs/results.md, "Stable defaults": on digits with 2-dim
  embeddings and C = 10 the old 0.03 diverges within 12 epochs, this rate does not).
  ``ZO_RATE`` gives 5e-4 on digits with 2-dim embeddings (d = 610), the paper's rate with momentum
  0.9 (arXiv:2502.20565v3, App. C).
* every other open rate: the method's own default (``Method.default_rate``: ``LR_DEVICE``, or
  for a device fed a noised downlink gradient ``methods.common.DEVICE_NOISE_STEP`` over that
  noise's norm where smaller; the head's ``methods.head.default_lr`` with a DP head: 0.1 /
  (sigma_h sqrt(P)) on a sample of the table, else min(0.1, 1/z_h); a plain head fed noised
  embeddings, ``HEAD_INPUT_STEP`` of its method's module over its input's squared norm where
  smaller).

A tuned entry is one sweep's choice as a set: its rates were swept at its C and in its setting.
Where the run's C (given) differs from the entry's, or its embedding size from the sweep's
(``tuned.SWEPT_EMBED_DIM``), the tuned rates do not apply and both rates fall back to the
built-in defaults above (the printed source says why); the tuned C and C_h still apply where
left open. On digits, ``--clip 10`` with the tuned rates (device 0.03, as 0.003 at momentum 0.9)
diverges with 2-dim embeddings (docs/results.md, "Stable defaults") and falls from 0.783 to
0.689 with 16 (docs/training.md, the defaults paragraph; the fallback reaches 0.964).

The tuned server rates were swept for a non-private head, so a private run (DP head) does not
take them: its head keeps the DP head's default (docs/results.md, "Hyperparameters").

The tuned tables were swept with ZO device momentum 0 (``TUNED_DEVICE_MOMENTUM`` unless an entry
says ``device_momentum``); a tuned ZO device rate is converted to the run's momentum mu by keeping
the heavy-ball step's steady-state size eta / (1 - mu) (Polyak 1964): eta_run = eta_tuned *
(1 - mu_run) / (1 - mu_tuned).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from privzv.training import methods, models, tuned

CLIP = 10.0  # arXiv:2502.20565v2, App. G
HEAD_CLIP = 0.1  # C_h where no tuned value exists (docs/training.md, "Whole-run DP")
ZO_RATE = 0.0125  # eta * sqrt(d): 0.0125 / sqrt(610) = 5.06e-4 (digits, 2-dim embeddings)
TUNED_DEVICE_MOMENTUM = 0.0  # the ZO device momentum of training/tuned.py's sweeps
FIELDS = ("clip", "head_clip", "lr_device", "lr_server")
RATES = ("lr_device", "lr_server")  # swept at the entry's C and setting (``unfit``)
FALLBACK = {"clip": (CLIP, "arXiv:2502.20565v2, App. G"), "head_clip": (HEAD_CLIP, "training/defaults.py")}


def resolve(config, dataset, given=None):
    """(config with ``FIELDS`` filled, {field: {"value", "source"}}) for a run of ``config`` on
    ``dataset`` (a ``VerticalDataset``) with the models ``given`` from Python (``models.Given``,
    or None); fields the user gave are reported as ``"given"``.
    Idempotent: a resolved config comes back unchanged, its sources all ``"given"``."""
    entry = _entry(config)
    where = f"training/tuned.py ({config.dataset}, {config.method}, server {config.server_kind})"
    why_not = unfit(config, entry, dataset.num_classes)
    values, sources = {}, {}
    for name in FIELDS:
        given = getattr(config, name)
        if given is not None:
            value, source = given, "given"
        else:
            value, source = _default(name, config, dataset, entry, where, given)
            if why_not and name in RATES and source.startswith(where):  # the tuned rate would apply
                untuned = {k: v for k, v in entry.items() if k not in RATES}
                value, source = _default(name, config, dataset, untuned, where, given)
                source += f"; not the rate of {where}: {why_not}"
        if value is not None:
            values[name] = value
        sources[name] = {"value": value, "source": source}
    return dataclasses.replace(config, **values), sources


def _entry(config) -> dict:
    """The tuned entry of ``config``'s setting (``tuned.lookup``), else {}."""
    return tuned.lookup(config.dataset, config.method, config.server_kind, config.records) or {}


def unfit(config, entry: dict, classes: int) -> str | None:
    """Why the tuned rates of ``entry`` do not fit ``config`` (None: they do): they were swept at
    the entry's C and at the table's embedding size (``tuned.SWEPT_EMBED_DIM``)."""
    if not any(name in entry for name in RATES):
        return None
    if config.clip is not None and "clip" in entry and config.clip != entry["clip"]:
        return f"swept at C {entry['clip']:g}, this run has C {config.clip:g}"
    swept = tuned.SWEPT_EMBED_DIM[config.server_kind]
    swept = classes if swept == "classes" else swept
    if config.embed_dim != swept:
        return f"swept at embed_dim {swept}, this run has {config.embed_dim}"
    return None


def _default(name: str, config, dataset, entry: dict, where: str, given=None) -> tuple:
    """(value, source) of an open field: tuned, else the fallback (None: the method's own)."""
    method = methods.get(config.method)
    zo_device = method.ZO_DEVICE_RATE
    dp_head = config.private and not method.LABEL_DP
    if name in entry and not (name == "lr_server" and dp_head):
        value, source = entry[name], where
        if name == "lr_device" and zo_device:
            mu = entry.get("device_momentum", TUNED_DEVICE_MOMENTUM)
            value = value * (1 - config.device_momentum) / (1 - mu)
            source += f", converted from device momentum {mu:g} to {config.device_momentum:g}"
        return value, source
    own_clip = method.default_clip(config) if name == "clip" else None
    if own_clip is not None:
        return own_clip, f"{method.__name__}.DEFAULT_CLIP (methods.{method.__module__.rsplit('.', 1)[-1]})"
    if name in FALLBACK:
        return FALLBACK[name]
    if name == "lr_device" and zo_device:
        d = max(
            parameter_count(dataset, m, config.embed_dim, config=config, given=given)
            for m in range(dataset.devices)
        )
        return ZO_RATE / math.sqrt(
            d
        ), f"{ZO_RATE:g} / sqrt(d), d = {d} device parameters (training/defaults.py)"
    if name == "lr_server" and dp_head:
        return None, "the DP head's default (methods.head.default_lr)"
    return None, "the method's default"


def with_clip(config):
    """``config`` with C and C_h filled when open (tuned, else the fallback): enough for planning
    a release without the dataset (``privzv.training.privacy``)."""
    entry = _entry(config)
    return dataclasses.replace(
        config,
        **{
            name: _default(name, config, None, entry, "")[0]
            for name in FALLBACK
            if getattr(config, name) is None
        },
    )


def parameter_count(dataset, m: int, embed_dim: int, *, config=None, given=None) -> int:
    """d_m: the parameters of device ``m``'s model: the dataset's own, or the run's
    (``models.for_device`` of ``config`` and ``given``). A model is built aside: torch's global
    generator is left as it was."""
    with torch.random.fork_rng(devices=[]):
        if config is None:
            model = models.device_model(dataset, m, embed_dim)
        else:
            model = models.for_device(config, dataset, m, given)
        return sum(p.numel() for p in model.parameters())


def applied(sources: dict, method) -> dict:
    """``sources`` with each value left to the method (None) replaced by the value that
    ``method`` (the run's built ``Method``) applies, and its source (``Method.default_rate``)."""
    return {
        name: s if s["value"] is not None else dict(zip(("value", "source"), method.default_rate(name)))
        for name, s in sources.items()
    }


def describe(sources: dict, method) -> str:
    """One line per field, with the value applied: ``clip 0.1 (training/tuned.py (...))``; then
    the :func:`warning` of a private run whose defaults are known not to beat the majority class."""
    lines = [f"{name} {s['value']:.4g} ({s['source']})" for name, s in applied(sources, method).items()]
    known = warning(method.config)
    return "\n".join(lines + ([known] if known else []))


def warning(config) -> str | None:
    """A line warning that this private run's defaults are known not to beat the majority class
    at its epsilon and size (``tuned.below_majority``), else None."""
    why = tuned.below_majority(config.dataset, config.method, config.epsilon, config.records)
    if why is None or not config.private:
        return None
    return (
        f"warning: {config.method} on {config.dataset} does not beat the majority class at its "
        f'defaults at this epsilon ({why}; docs/results.md, "Stable defaults"): a larger --epsilon, '
        "or set --lr-device / --lr-server"
    )
