"""Device models by name: torchvision's ResNet-18, transformers' BERT, a light bag of token
embeddings.

Each is ``build(spec) -> nn.Module`` for ``privzv.training.models.DEVICE_MODELS`` (``spec``: a
``models.ModelInput``). Nothing is ever downloaded: ResNet-18 (torchvision's architecture, written
here) starts from random init or loads a torchvision state_dict file the user gives
(``torch.load(weights_only=True)``);
BERT is built from a ``BertConfig`` (``BERT_SMALL``, or a JSON file) or read from a local directory
with ``local_files_only=True``. A missing or unreadable weights path is one ``PrivzvError``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
from torch import nn

from privzv.errors import PrivzvError

# BERT's default when no --model-weights is given: a small random-init encoder (about 0.1M
# parameters besides its token embeddings), so a CPU run trains it in seconds.
BERT_SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
}
BERT_VOCAB = 30522  # BERT's WordPiece vocabulary: the default where the dataset states none
TEXT_BAG_DIM = 64  # text-bag's embedding width before its linear layer
PAD = 0  # the token id of padding (masked out by bert, ignored by text-bag)


class FrozenBatchNorm2d(nn.BatchNorm2d):
    """torchvision's BatchNorm2d with its statistics frozen: every forward, training or not,
    normalises with the running mean and variance (its buffers: zeros and ones at init, or a
    weights file's), which it never updates. A batch-statistics BatchNorm makes each record's
    output depend on every record of its batch, so changing one record would move all B clipped
    losses and the downlink's sensitivity would be 2C, not 2C/B (the reason Opacus's
    ModuleValidator replaces BatchNorm); here a record's output depends on that record alone. The
    parameters and buffers are BatchNorm2d's, so torchvision state_dicts load unchanged."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
        )


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: two 3x3 conv + (frozen) batch norm, a 1x1 projection
    where the shape changes, the sum through a ReLU."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = FrozenBatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = FrozenBatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), FrozenBatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016) as torchvision builds it (``torchvision.models.resnet18``: the
    same modules, parameter names, shapes and initialisation, its batch norms frozen:
    :class:`FrozenBatchNorm2d`), so torchvision's state_dict files load into it; written here because a torchvision wheel must match the installed torch's
    build (a PyPI wheel beside a CPU torch fails to import, and breaks transformers' import)."""

    def __init__(self, channels: int = 3, outputs: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = FrozenBatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        widths = (64, 128, 256, 512)
        for k, width in enumerate(widths, start=1):
            before = widths[max(k - 2, 0)]
            stride = 1 if k == 1 else 2
            setattr(
                self, f"layer{k}", nn.Sequential(BasicBlock(before, width, stride), BasicBlock(width, width))
            )
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, outputs)
        for module in self.modules():  # torchvision's initialisation
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(spec) -> nn.Module:
    """``ResNet18`` on [B, C, H, W] (random init, or ``spec.weights``: a torchvision resnet18
    state_dict file, read with ``weights_only=True``), its ``fc`` replaced by Linear(512,
    embed_dim). For C != 3 channels conv1 is replaced (random init) after the weights load. Inputs
    of 16x16 and up work (the stages end at 1x1, then global average pooling)."""
    if len(spec.shape) != 3 or not spec.dtype.is_floating_point:
        raise PrivzvError(
            f"device model resnet18: needs image features [C, H, W], not {spec.dtype} {list(spec.shape)}"
        )
    net = ResNet18()
    if spec.weights is not None:
        state = _torch_file(spec.weights)
        try:
            net.load_state_dict(state)
        except (RuntimeError, TypeError, AttributeError) as exc:
            raise PrivzvError(
                f"--model-weights {spec.weights!r}: not a torchvision resnet18 state_dict ({first_line(exc)})"
            ) from None
    if spec.shape[0] != 3:
        net.conv1 = nn.Conv2d(spec.shape[0], 64, 7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
    net.fc = nn.Linear(512, spec.embed_dim)
    return net


class ClsEncoder(nn.Module):
    """A transformers encoder on int64 token ids [B, L] (``PAD`` masked): the [CLS] (first)
    position's last hidden state through Linear(hidden, embed_dim)."""

    def __init__(self, encoder: nn.Module, embed_dim: int):
        super().__init__()
        self.encoder = encoder
        self.project = nn.Linear(encoder.config.hidden_size, embed_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=ids, attention_mask=(ids != PAD).long()).last_hidden_state
        return self.project(hidden[:, 0])


def bert(spec) -> nn.Module:
    """transformers' BertModel (no pooler) as a ``ClsEncoder``: ``BERT_SMALL`` with the dataset's
    vocabulary, random init; or ``spec.weights``: a BertConfig JSON file (random init) or a local
    directory with config.json and weights (``from_pretrained``, local files only)."""
    _token_ids("bert", spec)
    bert_model, bert_config = _require("transformers", "BertModel", "BertConfig")
    if spec.weights is None:
        encoder = bert_model(
            bert_config(vocab_size=spec.vocab_size or BERT_VOCAB, **BERT_SMALL), add_pooling_layer=False
        )
    else:
        path = _existing(spec.weights)
        try:
            if path.is_dir():
                encoder = bert_model.from_pretrained(
                    str(path), local_files_only=True, add_pooling_layer=False
                )
            else:
                encoder = bert_model(bert_config.from_json_file(str(path)), add_pooling_layer=False)
        except (OSError, ValueError, TypeError, KeyError, RuntimeError) as exc:
            raise PrivzvError(
                f"--model-weights {spec.weights!r}: not a BertConfig JSON file or a directory of a "
                f"BERT model ({first_line(exc)})"
            ) from None
    config = encoder.config
    if spec.vocab_size is not None and spec.vocab_size > config.vocab_size:
        raise PrivzvError(
            f"device model bert: the dataset's vocabulary of {spec.vocab_size} tokens exceeds the "
            f"model's {config.vocab_size}"
        )
    if spec.shape[0] > config.max_position_embeddings:
        raise PrivzvError(
            f"device model bert: {spec.shape[0]} tokens per record; the model takes at most "
            f"{config.max_position_embeddings}"
        )
    return ClsEncoder(encoder, spec.embed_dim)


class TextBag(nn.Module):
    """The mean of the token embeddings of a record (``PAD`` ignored), then a linear layer."""

    def __init__(self, vocab_size: int, embed_dim: int, width: int = TEXT_BAG_DIM):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab_size, width, mode="mean", padding_idx=PAD)
        self.project = nn.Linear(width, embed_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.project(self.bag(ids))


def text_bag(spec) -> nn.Module:
    """A ``TextBag`` over the dataset's vocabulary (it must state one: ``vocab_size``)."""
    _token_ids("text-bag", spec)
    if spec.vocab_size is None:
        raise PrivzvError(
            "device model text-bag: needs the dataset's vocabulary (vocab) (a token-id dataset)"
        )
    return TextBag(spec.vocab_size, spec.embed_dim)


def _token_ids(name: str, spec) -> None:
    if len(spec.shape) != 1 or spec.dtype != torch.int64:
        raise PrivzvError(
            f"device model {name}: needs int64 token ids [L] per record, not {spec.dtype} {list(spec.shape)}"
        )


def _require(module: str, *names: str) -> list:
    """``names`` from ``module``; a missing optional package is the one line naming its extra,
    and one that fails to import (e.g. transformers beside a torchvision built for another
    torch) one line saying so."""
    from privzv.extras import missing_extra

    try:
        found = importlib.import_module(module)
        return [getattr(found, name) for name in names]
    except (ImportError, RuntimeError) as exc:  # ModuleNotFoundError is an ImportError
        extra = missing_extra(exc) if isinstance(exc, ModuleNotFoundError) else None
        raise extra or PrivzvError(
            f"{module}: {', '.join(names)} could not be imported ({first_line(exc)})"
        ) from None


def _existing(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise PrivzvError(f"--model-weights {path!r}: no such file or directory")
    return p


def _torch_file(path: str) -> dict:
    """A state_dict saved with ``torch.save``, read with ``weights_only=True`` on the CPU."""
    p = _existing(path)
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- any unreadable file (pickle, zip, I/O) is one line
        raise PrivzvError(f"--model-weights {path!r}: not a torch weights file ({first_line(exc)})") from None
    if not isinstance(state, dict):
        raise PrivzvError(f"--model-weights {path!r}: holds a {type(state).__name__}, not a state_dict")
    return state


def first_line(exc: Exception) -> str:
    """``exc`` as one line: its type and the start of its message's first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
