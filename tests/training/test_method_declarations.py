"""Methods declare their capabilities and secret state (issue 22 item 2): generic code asks the
method, never names it, and each declaration is checked against what the method does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from privzv.errors import PrivzvError
from privzv.training import methods, run_folder
from privzv.training.methods import head
from privzv.training.methods.base import DEVICE

TRAINING = Path(methods.__file__).resolve().parents[1]
GENERIC = ("config.py", "defaults.py", "run.py", "run_folder.py", "cli.py", "schema.py", "scheduler.py")


@pytest.mark.parametrize("module", GENERIC)
def test_generic_modules_name_no_method(module):
    source = (TRAINING / module).read_text()
    for name in methods.METHODS:
        found = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", source)
        assert found is None, f"training/{module} names the method {name!r}: ask the method instead"


@pytest.mark.parametrize("name", methods.METHODS)
def test_multi_direction_matches_the_release_and_the_uplink(name, tiny_config, tiny_scheduler):
    cls = methods.get(name)
    config = tiny_config(method=name, directions=2, clip=1.0)
    if not cls.MULTI_DIRECTION:
        with pytest.raises(PrivzvError, match="--directions 2"):
            config.validate()
        return
    config.validate()
    assert cls.release(config).dim == 2
    sched = tiny_scheduler(method=name, directions=2)
    assert all(shape[1] == 2 for shape in sched.method.uplink_shapes(8).values())


@pytest.mark.parametrize("name", methods.METHODS)
def test_label_dp_methods_plan_no_noised_release(name, tiny_config):
    cls = methods.get(name)
    assert (cls.release(tiny_config(method=name, epsilon=1.0, clip=1.0)) is None) == cls.LABEL_DP


@pytest.mark.parametrize("name", methods.METHODS)
def test_zeroth_order_head_is_the_head_built(name, tiny_config, tiny_scheduler):
    for update in ("fo", "zo"):
        sched = tiny_scheduler(method=name, server_update=update)
        built = isinstance(sched.method.head, head.ZerothOrderHead)
        assert built == methods.get(name).zeroth_order_head(tiny_config(method=name, server_update=update))


@pytest.mark.parametrize("name", methods.METHODS)
def test_secret_state_covers_every_per_device_state_and_names_real_keys(name, tiny_scheduler):
    sched = tiny_scheduler(method=name, sigma=1.0)
    sched.step()
    extra = sched.method.extra_state()
    declared = methods.get(name).SECRET_STATE
    assert {path[0] for path, _ in declared} <= set(extra)
    per_device = {
        key
        for key, value in extra.items()
        if isinstance(value, dict) and value and set(value) == {d.index for d in sched.devices}
    }
    assert per_device <= {path[0] for path, owner in declared if owner == DEVICE and path[1:] == ("*",)}
    public, secret = run_folder.split_state(sched.state_dict())
    for key in per_device:
        assert not public["method"][key]  # every device's entry moved to its private part
        moved = [
            path for party, entries in secret.items() if party.startswith("device") for path, _ in entries
        ]
        assert {("method", key, m) for m in extra[key]} <= set(moved)


def _device_rate(method) -> float:
    if hasattr(method, "device_optimizers"):
        return method.device_optimizers[0].param_groups[0]["lr"]
    return method.lr_device


def _server_rate(method) -> float:
    h = method.head
    return h.lr if isinstance(h, head.ZerothOrderHead) else h.optimizer.param_groups[0]["lr"]


@pytest.mark.parametrize("name", methods.METHODS)
@pytest.mark.parametrize("sigma", [0.0, 2.0])
def test_default_rate_is_the_rate_the_method_applies(name, sigma, tiny_scheduler):
    """The start banner prints ``default_rate`` where the config leaves a rate open: it must be
    the rate the built method uses."""
    from privzv.training import privacy
    from privzv.training.config import TrainConfig

    release = None
    if sigma and not methods.get(name).LABEL_DP:  # (a label-DP run has no noised release)
        config = TrainConfig(
            dataset="breast-cancer",
            devices=2,
            batch_size=8,
            epochs=1,
            embed_dim=4,
            method=name,
            epsilon=1.0,
            clip=1.0,
            head_clip=1.0,
        )
        release = privacy.plan(config, methods.get(name), 96, 24).release
    sched = tiny_scheduler(
        method=name,
        sigma=sigma,
        release=release,
        clip=1.0,
        head_clip=1.0,
        epsilon=1.0 if sigma else float("inf"),
    )
    applied = {"lr_device": _device_rate(sched.method), "lr_server": _server_rate(sched.method)}
    left_open = [rate for rate in applied if getattr(sched.method.config, rate) is None]
    assert left_open  # (build fills only dpzv's device rate: defaults.resolve)
    for rate in left_open:
        assert sched.method.default_rate(rate)[0] == pytest.approx(applied[rate])


def test_every_method_secret_is_in_the_run_folder_secret_state():
    declared = {
        (("method", *path), owner)
        for name in methods.METHODS
        for path, owner in methods.get(name).SECRET_STATE
    }
    assert declared <= set(run_folder.secret_state())
    assert set(run_folder.SECRET_STATE) <= set(run_folder.secret_state())
