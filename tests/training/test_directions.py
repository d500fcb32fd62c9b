"""DPZV with K perturbation directions: one K-vector per record clipped to L2 norm C, noise
N(0, sigma^2 I_K), sensitivity 2C/B whatever K; the device steps along the K directions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from privzv.errors import PrivzvError
from privzv.training import zo
from privzv.training.messages import SERVER, Message
from privzv.training.methods import dpzv

K, B, CLIP = 3, 8, 0.5


def _uplink(h_plus, h_minus, ids=None):
    ids = torch.arange(len(h_plus)) if ids is None else ids
    return Message(0, "device0", SERVER, "embeddings", {"ids": ids, "h_plus": h_plus, "h_minus": h_minus})


def _pre_noise(sched, h_plus, h_minus) -> torch.Tensor:
    """The server's Delta at sigma = 0: the clipped mean before noise."""
    sched.method.train_server = False
    return sched.method.server_reply(sched.server, _uplink(h_plus, h_minus))["delta"]


values = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(values, min_size=K, max_size=K), min_size=1, max_size=10), st.data())
def test_replacing_one_row_moves_the_clipped_vector_mean_by_at_most_2c_over_b(rows, data):
    b = len(rows)
    i = data.draw(st.integers(0, b - 1))
    other = [list(r) for r in rows]
    other[i] = data.draw(st.lists(values, min_size=K, max_size=K))
    a = zo.clip_rows(torch.tensor(rows), CLIP).sum(0) / b
    c = zo.clip_rows(torch.tensor(other), CLIP).sum(0) / b
    assert torch.isfinite(a).all() and torch.isfinite(c).all()
    assert float((a - c).norm()) <= 2 * CLIP / b * (1 + 1e-6)


@pytest.mark.parametrize("poison", [float("inf"), float("nan"), 1e30, -1e30])
def test_server_k_vector_sensitivity_with_a_poisoned_record(tiny_scheduler, poison):
    """Through DPZV's server with K = 3: one record's embeddings replaced by adversarial values
    moves the pre-noise K-vector by <= 2C/B in L2."""
    sched = tiny_scheduler(clip=CLIP, directions=K)
    gen = torch.Generator().manual_seed(1)
    h_plus, h_minus = torch.randn(B, K, 4, generator=gen), torch.randn(B, K, 4, generator=gen)
    base = _pre_noise(sched, h_plus, h_minus)
    bad = h_plus.clone()
    bad[3] = poison
    moved = _pre_noise(sched, bad, h_minus)
    assert base.shape == (K,) and torch.isfinite(moved).all()
    assert float((moved - base).norm()) <= 2 * CLIP / B * (1 + 1e-5)


def test_the_k_deltas_are_clipped_as_one_vector_not_per_coordinate(tiny_scheduler):
    """Two records whose K loss differences are all far above C, with opposite signs: the pre-noise
    mean is (C/sqrt(K)) (1, ..., 1) (1 - 1) / B per pair... so replacing one by the other moves it
    by exactly 2C/B; per-coordinate clipping would move it by 2C sqrt(K)/B."""
    sched = tiny_scheduler(clip=CLIP, directions=K)
    method, server = sched.method, sched.server
    ids = torch.arange(B)
    stale = server.table.gather(ids)
    labels = server.labels[ids]
    kept = torch.ones(B, dtype=torch.bool)
    gen = torch.Generator().manual_seed(4)
    h = torch.randn(B, K, 4, generator=gen)
    # a record whose h+ makes every loss difference huge, in either direction
    up, down = h.clone(), h.clone()
    up[0] = 1e3 * torch.sign(torch.randn(K, 4, generator=gen))
    down[0] = -up[0]
    a = method.clipped_mean(server, 0, stale, labels, up, h, kept)
    c = method.clipped_mean(server, 0, stale, labels, down, h, kept)
    gap = float((a - c).norm())
    assert gap <= 2 * CLIP / B * (1 + 1e-5)
    assert gap > CLIP / B * 1.01  # the clip binds: the test can tell a vector from coordinates


def test_the_noise_is_sigma_per_coordinate_and_independent(tiny_scheduler):
    sigma, draws = 0.7, 3000
    sched = tiny_scheduler(clip=CLIP, directions=K, sigma=sigma)
    gen = torch.Generator().manual_seed(2)
    h_plus, h_minus = torch.randn(B, K, 4, generator=gen), torch.randn(B, K, 4, generator=gen)
    sched.method.train_server = False
    clean = sched.method.clipped_mean(
        sched.server,
        0,
        sched.server.table.gather(torch.arange(B)),
        sched.server.labels[:B],
        h_plus,
        h_minus,
        torch.ones(B, dtype=torch.bool),
    )
    noise = (
        torch.stack(
            [sched.method.server_reply(sched.server, _uplink(h_plus, h_minus))["delta"] for _ in range(draws)]
        ).double()
        - clean.double()
    )
    se = sigma / math.sqrt(2 * draws)  # s.e. of a sample std
    assert noise.std(0).sub(sigma).abs().max() < 5 * se  # sigma each coordinate (not sigma*sqrt(K))
    assert noise.mean(0).abs().max() < 5 * sigma / math.sqrt(draws)
    corr = torch.corrcoef(noise.T)
    assert (corr - torch.eye(K, dtype=corr.dtype)).abs().max() < 5 / math.sqrt(draws)  # independent


def test_k_directions_send_k_pairs_and_update_along_their_average(tiny_scheduler):
    sched = tiny_scheduler(lr_device=0.1, directions=K)
    device, method = sched.devices[0], sched.method
    w0 = device.flat.clone()
    up = method.device_send(device, torch.arange(B))
    assert up["h_plus"].shape == up["h_minus"].shape == (B, K, 4)
    seeds = device.scratch["seeds"]
    assert seeds[0] == device.step_seed() and len(set(seeds)) == K
    assert sched.recorder.transcripts["device0"].select("local", "seed")[-1].fields["seed"].tolist() == seeds
    # each direction's forwards ran at w +- lam u_k
    x = device.x[:B]
    for k, seed in enumerate(seeds):
        u = zo.direction(w0, seed)
        with torch.no_grad():
            for sign, name in ((1, "h_plus"), (-1, "h_minus")):
                device.flat.copy_(w0 + sign * method.lam * u)
                assert torch.allclose(device.model(x), up[name][:, k], atol=1e-5)
    device.flat.copy_(w0 - method.lam * zo.direction(w0, seeds[-1]))  # where send left it
    deltas = torch.tensor([0.5, -1.0, 2.0])
    method.device_receive(device, Message(0, SERVER, "device0", "delta", {"delta": deltas}))
    step = sum(float(d) * zo.direction(w0, s).double() for d, s in zip(deltas, seeds)) / K
    assert torch.allclose(device.flat.double(), w0.double() - 0.1 * step, rtol=0, atol=1e-5)


def test_k_directions_with_momentum_and_an_abort(tiny_scheduler):
    sched = tiny_scheduler(lr_device=0.1, directions=2, device_momentum=0.5)
    device, method = sched.devices[0], sched.method
    w0 = device.flat.clone()
    method.device_send(device, torch.arange(B))
    method.device_abort(device)  # a refused uplink: move back
    assert torch.allclose(device.flat, w0, rtol=0, atol=1e-6)
    device.scratch.clear()
    method.device_send(device, torch.arange(B))
    seeds = device.scratch["seeds"]
    method.device_receive(device, Message(0, SERVER, "device0", "delta", {"delta": torch.tensor([1.0, 3.0])}))
    buf = (1.0 * zo.direction(w0, seeds[0]).double() + 3.0 * zo.direction(w0, seeds[1]).double()) / 2
    assert torch.allclose(method.buffers[0].double(), buf, rtol=0, atol=1e-5)
    assert torch.allclose(device.flat.double(), w0.double() - 0.1 * buf, rtol=0, atol=1e-5)


def test_one_direction_replays_todays_passes_bit_for_bit(tiny_scheduler):
    """directions=1 (the default) is the step as it was before K: per round exactly the in-place
    float32 passes +lam u, -2 lam u, (lam - eta Delta) u, each one full draw g = randn(d) scaled by
    sqrt(d) / ||g|| (float64 norm of the whole draw); replayed here from the device's transcript
    (its seeds and received Deltas) over a private run's rounds. The downlink is one float32.
    Without device momentum (with it, the step goes through the buffer)."""
    sched = tiny_scheduler(sigma=0.3, lr_device=0.05, device_momentum=0.0)
    device = sched.devices[0]
    replay = device.flat.clone()
    for _ in range(8):
        assert sched.step()
    t = sched.recorder.transcripts["device0"]
    seeds = [int(e.fields["seed"][0]) for e in t.select("local", "seed")]
    deltas = [e.fields["delta"] for e in t.select("received", "delta")]
    assert len(seeds) == len(deltas) == 4 and all(d.shape == (1,) for d in deltas)
    d, lam = replay.numel(), sched.method.lam
    for seed, delta in zip(seeds, deltas):
        g = torch.randn(d, generator=torch.Generator().manual_seed(seed))
        norm = float(torch.linalg.vector_norm(g, dtype=torch.float64))
        for scale in (lam, -2 * lam, lam - 0.05 * float(delta[0])):
            replay.add_(g, alpha=scale * math.sqrt(d) / norm)
    assert torch.equal(replay, device.flat)


def test_release_and_accounting_do_not_depend_on_k(tiny_config):
    one, many = (dpzv.DPZV.release(tiny_config(directions=k, clip=2.0)) for k in (1, 5))
    assert many.dim == 5 and one.dim == 1
    assert one.sensitivity == many.sensitivity == 2 * 2.0 / 8


@pytest.mark.parametrize("method", ["zoo-vfl", "vafl", "fo-vector", "czofo"])
def test_more_directions_are_refused_for_other_methods(tiny_config, method):
    with pytest.raises(PrivzvError, match="--directions 2"):
        tiny_config(method=method, directions=2).validate()
