"""Device models by name: resnet18 (torchvision's architecture, weights from a state_dict file),
bert (transformers, from a config file or a local directory, never the hub) and text-bag; each
trains a round on CPU; every bad weights path is one line."""

from __future__ import annotations

import json
import math
import socket

import pytest
import torch

from privzv.cli import main
from privzv.errors import PrivzvError
from privzv.training import TrainConfig, VerticalDataset, fit, library_models, models

EMBED = 4


def _dataset(x: torch.Tensor, vocab_size: int | None = None, devices: int = 2) -> VerticalDataset:
    """``devices`` devices holding ``x``'s records (the same features: only the models are under
    test)."""
    y = torch.arange(len(x)) % 2
    test = [x[:4]] * devices
    return VerticalDataset("named-models", [x] * devices, y, test, y[:4], 2, "copies", vocab=vocab_size)


def _one_round(tmp_path, ds: VerticalDataset, **changes) -> dict:
    """One DPZV round (8 records, B=4: 2 rounds per device an epoch) with the named model."""
    epochs = 1 / (2 * ds.devices)
    config = TrainConfig(devices=ds.devices, batch_size=4, epochs=epochs, embed_dim=EMBED, evals=1, **changes)
    return fit(config, ds, tmp_path / "run", secret_seed=1)


def _images(size: int, channels: int = 3) -> torch.Tensor:
    return torch.randn(8, channels, size, size, generator=torch.Generator().manual_seed(size))


def _tokens(vocab: int, length: int = 6) -> torch.Tensor:
    return torch.randint(1, vocab, (8, length), generator=torch.Generator().manual_seed(vocab))


@pytest.mark.parametrize("size", [16, 32])
def test_resnet18_trains_a_round_on_image_patches(tmp_path, no_plots, size):
    summary = _one_round(tmp_path, _dataset(_images(size), devices=1), device_model="resnet18")
    assert summary["rounds"] == 1 and 0.0 <= summary["test_accuracy"] <= 1.0
    net = models.device_model(_dataset(_images(size)), 0, EMBED, "resnet18")
    assert isinstance(net, library_models.ResNet18) and net.fc.out_features == EMBED
    assert sum(p.numel() for p in net.parameters()) == 11_689_512 - 513 * 1000 + 513 * EMBED


def test_resnet18_takes_other_channel_counts():
    net = models.device_model(_dataset(_images(16, channels=1)), 0, EMBED, "resnet18")
    assert net.eval()(_images(16, channels=1)[:2]).shape == (2, EMBED)


def test_resnet18_is_torchvisions_resnet18():
    """Same names, shapes, initialisation and outputs as torchvision's (where it imports: a wheel
    of another torch build fails to)."""
    try:
        from torchvision.models import resnet18
    except Exception:  # noqa: BLE001 -- missing, or built for another torch
        pytest.skip("torchvision does not import here")
    torch.manual_seed(3)
    theirs = resnet18(weights=None).eval()
    torch.manual_seed(3)
    mine = library_models.ResNet18().eval()
    assert [(k, v.shape) for k, v in theirs.state_dict().items()] == [
        (k, v.shape) for k, v in mine.state_dict().items()
    ]
    assert all(torch.equal(a, b) for a, b in zip(theirs.state_dict().values(), mine.state_dict().values()))


def test_resnet18_weights_file_round_trip(tmp_path):
    torch.manual_seed(0)
    source = library_models.ResNet18()  # torchvision's layout (test above)
    torch.save(source.state_dict(), tmp_path / "resnet18.pt")
    net = models.device_model(_dataset(_images(16)), 0, EMBED, "resnet18", str(tmp_path / "resnet18.pt"))
    loaded = {k: v for k, v in net.state_dict().items() if not k.startswith("fc.")}
    expected = {k: v for k, v in source.state_dict().items() if not k.startswith("fc.")}
    assert loaded.keys() == expected.keys() and all(torch.equal(loaded[k], expected[k]) for k in loaded)
    assert net.fc.out_features == EMBED


class Payload:
    """Anything but tensors: ``torch.load(weights_only=True)`` must refuse to unpickle it."""

    def __reduce__(self):
        return (print, ("unpickled",))


def _bad_weights(tmp_path, kind: str) -> str:
    path = tmp_path / f"{kind}.pt"
    if kind == "corrupt":
        path.write_bytes(b"not a torch file")
    elif kind == "other-model":
        torch.save({"weight": torch.zeros(2)}, path)
    elif kind == "code":
        torch.save({"x": Payload()}, path)
    elif kind == "a-tensor":
        torch.save(torch.zeros(2), path)
    return str(path)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", "no such file or directory"),
        ("corrupt", "not a torch weights file"),
        ("code", "not a torch weights file"),
        ("other-model", "not a torchvision resnet18 state_dict"),
        ("a-tensor", "holds a Tensor, not a state_dict"),
    ],
)
def test_bad_resnet_weights_are_one_line(tmp_path, capsys, kind, message):
    weights = _bad_weights(tmp_path, kind)
    with pytest.raises(PrivzvError, match=f"--model-weights '{weights}': {message}") as err:
        models.device_model(_dataset(_images(16)), 0, EMBED, "resnet18", weights)
    assert "\n" not in str(err.value)
    assert "unpickled" not in capsys.readouterr().out


@pytest.fixture
def no_network(monkeypatch):
    """HF_HUB_OFFLINE unset and every connection refused: a build that reached for the hub fails."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)

    def refuse(*args, **kwargs):
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


TINY_BERT = {
    "vocab_size": 40,
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 16,
    "max_position_embeddings": 16,
}


def test_bert_from_a_config_file_trains_a_round(tmp_path, no_plots, no_network):
    pytest.importorskip("transformers")
    (tmp_path / "bert.json").write_text(json.dumps(TINY_BERT))
    ds = _dataset(_tokens(40), vocab_size=40)
    summary = _one_round(tmp_path, ds, device_model="bert", model_weights=str(tmp_path / "bert.json"))
    assert summary["rounds"] == 1
    net = models.device_model(ds, 0, EMBED, "bert", str(tmp_path / "bert.json"))
    assert net.encoder.config.hidden_size == 8 and net(_tokens(40)[:3]).shape == (3, EMBED)


def test_bert_default_and_a_local_directory_build_without_the_hub(tmp_path, no_network):
    transformers = pytest.importorskip("transformers")
    ds = _dataset(_tokens(40), vocab_size=40)
    small = models.device_model(ds, 0, EMBED, "bert")
    assert small.encoder.config.hidden_size == library_models.BERT_SMALL["hidden_size"]
    assert small.encoder.config.vocab_size == 40
    saved = transformers.BertModel(transformers.BertConfig(**TINY_BERT), add_pooling_layer=False)
    saved.save_pretrained(tmp_path / "bert")
    net = models.device_model(ds, 0, EMBED, "bert", str(tmp_path / "bert"))
    assert all(
        torch.equal(a, b) for a, b in zip(net.encoder.state_dict().values(), saved.state_dict().values())
    )


@pytest.mark.parametrize(
    "where, message",
    [
        ("missing", "no such file or directory"),
        ("bad.json", "not a BertConfig JSON file or a directory of a BERT model"),
        ("empty-dir", "not a BertConfig JSON file or a directory of a BERT model"),
    ],
)
def test_bad_bert_weights_are_one_line(tmp_path, no_network, where, message):
    pytest.importorskip("transformers")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "empty-dir").mkdir()
    path = str(tmp_path / where)
    with pytest.raises(PrivzvError, match=f"--model-weights '{path}': {message}") as err:
        models.device_model(_dataset(_tokens(40), 40), 0, EMBED, "bert", path)
    assert "\n" not in str(err.value)


def test_text_bag_trains_a_round_over_the_dataset_vocabulary(tmp_path, no_plots):
    ds = _dataset(_tokens(30), vocab_size=30)
    assert _one_round(tmp_path, ds, device_model="text-bag")["rounds"] == 1
    net = models.device_model(ds, 0, EMBED, "text-bag")
    assert net.bag.num_embeddings == 30 and net(_tokens(30)[:2]).shape == (2, EMBED)


@pytest.mark.parametrize(
    "name, ds, message",
    [
        ("text-bag", _dataset(_tokens(30)), "device model text-bag: needs the dataset's vocabulary"),
        ("text-bag", _dataset(_images(16)), "device model text-bag: needs int64 token ids"),
        ("resnet18", _dataset(_tokens(30), 30), "device model resnet18: needs image features"),
    ],
)
def test_a_model_refuses_features_it_cannot_read(name, ds, message):
    with pytest.raises(PrivzvError, match=message):
        models.device_model(ds, 0, EMBED, name)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--device-model", "text-bag"], "device model text-bag: needs int64 token ids"),
        (["--model-weights", "w.pt"], "--model-weights 'w.pt': device model mlp takes none"),
    ],
)
def test_the_cli_refuses_a_model_in_one_line(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    args = ["train", "--dataset", "digits", "--devices", "2", "--epochs", "0.1", *flags, "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and not out.exists()


def test_the_sizes_in_the_docs_are_the_models():
    pytest.importorskip("transformers")
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    tokens = _dataset(torch.ones(2, 8, dtype=torch.int64), vocab_size=library_models.BERT_VOCAB)
    for name, ds in [("resnet18", _dataset(_images(16))), ("bert", tokens), ("text-bag", tokens)]:
        size = sum(p.numel() for p in models.device_model(ds, 0, 16, name).parameters())
        assert f"`{name}`{' (default, vocabulary 30522)' if name == 'bert' else ''}" in text
        assert f"{size:,}" in text, name


def test_an_attack_reads_a_named_model_run_with_its_model(tmp_path, capsys, monkeypatch):
    """privzv attack run rebuilds a run's device model by the run's --device-model (a registered
    one here, narrower than the dataset's own mlp, so the dataset's would not load)."""
    from torch import nn

    monkeypatch.setattr(models, "DEVICE_MODELS", dict(models.DEVICE_MODELS))
    models.register_device_model(
        "narrow-mlp",
        lambda spec: nn.Sequential(
            nn.Flatten(), nn.Linear(math.prod(spec.shape), 3), nn.Linear(3, spec.embed_dim)
        ),
    )
    out = tmp_path / "run"
    args = ["--dataset", "digits", "--devices", "2", "--epochs", "0.1", "--batch-size", "64"]
    assert main(["train", *args, "--device-model", "narrow-mlp", "--no-transcripts", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["attack", "run", "--attack", "model-completion", "--run", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["source"] == "bottom-model"


def test_a_transformers_that_fails_to_import_is_one_line(monkeypatch):
    """transformers imports torchvision where installed: one built for another torch breaks its
    BertModel (measured: RuntimeError "operator torchvision::nms does not exist")."""
    import importlib

    real = importlib.import_module

    def broken(name, *args):
        if name == "transformers":
            raise RuntimeError("operator torchvision::nms does not exist\ntraceback lines")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(
        PrivzvError, match=r"^transformers: BertModel, BertConfig could not be imported \(Runtime"
    ) as err:
        models.device_model(_dataset(_tokens(40), 40), 0, EMBED, "bert")
    assert "\n" not in str(err.value)


@pytest.mark.slow  # about 27 s on 2 busy cores; the fast tests above cover its parts
def test_the_cli_trains_resnet18_with_a_weights_file_on_cifar10_files(tmp_path, capsys):
    """privzv train --dataset cifar10 --device-model resnet18 --model-weights FILE, end to end on
    CIFAR-10 files (one device: whole 32x32 images); config.json names the model and records its
    architecture."""
    import pickle

    import numpy as np

    from privzv.training import data

    folder = tmp_path / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name in data.CIFAR_FILES:
        batch = {b"data": rng.integers(0, 256, (3, 3072)).astype(np.uint8), b"labels": [0, 1, 2]}
        (folder / name).write_bytes(pickle.dumps(batch))
    torch.save(library_models.ResNet18().state_dict(), tmp_path / "resnet18.pt")
    out = tmp_path / "run"
    args = [
        "--dataset",
        "cifar10",
        "--data-dir",
        str(tmp_path / "data"),
        "--devices",
        "1",
        "--batch-size",
        "4",
    ]
    weights = ["--device-model", "resnet18", "--model-weights", str(tmp_path / "resnet18.pt")]
    assert main(["train", *args, *weights, "--epochs", "0.25", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rounds"] == 1
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["device_model"] == "resnet18" and saved["models"]["source"] == "privzv"
    ds = data.load("cifar10", 1, tmp_path / "data")
    built = models.device_model(ds, 0, 16, "resnet18", str(tmp_path / "resnet18.pt"))
    assert saved["models"]["devices"] == [models.fingerprint(built)]


def test_a_resnet18_records_embedding_does_not_depend_on_its_batch_mates():
    """The downlink's sensitivity 2C/B needs each record's loss to depend on that record alone:
    with torchvision's batch-statistics BatchNorm, changing one record moved every other record's
    embedding in the same training-mode forward (fails on the code before FrozenBatchNorm2d)."""
    net = models.device_model(_dataset(_images(16)), 0, EMBED, "resnet18").train()
    batch = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    changed = batch.clone()
    changed[3] = torch.randn(3, 16, 16, generator=torch.Generator().manual_seed(2)) * 5
    with torch.no_grad():
        a, b = net(batch), net(changed)
    assert torch.equal(a[:3], b[:3]) and not torch.equal(a[3], b[3])


@pytest.mark.parametrize("norm", [torch.nn.BatchNorm1d(4), torch.nn.SyncBatchNorm(4)])
def test_a_device_model_or_head_with_batch_statistics_is_refused(tmp_path, norm):
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
    ds = _dataset(x)
    device = torch.nn.Sequential(torch.nn.Linear(4, 4), norm, torch.nn.Linear(4, EMBED))
    plain = torch.nn.Sequential(torch.nn.Linear(4, EMBED))
    config = TrainConfig(devices=2, embed_dim=EMBED, epochs=1, batch_size=8)
    with pytest.raises(PrivzvError, match=f"device 0's module .*: 1 is a {type(norm).__name__}, whose batch"):
        fit(config, ds, tmp_path / "a", devices=[device, plain])
    name = "bn-tower"
    models.register_device_model(
        name, lambda spec: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.BatchNorm1d(4))
    )
    try:
        with pytest.raises(PrivzvError, match="device model bn-tower: 1 is a BatchNorm1d"):
            models.device_model(ds, 0, EMBED, name)
    finally:
        models.DEVICE_MODELS.pop(name)
    assert not (tmp_path / "a").exists()
