"""Party models (arXiv:2502.20565v3, App. C): device bottom models and the server's head.

Devices: a small MLP for tabular data and digits; a two-layer CNN per MNIST row band; a four-layer
CNN per CIFAR-10 patch; a two-layer 1-D CNN per MNIST-1D segment (MNIST-1D is translated signals,
where convolutions beat an MLP: Greydanus 2020, Table 1); by name, torchvision's ResNet-18,
transformers' BERT and a bag of token embeddings (``privzv.training.library_models``), or any
registered with ``register_device_model``. Server: two linear layers with a ReLU on the concatenated embeddings
(``kind="mlp"``; ``kind="mlp-gain"`` multiplies its input by the public constant ``HEAD_GAIN``), or the sum of the device outputs (``kind="sum"``, no parameters: the "model
without split" of Fu et al. that the direct label-inference attack needs). All parameters fp32.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from privzv.errors import PrivzvError
from privzv.training import library_models

MLP_HIDDEN = 32
SERVER_HIDDEN = 64
# the "mlp-gain" head's input gain: a fixed multiple of each record's own embeddings (no statistic
# over records), which balances the first layer's per-example gradients against the second's
# under one clip C_h; and its sampled DP head's default noise step (methods.head.default_lr; the
# plain head's is methods.head.NOISE_STEP). Both chosen on seed 100 (docs/results.md, "The head on
# a secret sample of the table": gain 10 beat 1 and 30, noise step 0.02 beat 0.01 and 0.05)
HEAD_GAIN = 10.0
GAIN_NOISE_STEP = 0.02
MNIST1D_WIDTH = 16


def device_model(
    dataset, m: int, embed_dim: int, name: str | None = None, weights: str | None = None
) -> nn.Module:
    """Bottom model of device ``m`` of a ``privzv.training.data.VerticalDataset``: x_train[m] batch
    -> [B, embed_dim]. ``name``: a ``DEVICE_MODELS`` entry (``--device-model``; None: the one its
    dataset declares, ``data.Dataset.model``); ``weights``: its ``--model-weights`` path."""
    from privzv.training import data

    if not 0 <= m < dataset.devices:
        raise PrivzvError(f"device {m!r}: allowed are 0..{dataset.devices - 1}")
    _check_positive("embed_dim", embed_dim)
    if name is None:
        name = data.REGISTRY[dataset.name].model if dataset.name in data.REGISTRY else "mlp"
    if name not in DEVICE_MODELS:
        raise PrivzvError(f"device model {name!r}: allowed are {', '.join(DEVICE_MODELS)}")
    entry = DEVICE_MODELS[name]
    if weights is not None and entry.weights is None:
        raise PrivzvError(
            f"--model-weights {weights!r}: device model {name} takes none (only "
            f"{', '.join(n for n, e in DEVICE_MODELS.items() if e.weights)})"
        )
    x = dataset.x_train[m]
    spec = ModelInput(tuple(x.shape[1:]), embed_dim, weights, dataset.vocab, x.dtype)
    return check_per_record(f"device model {name}", entry.build(spec).float())


@dataclasses.dataclass(frozen=True)
class ModelInput:
    """What a device model's factory is given: one record's feature ``shape`` and ``dtype``, the
    ``embed_dim``, the ``--model-weights`` path (or None) and the dataset's ``vocab`` (token-id
    features; None for others)."""

    shape: tuple[int, ...]
    embed_dim: int
    weights: str | None = None
    vocab_size: int | None = None
    dtype: torch.dtype = torch.float32


@dataclasses.dataclass(frozen=True)
class DeviceModel:
    """A named device model: ``build(ModelInput) -> nn.Module`` and what ``--model-weights`` is
    for it (None: it takes none)."""

    build: Callable[[ModelInput], nn.Module]
    weights: str | None = None


def register_device_model(name: str, factory: Callable[[ModelInput], nn.Module], weights: str | None = None):
    """Make ``factory`` (``ModelInput -> nn.Module``) the device model ``name``: a ``--device-model``
    choice in this process. ``weights``: what ``--model-weights`` means for it (None: it takes
    none). Returns ``factory``."""
    if not isinstance(name, str) or not name or name in DEVICE_MODELS:
        raise PrivzvError(f"device model {name!r}: a new name is needed (taken: {', '.join(DEVICE_MODELS)})")
    if not callable(factory):
        raise PrivzvError(f"device model {name!r}: factory {factory!r} is not callable")
    DEVICE_MODELS[name] = DeviceModel(factory, weights)
    return factory


def device_model_names() -> tuple[str, ...]:
    """Every device model's name (``--device-model``'s choices)."""
    return tuple(DEVICE_MODELS)


def fingerprint(module: nn.Module) -> str:
    """The architecture of ``module`` as a SHA-256 of its state_dict's names, shapes and dtypes
    (not its values): a resume with modules of another architecture is refused by it."""
    layout = [[k, list(v.shape), str(v.dtype)] for k, v in module.state_dict().items()]
    return hashlib.sha256(json.dumps(layout).encode()).hexdigest()


def _shaped(fn: Callable, **kw) -> DeviceModel:
    """A device model made by ``fn(shape, embed_dim=, **kw)`` (the built-in ones)."""
    return DeviceModel(lambda spec: fn(spec.shape, embed_dim=spec.embed_dim, **kw))


def _mlp(shape: tuple[int, ...], embed_dim: int) -> nn.Sequential:
    """Flatten, one hidden layer of ``MLP_HIDDEN`` with a ReLU, a linear embedding."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(math.prod(shape), MLP_HIDDEN), nn.ReLU(), nn.Linear(MLP_HIDDEN, embed_dim)
    )


def _cnn(
    shape: tuple[int, ...], widths: tuple[int, ...], convs_per_block: int, embed_dim: int
) -> nn.Sequential:
    """Blocks of ``convs_per_block`` 3x3 conv+ReLU then 2x2 max-pool, then a linear embedding.

    One conv per block and two blocks: the two-layer MNIST CNN; two per block: the four-layer
    CIFAR CNN. Pooling rounds up (ceil_mode) so that thin bands (1 row) still work.
    """
    layers: list[nn.Module] = []
    channels = shape[0]
    for width in widths:
        for _ in range(convs_per_block):
            layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), nn.ReLU()]
            channels = width
        layers.append(nn.MaxPool2d(2, ceil_mode=True))
    layers.append(nn.Flatten())
    with torch.no_grad():
        features = nn.Sequential(*layers)(torch.zeros(1, *shape)).shape[1]
    return nn.Sequential(*layers, nn.Linear(features, embed_dim))


def _cnn1d(shape: tuple[int, ...], width: int, embed_dim: int) -> nn.Sequential:
    """Two 1-D convolutions (kernel 3, same padding) with ReLUs on [B, C, L], then a linear
    embedding of the flattened features."""
    channels, length = shape
    return nn.Sequential(
        nn.Conv1d(channels, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv1d(width, width, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(width * length, embed_dim),
    )


class ConcatServer(nn.Module):
    """Two linear layers with a ReLU on ``gain`` times the concatenation of the M embeddings
    (``gain``: a public constant, so a record's logits depend on its own embeddings alone).
    ``noise_step``: its sampled DP head's default noise step (None: ``methods.head.NOISE_STEP``)."""

    def __init__(
        self,
        devices: int,
        embed_dim: int,
        num_classes: int,
        hidden: int = SERVER_HIDDEN,
        gain: float = 1.0,
        noise_step: float | None = None,
    ):
        super().__init__()
        self.devices, self.gain, self.noise_step = devices, gain, noise_step
        self.net = nn.Sequential(
            nn.Linear(devices * embed_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        _check_count(embeddings, self.devices)
        return self.net(torch.cat(list(embeddings), dim=1) * self.gain)


class SumServer(nn.Module):
    """Logits are the sum of the device outputs (embed_dim == num_classes); no parameters."""

    def __init__(self, devices: int):
        super().__init__()
        self.devices = devices

    def forward(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        _check_count(embeddings, self.devices)
        return torch.stack(list(embeddings)).sum(dim=0)


def _concat_server(devices: int, embed_dim: int, num_classes: int, **kw) -> nn.Module:
    return ConcatServer(devices, embed_dim, num_classes, **kw).float()


def _sum_server(devices: int, embed_dim: int, num_classes: int) -> nn.Module:
    if embed_dim != num_classes:
        raise PrivzvError(
            f"embed_dim {embed_dim}: a summing server needs embed_dim == num_classes ({num_classes})"
        )
    return SumServer(devices)


# Device models by name (a dataset declares its own: ``privzv.training.data.Dataset.model``;
# ``register_device_model`` adds one). Adding one is one entry here.
DEVICE_MODELS: dict[str, DeviceModel] = {
    "mlp": _shaped(_mlp),
    "cnn-mnist": _shaped(_cnn, widths=(16, 32), convs_per_block=1),
    "cnn-cifar": _shaped(_cnn, widths=(32, 64), convs_per_block=2),
    "cnn1d": _shaped(_cnn1d, width=MNIST1D_WIDTH),
    "resnet18": DeviceModel(library_models.resnet18, "a torchvision resnet18 state_dict file"),
    "bert": DeviceModel(
        library_models.bert, "a BertConfig JSON file, or a directory with config.json and weights"
    ),
    "text-bag": DeviceModel(library_models.text_bag),
}
# Server heads by ``--server-kind``: (devices, embed_dim, num_classes) -> module.
SERVERS = {
    "mlp": _concat_server,
    "mlp-gain": functools.partial(_concat_server, gain=HEAD_GAIN, noise_step=GAIN_NOISE_STEP),
    "sum": _sum_server,
}
SERVER_KINDS = tuple(SERVERS)


def server_model(devices: int, embed_dim: int, num_classes: int, kind: str = "mlp") -> nn.Module:
    """The server's head: a list of M embeddings [B, embed_dim] -> logits [B, num_classes]."""
    _check_positive("devices", devices)
    _check_positive("embed_dim", embed_dim)
    _check_positive("num_classes", num_classes)
    if kind not in SERVERS:
        raise PrivzvError(f"server kind {kind!r}: allowed are {', '.join(SERVER_KINDS)}")
    return SERVERS[kind](devices, embed_dim, num_classes)


def _check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PrivzvError(f"{name} {value!r}: must be an integer >= 1")


def _check_count(embeddings: Sequence[torch.Tensor], devices: int) -> None:
    if len(embeddings) != devices:
        raise PrivzvError(f"server got {len(embeddings)} embeddings: expected one per device ({devices})")


@dataclasses.dataclass(frozen=True)
class Given:
    """Models (and data) a run was given from Python (``privzv.training.fit``): ``devices`` one
    module per device, or None for the named ones; ``head`` or None for ``server_model``'s."""

    devices: tuple[nn.Module, ...] | None = None
    head: nn.Module | None = None


def for_device(config, dataset, m: int, given: Given | None = None) -> nn.Module:
    """Device ``m``'s model of a run: the given one, else ``device_model`` by the config's name."""
    if given is not None and given.devices is not None:
        return given.devices[m]
    return device_model(dataset, m, config.embed_dim, config.device_model, config.model_weights)


def for_server(config, dataset, given: Given | None = None) -> nn.Module:
    """The head of a run: the given one, else ``server_model`` of the config's kind."""
    if given is not None and given.head is not None:
        return given.head
    return server_model(config.devices, config.embed_dim, dataset.num_classes, kind=config.server_kind)


def architecture(devices: Sequence[nn.Module], head: nn.Module, source: str) -> dict:
    """What a run's public config.json records of its models: where they came from (``source``:
    "privzv", or "python" for a run given modules or data from Python) and each one's
    ``fingerprint``."""
    return {"source": source, "devices": [fingerprint(d) for d in devices], "head": fingerprint(head)}


def check_per_record(what: str, module: nn.Module) -> nn.Module:
    """``module`` if no part of it computes batch statistics in training (a BatchNorm that is not
    frozen), else a one-line PrivzvError naming the part. DP's per-record bound (sensitivity 2C/B
    of the clipped mean, per-example clipping in the DP head) holds only if each record's output
    depends on that record alone; batch statistics mix every record of a batch into each output."""
    from privzv.training.library_models import FrozenBatchNorm2d

    for name, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm) and not isinstance(sub, FrozenBatchNorm2d):
            raise PrivzvError(
                f"{what}: {name or 'the module'} is a {type(sub).__name__}, whose batch statistics make "
                "every record's output depend on the whole batch (breaking the per-record privacy bound); "
                "use GroupNorm or LayerNorm, or privzv.training.library_models.FrozenBatchNorm2d"
            )
    return module
