"""privzv.training.fit: your own torch modules through the whole protocol (run folder, ledger,
accounting), every refusal as one PrivzvError, the architecture check on resume, and the CLI's
one-line refusal of a run it cannot rebuild."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from torch import nn

from privzv.cli import main
from privzv.errors import PrivzvError
from privzv.training import TrainConfig, VerticalDataset, cli, data, fit, models, register_device_model, run
from privzv.training.run_folder import CONFIG

FEATURES = (3, 5)


def _arrays(records: int = 64, classes: int = 2, seed: int = 0) -> VerticalDataset:
    """Two devices' Gaussian columns whose class shifts the mean, built from arrays."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (records,), generator=gen)
    xs = [torch.randn(records, f, generator=gen) + y[:, None].float() for f in FEATURES]
    return VerticalDataset("my-table", xs, y, [x[:16] for x in xs], y[:16], classes, "my columns")


class Concat(nn.Module):
    """A user's head: logits of the concatenated embeddings."""

    def __init__(self, width: int, classes: int = 2):
        super().__init__()
        self.linear = nn.Linear(width, classes)

    def forward(self, embeddings):
        return self.linear(torch.cat(list(embeddings), dim=1))


def _devices(hidden: int = 6, embed: int = 4) -> list[nn.Module]:
    return [nn.Sequential(nn.Linear(f, hidden), nn.Tanh(), nn.Linear(hidden, embed)) for f in FEATURES]


def _config(**changes) -> TrainConfig:
    base = TrainConfig(devices=2, epochs=1, batch_size=8, embed_dim=4, evals=1, seed=2)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize("method", ["dpzv", "fo-vector"])
def test_user_modules_train_the_run_with_its_ledger(tmp_path, no_plots, method):
    devices, head = _devices(), Concat(8)
    before = [torch.cat([p.detach().flatten() for p in d.parameters()]).clone() for d in devices]
    summary = fit(
        _config(method=method, epsilon=4.0),
        _arrays(),
        tmp_path / "run",
        devices=devices,
        head=head,
        secret_seed=1,
    )
    assert summary["dataset"] == "my-table" and summary["method"] == method
    assert summary["rounds"] == summary["rounds_planned"] == 16
    assert 0 < summary["epsilon_spent"] <= 4.0 * (1 + 1e-9) and summary["sigma"] > 0
    saved = json.loads((tmp_path / "run" / CONFIG).read_text())
    assert saved["models"] == models.architecture(devices, head, "python")
    assert saved["config"]["dataset"] == "my-table"
    assert (tmp_path / "run" / "private" / "ledger.journal").exists()
    after = [torch.cat([p.detach().flatten() for p in d.parameters()]) for d in devices]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))  # the given modules trained


def test_a_module_left_out_is_privzvs_own(tmp_path, no_plots):
    head = Concat(8)
    fit(_config(), _arrays(), tmp_path / "run", head=head, secret_seed=1)
    saved = json.loads((tmp_path / "run" / CONFIG).read_text())
    assert saved["models"]["head"] == models.fingerprint(head)
    mlp = models.device_model(_arrays(), 0, 4, "mlp")
    assert saved["models"]["devices"][0] == models.fingerprint(mlp)


class Fails(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        raise ValueError("bad shapes\nsecond line")


class FirstColumns(nn.Module):
    """A linear embedding of any record's first 3 columns."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 4)

    def forward(self, x):
        return self.linear(x[:, :3])


def _double() -> nn.Module:
    return nn.Linear(3, 4).double()


REFUSALS = {
    "device output shape": (
        dict(devices=[nn.Linear(3, 5), _devices()[1]]),
        r"device 0's module \(Linear\): on its features \[2, 3\] it returned torch.float32 \[2, 5\]; "
        r"expected torch.float32 \[2, 4\]",
    ),
    "head output shape": (
        dict(head=Concat(8, classes=3)),
        r"the head \(Concat\): on 2 embeddings \[2, 4\] it returned torch.float32 \[2, 3\]; "
        r"expected torch.float32 \[2, 2\]",
    ),
    "no parameters": (
        dict(devices=[nn.Identity(), _devices()[1]]),
        r"device 0's module \(Identity\): has no parameters",
    ),
    "fp64 parameters": (
        dict(devices=[_double(), _devices()[1]]),
        r"device 0's module \(Linear\): parameter 'weight' is torch.float64; privzv trains fp32",
    ),
    "a forward that fails": (
        dict(devices=[_devices()[0], Fails()]),
        r"device 1's module \(Fails\): its forward on its features \[2, 5\] failed \(ValueError: bad shapes\)$",
    ),
    "one module for two devices": (
        dict(devices=[FirstColumns()] * 2, head=Concat(8)),
        r"device 1's module: shares parameters with device 0's module; each party needs its own module",
    ),
    "too few modules": (dict(devices=_devices()[:1]), r"devices: 1 modules given; need one per device \(2\)"),
    "not a module": (dict(head=lambda e: e[0]), r"the head \(function\): must be a torch.nn.Module"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_bad_modules_are_one_line_before_anything_is_written(tmp_path, case):
    given, message = REFUSALS[case]
    with pytest.raises(PrivzvError, match=message) as err:
        fit(_config(), _arrays(), tmp_path / "run", **given)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_frozen_devices_may_have_no_parameters(tmp_path, no_plots):
    class Fixed(nn.Module):
        def forward(self, x):
            return x[:, :4] if x.shape[1] >= 4 else torch.cat([x, x], 1)[:, :4]

    summary = fit(
        _config(freeze="devices"),
        _arrays(),
        tmp_path / "run",
        devices=[Fixed(), Fixed()],
        head=Concat(8),
        secret_seed=1,
    )
    assert summary["rounds"] == 16


def test_the_dry_forward_leaves_modes_and_the_generator_alone(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.LayerNorm(4))  # BatchNorm is refused first
    net.train()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    with pytest.raises(PrivzvError, match="device 1's module"):  # device 1 is refused after 0's dry run
        fit(_config(), _arrays(), tmp_path / "run", devices=[net, nn.Identity()])
    assert torch.equal(torch.rand(3), expected)
    assert net.training and all(m.training for m in net.modules())
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())  # no state moved


def test_resume_needs_modules_of_the_run_architecture(tmp_path, no_plots, capsys):
    out, data = tmp_path / "run", _arrays()
    fit(_config(), data, out, devices=_devices(), head=Concat(8), secret_seed=1)
    longer = dataclasses.replace(_config(), epochs=2)
    with pytest.raises(PrivzvError, match=r"device 1's module: its architecture .* is not the run's"):
        fit(
            longer,
            data,
            out,
            devices=[_devices()[0], _devices(hidden=7)[1]],
            head=Concat(8),
            resume=True,
            extend=True,
        )
    with pytest.raises(PrivzvError, match=r"the head's module: its architecture"):
        fit(longer, data, out, devices=_devices(), head=nn.Sequential(Concat(8)), resume=True, extend=True)
    summary = fit(longer, data, out, devices=_devices(), head=Concat(8), resume=True, extend=True)
    assert summary["rounds"] == 32
    # the CLI cannot rebuild the modules: one line, exit code 2, for resume and for attacks
    for args in (
        ["train", "--resume", str(out)],
        ["attack", "run", "--attack", "direct-label", "--run", str(out)],
    ):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "trained from Python with its own modules or data" in err


def test_a_run_that_built_its_models_is_not_resumed_with_python_ones(tmp_path, no_plots):
    out = tmp_path / "run"
    run.train(
        TrainConfig(dataset="digits", devices=2, epochs=0.05, batch_size=64, evals=1), out, secret_seed=1
    )
    with pytest.raises(PrivzvError, match="the run built its own models; resume it without modules or data"):
        fit(None, data.load("digits", 2), out, resume=True)


def test_a_registered_model_is_a_device_model_choice(tmp_path, monkeypatch, no_plots):
    monkeypatch.setattr(models, "DEVICE_MODELS", dict(models.DEVICE_MODELS))

    def factory(spec: models.ModelInput) -> nn.Module:
        return nn.Sequential(nn.Linear(math.prod(spec.shape), spec.embed_dim))

    assert register_device_model("my-linear", factory) is factory
    with pytest.raises(PrivzvError, match="device model 'my-linear': a new name is needed"):
        register_device_model("my-linear", factory)
    assert cli.build_parser().parse_args(["--device-model", "my-linear"]).device_model == "my-linear"
    config = TrainConfig(dataset="digits", devices=2, device_model="my-linear", epochs=0.2, evals=1)
    sched = run.build(config.validate(), _arrays(), secret_seed=1)
    assert [type(d.model[0]) for d in sched.devices] == [nn.Linear, nn.Linear]
    with pytest.raises(PrivzvError, match="--model-weights 'w.pt': device model my-linear takes none"):
        run.build(dataclasses.replace(config, model_weights="w.pt"), _arrays(), secret_seed=1)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda out: fit(_config(), {"x": 1}, out),
            "dataset dict: must be a privzv.training.data.VerticalDataset",
        ),
        (
            lambda out: fit({"devices": 2}, _arrays(), out),
            "config dict: must be a privzv.training.TrainConfig",
        ),
        (
            lambda out: fit(_config(), _arrays(), out, engine=None),
            "fit\\(\\) option 'engine': allowed are resume",
        ),
        (lambda out: fit(None, _arrays(), out), "config None: only with resume=True"),
        (
            lambda out: fit(_config(devices=3), _arrays(), out),
            "dataset 'my-table': has 2 devices; the config has 3",
        ),
    ],
)
def test_fit_arguments_are_checked(tmp_path, call, message):
    with pytest.raises(PrivzvError, match=message):
        call(tmp_path / "run")
    assert not (tmp_path / "run").exists()


class _Tower(nn.Module):
    """A user's own device model: two linear layers on its columns."""

    def __init__(self, columns: int, embed_dim: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(columns, 8), nn.Tanh(), nn.Linear(8, embed_dim))

    def forward(self, x):
        return self.net(x)


class _Head(nn.Module):
    """A user's own head: one linear layer on the concatenated embeddings."""

    def __init__(self, inputs: int, classes: int):
        super().__init__()
        self.out = nn.Linear(inputs, classes)

    def forward(self, embeddings):
        return self.out(torch.cat(list(embeddings), dim=1))


def test_user_modules_train_on_a_csv_through_the_python_api(tmp_path):
    """Issue 21's acceptance on CPU: a CSV with a column list per device and a label column,
    the user's own modules, DPZV at epsilon 5 end to end; the run's ledger and the models it
    records are the user's, and the trained devices moved from where the user built them."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 4, generator=g)
    y = ((x[:, 0] + x[:, 2]) > 0).long()
    rows = [",".join(f"{v:.4f}" for v in r) + f",{'yes' if t else 'no'}" for r, t in zip(x.tolist(), y)]
    (tmp_path / "t.csv").write_text("a,b,c,d,label\n" + "\n".join(rows) + "\n")
    dataset = data.from_table(
        tmp_path / "t.csv",
        label_column="label",
        classes=["no", "yes"],
        device_columns=[["a", "b"], ["c", "d"]],
    )
    devices = [_Tower(2, 3), _Tower(2, 3)]
    before = [d.net[0].weight.detach().clone() for d in devices]
    config = TrainConfig(devices=2, epochs=2, batch_size=16, epsilon=5.0, embed_dim=3, seed=1)
    summary = fit(config, dataset, tmp_path / "run", devices=devices, head=_Head(6, 2), secret_seed=3)
    assert summary["stopped"] is None and summary["epsilon_spent"] <= 5.0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["models"]["source"] == "python" and len(saved["models"]["devices"]) == 2
    assert saved["data"]["features_shape"] == [[2], [2]] and saved["data"]["num_classes"] == 2
    assert 0.0 <= summary["test_accuracy"] <= 1.0
    assert all(
        not torch.equal(b, d.net[0].weight) for b, d in zip(before, devices)
    )  # the user's modules trained
