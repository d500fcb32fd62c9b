"""Datasets and models are registries (issue 22 item 2, issue 21 item 4): adding one touches one
place, and what a registered dataset declares holds when it is loaded."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from privzv.errors import PrivzvError
from privzv.training import cli, data, models, run
from privzv.training.config import TrainConfig


def _toy(devices: int, seed: int, root, records) -> data.VerticalDataset:
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (64,), generator=gen)
    xs = [torch.randn(64, 2, generator=gen) + y[:, None].float() for _ in range(devices)]
    return data.VerticalDataset("toy", xs, y, [x[:16] for x in xs], y[:16], 3, "two columns per device")


def _linear(spec: models.ModelInput) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(spec.shape), spec.embed_dim))


def test_a_registered_dataset_and_model_train_through_the_api_and_the_cli_parser(tmp_path, monkeypatch):
    monkeypatch.setitem(models.DEVICE_MODELS, "toy-linear", models.DeviceModel(_linear))
    monkeypatch.setitem(
        data.REGISTRY, "toy", data.Dataset(_toy, 3, "two columns per device", model="toy-linear")
    )
    assert cli.build_parser().parse_args(["--dataset", "toy"]).dataset == "toy"
    config = TrainConfig(dataset="toy", devices=2, epochs=1, batch_size=8, embed_dim=3, evals=1, seed=1)
    sched = run.build(config, data.load("toy", 2), secret_seed=1)
    assert isinstance(sched.devices[0].model[1], nn.Linear)
    summary = run.train(config, tmp_path / "run", secret_seed=1)
    assert summary["dataset"] == "toy" and summary["rounds"] == 16
    assert 0.0 <= summary["test_accuracy"] <= 1.0


def test_registering_a_name_twice_is_refused(monkeypatch):
    monkeypatch.setattr(data, "REGISTRY", dict(data.REGISTRY))
    with pytest.raises(PrivzvError, match="'digits': already registered"):
        data.register("digits", data.REGISTRY["digits"])


@pytest.mark.parametrize("name", ["digits", "breast-cancer"])
def test_an_embedded_dataset_is_what_it_declares(name):
    declared = data.REGISTRY[name]
    ds = data.load(name, 2)
    assert ds.name == name and ds.num_classes == declared.classes and not declared.data_dir
    assert int(ds.y_train.max()) == declared.classes - 1
    net = models.device_model(ds, 0, embed_dim=5)
    assert net(ds.x_train[0][:4]).shape == (4, 5)


@pytest.mark.parametrize("name", data.names())
def test_records_and_data_dir_declarations_are_enforced(name):
    declared = data.REGISTRY[name]
    assert declared.model in models.DEVICE_MODELS
    config = TrainConfig(dataset=name, records=100)
    if declared.records:
        config.validate()
    else:
        with pytest.raises(PrivzvError, match="--records 100: only for --dataset"):
            config.validate()
    if declared.data_dir:
        with pytest.raises(PrivzvError, match="--data-dir"):
            data.load(name, 1)


def test_server_kinds_are_the_server_registry():
    assert models.SERVER_KINDS == tuple(models.SERVERS)
    for kind in models.SERVERS:
        head = models.server_model(2, 3, 3, kind=kind)
        assert head([torch.zeros(4, 3), torch.zeros(4, 3)]).shape == (4, 3)
