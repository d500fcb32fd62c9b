"""Method options: --freeze, the ZO server update, device momentum, and learning on tiny data."""

from __future__ import annotations

import pytest
import torch

from privzv.training import zo
from privzv.training.messages import SERVER, Message


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def _changed(before, module):
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


@pytest.mark.parametrize("method", ["dpzv", "vafl", "fo-vector"])
def test_freeze_server_and_freeze_devices(method, tiny_scheduler):
    sched = tiny_scheduler(method=method, freeze="server")
    head = _params(sched.server.head)
    devs = [_params(d.model) for d in sched.devices]
    for _ in range(10):
        sched.step()
    assert not _changed(head, sched.server.head)
    assert any(_changed(b, d.model) for b, d in zip(devs, sched.devices))

    sched = tiny_scheduler(method=method, freeze="devices")
    head = _params(sched.server.head)
    devs = [_params(d.model) for d in sched.devices]
    for _ in range(10):
        sched.step()
    assert _changed(head, sched.server.head)
    for before, d in zip(devs, sched.devices):
        if method == "dpzv":  # perturbations are undone in float32: equal up to rounding
            assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(before, d.model.parameters()))
        else:
            assert not _changed(before, d.model)


def test_zo_server_update_moves_the_head_and_keeps_it_finite(tiny_scheduler):
    sched = tiny_scheduler(server_update="zo", lr_server=0.01)
    head = _params(sched.server.head)
    for _ in range(10):
        sched.step()
    assert _changed(head, sched.server.head)
    assert all(torch.isfinite(p).all() for p in sched.server.head.parameters())


def test_device_momentum_first_step_equals_the_plain_update(tiny_scheduler):
    plain, mom = tiny_scheduler(lr_device=0.1), tiny_scheduler(lr_device=0.1, device_momentum=0.9)
    down = Message(0, SERVER, "device0", "delta", {"delta": torch.tensor([0.5])})
    for s in (plain, mom):
        s.method.device_send(s.devices[0], torch.arange(8))
        s.method.device_receive(s.devices[0], down)
    for a, b in zip(plain.devices[0].model.parameters(), mom.devices[0].model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_device_momentum_accumulates_delta_u_over_steps(tiny_scheduler):
    """buf <- mu buf + Delta u_t; w <- w - eta buf (the step's +lam u, -2 lam u undone)."""
    sched = tiny_scheduler(lr_device=0.1, device_momentum=0.9)
    device, method = sched.devices[0], sched.method
    w = device.flat.clone().double()
    buf, plain = torch.zeros_like(w), w.clone()
    for delta in (0.5, -0.25, 0.75):
        method.device_send(device, torch.arange(8))
        u = zo.direction(device.model, device.scratch["seeds"][0]).double()
        method.device_receive(
            device, Message(0, SERVER, "device0", "delta", {"delta": torch.tensor([delta])})
        )
        device.scratch.clear()
        device.step += 1
        buf = 0.9 * buf + delta * u
        w = w - 0.1 * buf
        plain = plain - 0.1 * delta * u
    assert torch.allclose(device.flat.double(), w, rtol=0, atol=1e-5)
    assert torch.equal(device.flat, torch.cat([p.detach().reshape(-1) for p in device.model.parameters()]))
    assert not torch.allclose(device.flat.double(), plain, rtol=0, atol=1e-3)  # not plain ZO-SGD


@pytest.mark.parametrize("method", ["dpzv", "vafl", "fo-vector"])
def test_training_lowers_the_loss_on_separable_tiny_data(method, tiny_scheduler, tiny_dataset):
    # dpzv at its default device step (0.0125 / sqrt(d) with momentum 0.9, training.defaults)
    sched = tiny_scheduler(method=method)
    ds = tiny_dataset()
    before = sched.evaluate(ds.x_test, ds.y_test)
    for _ in range(240):
        sched.step()
    after = sched.evaluate(ds.x_test, ds.y_test)
    assert after.test_loss < before.test_loss - 0.2 and after.test_accuracy > 0.6
