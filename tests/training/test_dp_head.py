"""The server head's DP update (training/methods/head.py): per-example gradients, clipping,
sensitivity, noise, and which runs make it."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from privzv.release import HeadUpdate
from privzv.training import methods, models, privacy
from privzv.training.methods import head
from privzv.training.noise import SeededNoise

B = 8


def _setup(classes=3, devices=2, dim=4, seed=0):
    torch.manual_seed(seed)
    module = models.server_model(devices, dim, classes)
    gen = torch.Generator().manual_seed(seed + 1)
    rows = [torch.randn(B, dim, generator=gen) for _ in range(devices)]
    labels = torch.randint(0, classes, (B,), generator=gen)
    return module, rows, labels


def test_per_example_gradients_equal_one_backward_per_record():
    module, rows, labels = _setup()
    got = head.per_example_gradients(module, rows, labels)
    for i in range(B):
        module.zero_grad()
        head.losses(module, [r[i : i + 1] for r in rows], labels[i : i + 1]).sum().backward()
        want = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
        assert torch.allclose(got[i], want, atol=1e-6)


@pytest.mark.parametrize("clip", [1e-3, 0.5, 100.0])
def test_the_noiseless_private_gradient_is_the_clipped_sum_over_b(clip):
    module, rows, labels = _setup()
    dp = HeadUpdate(clip=clip, batch_size=B, sigma=0.0)
    step = head.FirstOrderHead(module, 0.1, 0.0, dp, SeededNoise(0, "t"))
    per = head.per_example_gradients(module, rows, labels)
    norms = per.norm(dim=1)
    scale = torch.clamp(clip / norms, max=1.0)
    assert torch.allclose(step.private_gradient(rows, labels), (per * scale[:, None]).sum(0) / B, atol=1e-6)
    if clip == 1e-3:
        assert (norms > clip).all()  # every row clipped: the bound bites


def test_replacing_one_record_moves_the_head_gradient_by_at_most_2ch_over_b():
    """Replace-one on a label (and on the record's embedding): the clipped mean moves by
    <= 2 C_h / B (the HeadUpdate's sensitivity), also for big gradients (C_h tiny)."""
    module, rows, labels = _setup()
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(50.0)  # huge per-example gradients; some NaN-free, all clipped
    dp = HeadUpdate(clip=1e-2, batch_size=B, sigma=0.0)
    step = head.FirstOrderHead(module, 0.1, 0.0, dp, SeededNoise(0, "t"))
    base = step.private_gradient(rows, labels)
    moves = []
    for i in range(B):
        for label in range(3):
            changed = labels.clone()
            changed[i] = label
            other = [r.clone() for r in rows]
            other[0][i] = 1e3
            for r in (rows, other):
                moves.append(float((step.private_gradient(r, changed) - base).norm()))
    assert max(moves) <= dp.sensitivity * (1 + 1e-4)
    assert max(moves) >= 0.5 * dp.sensitivity


def test_the_noise_has_std_sigma_per_coordinate_and_comes_from_the_servers_generator():
    module, rows, labels = _setup()
    dp = HeadUpdate(clip=1.0, batch_size=B, sigma=0.7)
    noise = SeededNoise(4, "server")
    step = head.FirstOrderHead(module, 0.1, 0.0, dp, noise)
    empty = [r[:0] for r in rows]
    g = step.private_gradient(empty, labels[:0])  # an empty batch: pure noise, still released
    assert g.numel() > 500 and abs(float(g.std()) - 0.7) < 0.07 and abs(float(g.mean())) < 0.07
    replay = SeededNoise(4, "server").gaussian((g.numel(),), 0.7)
    assert torch.equal(g, replay)


def test_a_dp_step_moves_the_head_by_lr_times_the_private_gradient():
    module, rows, labels = _setup()
    dp = HeadUpdate(clip=0.3, batch_size=B, sigma=0.2)
    before = torch.cat([p.detach().reshape(-1).clone() for p in module.parameters()])
    step = head.FirstOrderHead(module, 0.05, 0.0, dp, SeededNoise(1, "s"))
    step.step(rows, labels)
    after = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    same = _setup()[0]  # the same initial head
    want = head.FirstOrderHead(same, 0.05, 0.0, dp, SeededNoise(1, "s")).private_gradient(rows, labels)
    assert torch.allclose(after, before - 0.05 * want, atol=1e-6)


def test_the_zo_head_derivative_is_clipped_per_example_with_sensitivity_2ch_over_b():
    module, rows, labels = _setup()
    dp = HeadUpdate(clip=0.01, batch_size=B, sigma=0.0)
    zo_head = head.ZerothOrderHead(module, 0.01, 1e-3, SeededNoise(0, "z"), dp)
    plus, minus = torch.randn(B) * 100, torch.randn(B) * 100
    plus[0] = float("nan")
    g = zo_head.derivative(plus, minus)
    assert abs(g) <= 0.01 * B / B
    changed = plus.clone()
    changed[3] = -changed[3] + 1e6
    assert abs(zo_head.derivative(changed, minus) - g) <= dp.sensitivity * (1 + 1e-6)
    noisy = head.ZerothOrderHead(module, 0.01, 1e-3, SeededNoise(0, "z"), dataclasses.replace(dp, sigma=2.0))
    draws = torch.tensor([noisy.derivative(plus, minus) - g for _ in range(400)])
    assert abs(float(draws.std()) - 2.0) < 0.25


@pytest.mark.parametrize("method", ["dpzv", "fo-vector", "czofo", "zoo-vfl"])
def test_a_private_run_whose_head_trains_makes_a_dp_head_update(method, tiny_config):
    config = tiny_config(
        method=method, epsilon=2.0, head_clip=0.5, head_share=0.6, head_sampling="batch"
    )  # the comparison; the sampled head: test_sampled_head
    p = privacy.plan(config, methods.get(method), records=96, rounds=24)
    q = 0 if method == "zoo-vfl" else head.WINDOW  # pooled by default where it is accounted
    assert p.release.head == HeadUpdate(
        clip=0.5, batch_size=8 * (q * config.devices or 1), sigma=p.release.head.sigma, window=q
    )
    assert p.release.head_share == 0.6 and p.release.head.sigma > 0
    z_down, z_head = p.release.split(p.result["noise_multiplier"])
    assert p.release.head.sigma == pytest.approx(z_head * p.release.head.sensitivity)
    assert p.release.sigma == pytest.approx(z_down * p.release.sensitivity)
    assert p.release.noise_multiplier == pytest.approx(p.result["noise_multiplier"])
    for frozen in (
        tiny_config(method=method, epsilon=2.0, freeze="server"),
        tiny_config(method=method, epsilon=2.0, server_kind="sum", embed_dim=3),
    ):
        assert privacy.plan(frozen, methods.get(method), records=96, rounds=24).release.head is None
    assert tiny_config(method=method).private is False
    assert privacy.plan(tiny_config(method=method), methods.get(method), 96, 24).release.head is None


def test_vafl_makes_no_head_update(tiny_config):
    """VAFL's secret is the devices' features against the server, which computes the head itself."""
    p = privacy.plan(tiny_config(method="vafl", epsilon=2.0), methods.get("vafl"), 96, 24)
    assert p.release.head is None


@pytest.mark.parametrize("method", ["dpzv", "fo-vector", "czofo", "zoo-vfl"])
def test_the_run_uses_the_calibrated_head_sigma(method, tiny_config, tiny_scheduler):
    config = tiny_config(method=method, epsilon=2.0)
    p = privacy.plan(config, methods.get(method), records=96, rounds=24)
    sched = tiny_scheduler(method=method, epsilon=2.0, release=p.release)
    assert sched.method.head_dp == p.release.head and sched.method.head.dp == p.release.head
    assert sched.method.sigma == p.release.sigma
    if method != "zoo-vfl":  # first-order heads sample the table: lr = NOISE_STEP / (sigma_h sqrt(P))
        size = sum(q.numel() for q in sched.server.head.parameters())
        assert sched.method.head.optimizer.param_groups[0]["lr"] == pytest.approx(
            head.NOISE_STEP / (p.release.head.sigma * math.sqrt(size))
        )
    before = [q.clone() for q in sched.server.head.parameters()]
    for _ in range(2 * head.WINDOW + 1):  # past the first pooled window (q M = 8 rounds)
        assert sched.step()
    after = list(sched.server.head.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    assert all(torch.isfinite(q).all() for q in after)


def test_under_secret_subsampling_the_head_steps_with_noise_even_when_nothing_is_kept(
    tiny_config, tiny_scheduler
):
    """The head update is released every round (amplification assumes it): a round that keeps no
    record still moves the head by noise alone."""
    kw = dict(threat="secret-subsampling", batch_size=1, super_batch=8, epsilon=5.0)
    p = privacy.plan(tiny_config(**kw), methods.get("dpzv"), records=96, rounds=40)
    sched = tiny_scheduler(release=p.release, **kw)
    empty = 0
    for _ in range(30):
        before = [q.clone() for q in sched.server.head.parameters()]
        assert sched.step()
        mask = sched.recorder.transcripts["server"].select("local", "keep")[-1].fields["mask"]
        empty += int(not mask.any())
        assert any(not torch.equal(a, b) for a, b in zip(before, sched.server.head.parameters()))
    assert empty >= 3


def _pooled_step(module, q=2, devices=2, sigma=0.0, clip=1e-2):
    dp = HeadUpdate(clip=clip, batch_size=B * devices * q, sigma=sigma, window=q)
    return head.FirstOrderHead(module, 0.1, 0.0, dp, SeededNoise(0, "p"), walk=(devices, 10))


def test_a_pooled_head_releases_one_noisy_clipped_sum_per_window_and_does_not_move_inside():
    """q=2, M=2: releases 0-3 form one window; the head moves only after the 4th, by
    lr * (sum of the 4 batches' clipped rows) / (q M B) (sigma 0)."""
    module, rows, labels = _setup()
    step = _pooled_step(module)
    start = [p.detach().clone() for p in module.parameters()]
    per = head.per_example_gradients(module, rows, labels)
    clipped = per * torch.clamp(1e-2 / per.norm(dim=1), max=1.0)[:, None]
    for call in range(4):
        step.step(rows, labels)
        moved = any(not torch.equal(a, b) for a, b in zip(start, module.parameters()))
        assert moved == (call == 3)
    flat = torch.cat([(a - b).reshape(-1) for a, b in zip(start, module.parameters())])
    assert torch.allclose(flat, 0.1 * 4 * clipped.sum(0) / (B * 2 * 2), atol=1e-7)
    assert float(step.pool.abs().sum()) == 0.0 and step.calls == 4


def test_a_record_in_c_batches_of_a_window_moves_the_pooled_sum_by_at_most_c_times_2ch():
    """The sensitivity the ledger charges: c * 2 C_h / (q M B) for a record in c batches."""
    module, rows, labels = _setup()
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(50.0)
    other = [r.clone() for r in rows]
    for r in other:
        r[0] = -r[0] * 7 + 3  # record 0's embeddings replaced ...
    other_labels = labels.clone()
    other_labels[0] = (labels[0] + 1) % 3  # ... and its label
    pools = {}
    for c in (1, 2):
        for name, (r, y) in {"same": (rows, labels), "other": (other, other_labels)}.items():
            step = _pooled_step(module, q=3, devices=1)
            for _ in range(c):
                step.step(r, y)
            pools[c, name] = step.pool.clone()
    dp = HeadUpdate(clip=1e-2, batch_size=B * 3, window=3)
    move = {c: float((pools[c, "same"] - pools[c, "other"]).norm()) / dp.batch_size for c in (1, 2)}
    assert 0.25 * dp.sensitivity < move[1] <= dp.sensitivity * (1 + 1e-6)
    assert move[2] == pytest.approx(2 * move[1], rel=1e-5)  # c batches: c times the reach
    assert move[2] <= 2 * dp.sensitivity * (1 + 1e-6)


def test_the_pooled_noise_has_std_sigma_and_the_open_window_is_a_secret_of_the_checkpoint():
    from privzv.training import run_folder

    module, rows, labels = _setup()
    base, noisy = _pooled_step(module, q=1, devices=1), _pooled_step(module, q=1, devices=1, sigma=2.0)
    draws = torch.stack(
        [noisy.pooled_gradient(rows, labels) - base.pooled_gradient(rows, labels) for _ in range(200)]
    )
    assert abs(float(draws.std()) - 2.0) < 0.1
    step = _pooled_step(module)
    step.step(rows, labels)
    state = {"method": {"server": step.state_dict()}}
    public, secret = run_folder.split_state(state)
    assert "head_pool" not in public["method"]["server"]
    assert [path for path, _ in secret["server"]] == [("method", "server", "head_pool")]
    again = _pooled_step(module)
    again.load_state_dict(run_folder.merge_state(public, secret)["method"]["server"])
    assert torch.equal(again.pool, step.pool) and again.calls == 1


def test_a_zeroth_order_head_refuses_a_pooled_window(tiny_config):
    from privzv.errors import PrivzvError

    with pytest.raises(PrivzvError, match="head-window"):
        head.head_update(tiny_config(method="zoo-vfl", epsilon=1.0, head_window=2))
    assert head.head_update(tiny_config(method="zoo-vfl", epsilon=1.0)).window == 0
    assert head.head_update(tiny_config(epsilon=1.0, threat="eavesdropper")).window == 0
    assert head.head_update(tiny_config(epsilon=1.0, activation=[0.5, 0.5])).window == 0


def test_head_share_1_sends_no_downlink_and_spends_the_whole_budget_on_the_head(tiny_config, tiny_scheduler):
    """The frozen-devices control: zeros go down, the ledger composes the head alone."""
    from privzv import accounting, gdp
    from privzv.errors import PrivzvError
    from privzv.ledger import PrivacyLedger

    kw = dict(epsilon=1.0, freeze="devices", head_share=1.0, transcripts=True, head_sampling="batch")
    p = privacy.plan(tiny_config(**kw), methods.get("dpzv"), records=96, rounds=24)
    assert p.release.withholds and p.release.head_weight == 1.0
    z_h = p.release.head.sigma / p.release.head.sensitivity
    assert p.release.noise_multiplier == pytest.approx(z_h)
    k = accounting.exposure(p.release, p.schedule).compositions  # head windows, c^2 each
    assert math.sqrt(k) / z_h == pytest.approx(gdp.mu_from_epsilon(1.0, 1e-5), rel=1e-6)
    ledger = PrivacyLedger(release=p.release, schedule=p.schedule, delta=1e-5, epsilon_budget=1.0)
    sched = tiny_scheduler(release=p.release, ledger=ledger, **kw)
    for _ in range(24):
        assert sched.step()
    downs = sched.recorder.transcripts["device0"].select("received", "delta")
    assert downs and all(float(abs(e.fields["delta"]).sum()) == 0.0 for e in downs)
    down, head_row = ledger.mechanisms()
    assert down["count"] == 0 and head_row["count"] > 0
    assert ledger.epsilon_spent() <= 1.0
    with pytest.raises(PrivzvError, match="head-share 1"):
        tiny_config(epsilon=1.0, head_share=1.0).validate()
