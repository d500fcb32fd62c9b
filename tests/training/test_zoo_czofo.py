"""The ZO baselines zoo-vfl and czofo: estimators, DP noise and clipping, learning, determinism."""

import copy
import dataclasses
import math

import pytest
import torch

from privzv.errors import PrivzvError
from privzv.release import HeadUpdate, Release
from privzv.training import data, methods, run, zo
from privzv.training.config import TrainConfig
from privzv.training.methods import common, czofo, zoo_vfl

C, B = 0.5, 16


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", 4)


def scheduler(ds, method, sigma=0.0, secret_seed=7, **overrides):
    cfg = dict(method=method, batch_size=B, clip=C, transcripts=False, embed_dim=8)
    cfg.update(overrides)
    config = TrainConfig(**cfg).validate()
    return run.build(config, ds, sigma=sigma, secret_seed=secret_seed)


def run_rounds(sched, rounds):
    for _ in range(rounds):
        assert sched.step()


def big_head(sched, factor=200.0):
    """Scale the head so that loss differences are far beyond the clip C (clipping must bite)."""
    with torch.no_grad():
        for p in sched.server.head.parameters():
            p.mul_(factor)


# ------------------------------------------------------------------ releases and registry


def test_registered_and_releases():
    config = TrainConfig(batch_size=B, clip=C)
    assert methods.get("czofo").release(config) == Release(
        clip=C, batch_size=B, aggregate="per-sample", dim=czofo.PERTURBATIONS, protects="label"
    )
    assert methods.get("czofo").release(config).sensitivity == 2 * C  # per sample, replace-one
    assert methods.get("zoo-vfl").release(config).sensitivity == pytest.approx(2 * C / B)
    for name in ("czofo", "zoo-vfl"):
        with pytest.raises(PrivzvError, match="secret-subsampling"):
            methods.get(name).release(TrainConfig(method=name, threat="secret-subsampling", super_batch=64))


# ------------------------------------------------------------------ czofo


def test_czofo_feedback_is_the_directional_derivative_of_each_record_loss(digits):
    sched = scheduler(digits, "czofo", freeze="server", lam=1e-4)
    run_rounds(sched, 20)
    method, dev, server = sched.method, sched.devices[1], sched.server
    ids = torch.arange(B)
    up = method.device_send(dev, ids)
    h = up["h"].clone().requires_grad_(True)
    rows = common.with_row(server.table.gather(ids), 1, h)
    common.losses(server.head, rows, server.labels[ids]).sum().backward()  # per-record dL_i/dh_i
    down = method.server_reply(server, up)
    u = czofo.unit_directions(dev.step_seed(), (B, czofo.PERTURBATIONS, 8))
    assert torch.allclose(up["h_perturbed"], up["h"][:, None] + 1e-4 * u)
    expected = (u * h.grad[:, None]).sum(-1)  # u_ik . dL_i/dh_i
    assert down["d"].shape == (B, czofo.PERTURBATIONS)
    assert torch.allclose(down["d"], expected, atol=2e-2, rtol=2e-2)
    # bytes: ids int64, h and n perturbed embeddings float32 up; n x B float32 down
    assert up.nbytes == B * 8 + B * 8 * 4 * (1 + czofo.PERTURBATIONS)
    assert down.nbytes == czofo.PERTURBATIONS * B * 4


def test_czofo_embedding_gradient_is_unbiased():
    torch.manual_seed(0)
    grad = torch.randn(3, 6)  # true dL_i/dh_i of 3 records, E = 6
    estimates = []
    for seed in range(4000):
        u = czofo.unit_directions(seed, (3, czofo.PERTURBATIONS, 6))
        d = (u * grad[:, None]).sum(-1)  # exact directional derivatives
        estimates.append(czofo.embedding_gradient(d, u))
    mean = torch.stack(estimates).mean(0)
    assert torch.allclose(mean, grad, atol=0.1)
    assert torch.allclose(czofo.unit_directions(1, (2, 3, 6)).norm(dim=-1), torch.ones(2, 3))


def czofo_reply(sched, up):
    return sched.method.server_reply(sched.server, up)["d"]


def test_czofo_noise_has_the_calibrated_std_from_the_servers_generator(digits):
    sigma = 0.7
    noisy = scheduler(digits, "czofo", sigma=sigma, freeze="server")
    clean = scheduler(digits, "czofo", sigma=0.0, freeze="server", epsilon=1.0)  # clipped, no noise
    assert clean.method.clip == C and noisy.method.clip == C
    ids = torch.arange(B)
    up = noisy.method.device_send(noisy.devices[0], ids)
    draws = []
    for _ in range(60):
        replay = copy.deepcopy(noisy.server.noise.stream("downlink"))
        d = czofo_reply(noisy, up)
        z = d - czofo_reply(clean, up)
        expected = replay.gaussian((B, czofo.PERTURBATIONS), sigma)
        assert torch.allclose(z, expected, atol=1e-5)  # exactly the server's downlink draw
        draws.append(z)
    z = torch.stack(draws).double()
    n = z.numel()  # 4800 values
    assert abs(float(z.mean())) < 4 * sigma / math.sqrt(n)
    assert abs(float(z.std()) / sigma - 1) < 0.05
    flat = z.reshape(60, -1)  # uncorrelated across entries
    assert abs(float(torch.corrcoef(flat.T[:2])[0, 1])) < 0.4


def test_czofo_clipping_bounds_each_record_also_for_nan_and_inf(digits):
    sched = scheduler(digits, "czofo", freeze="server", epsilon=1.0)  # DP on, sigma 0: clean values
    big_head(sched)
    ids = torch.arange(B)
    up = sched.method.device_send(sched.devices[2], ids)
    d = czofo_reply(sched, up)
    norms = d.norm(dim=1)
    assert torch.all(norms <= C * (1 + 1e-5)) and torch.any(norms > 0.99 * C)  # the clip bites
    # replace one record's messages with garbage: only its row changes, by at most 2C in L2
    h_perturbed = up["h_perturbed"].clone()
    h_perturbed[3, 0] = float("nan")
    h_perturbed[3, 1] = float("inf")
    h_perturbed[3, 2:] = -h_perturbed[3, 2:] * 1e6
    other = type(up)(
        up.round, up.sender, up.receiver, up.kind, {"ids": ids, "h": up["h"], "h_perturbed": h_perturbed}
    )
    d2 = czofo_reply(sched, other)
    change = (d2 - d).norm(dim=1)
    assert torch.all(torch.isfinite(d2)) and torch.all(d2.norm(dim=1) <= C * (1 + 1e-5))
    assert torch.all(change[torch.arange(B) != 3] == 0) and change[3] <= 2 * C * (1 + 1e-5)


def test_czofo_without_dp_sends_unclipped_feedback(digits):
    sched = scheduler(digits, "czofo", freeze="server")
    big_head(sched)
    assert sched.method.clip is None
    d = czofo_reply(sched, sched.method.device_send(sched.devices[0], torch.arange(B)))
    assert float(d.norm(dim=1).max()) > 10 * C


# ------------------------------------------------------------------ zoo-vfl


def test_zoo_vfl_sends_one_sided_pairs_and_restores_and_updates_exactly(digits):
    sched = scheduler(digits, "zoo-vfl", freeze="server", lr_device=0.01)
    dev, method = sched.devices[0], sched.method
    before = [p.detach().clone() for p in dev.model.parameters()]
    reference = copy.deepcopy(dev.model)
    ids, seed = torch.arange(B), dev.step_seed()
    up = method.device_send(dev, ids)
    u = zo.direction(dev.model, seed)
    with torch.no_grad():
        assert torch.equal(up["h"], reference(dev.x[ids]))  # h at w
        zo.perturb_(reference, seed, -method.lam, zo.gaussian_norm(reference, seed))
        assert torch.allclose(up["h_perturbed"], reference(dev.x[ids]), atol=1e-6)  # at w - lam*u
    down = method.server_reply(sched.server, up)
    method.device_receive(dev, down)
    after = torch.cat([p.detach().reshape(-1) for p in dev.model.parameters()])
    start = torch.cat([p.reshape(-1) for p in before])
    expected = start - 0.01 * float(down["delta"]) * u
    assert torch.allclose(after, expected, atol=1e-5)
    assert up.nbytes == B * 8 + 2 * B * 8 * 4 and down.nbytes == 4


def test_zoo_vfl_noise_std_and_clipped_mean_sensitivity(digits):
    sigma = 0.3
    noisy = scheduler(digits, "zoo-vfl", sigma=sigma, freeze="server")
    clean = scheduler(digits, "zoo-vfl", sigma=0.0, freeze="server", epsilon=1.0)
    for s in (noisy, clean):
        big_head(s)
    ids = torch.arange(B)
    up = noisy.method.device_send(noisy.devices[0], ids)
    reference = float(clean.method.server_reply(clean.server, up)["delta"])
    zs = []
    for _ in range(2000):
        replay = copy.deepcopy(noisy.server.noise.stream("downlink"))
        z = float(noisy.method.server_reply(noisy.server, up)["delta"]) - reference
        assert z == pytest.approx(float(replay.gaussian((), sigma)), abs=1e-5)
        zs.append(z)
    zs = torch.tensor(zs, dtype=torch.float64)
    assert abs(float(zs.std()) / sigma - 1) < 0.06 and abs(float(zs.mean())) < 4 * sigma / math.sqrt(2000)
    # replace-one: flipping one record's contribution from +C to -C moves the mean by exactly 2C/B
    h_perturbed = up["h_perturbed"].clone()
    deltas = []
    for fill in (float("nan"), float("inf"), -1e9, 1e9):
        h_perturbed[5] = fill
        other = type(up)(
            up.round, up.sender, up.receiver, up.kind, {"ids": ids, "h": up["h"], "h_perturbed": h_perturbed}
        )
        deltas.append(float(clean.method.server_reply(clean.server, other)["delta"]))
    assert all(math.isfinite(x) for x in deltas)
    spread = max(deltas + [reference]) - min(deltas + [reference])
    assert spread <= 2 * C / B * (1 + 1e-5) and spread >= 0.5 * 2 * C / B


# ------------------------------------------------------------------ learning and determinism


@pytest.mark.parametrize(
    "method, rounds, freeze, floor",
    [
        ("czofo", 400, None, 0.6),
        ("czofo", 500, "server", 0.3),  # the devices' ZO path learns on its own
        ("zoo-vfl", 1000, None, 0.2),
    ],
)
def test_learns_above_chance_on_digits(digits, method, rounds, freeze, floor):
    # the methods' own default rates (run.build would otherwise apply training/tuned.py's, whose
    # czofo device rate 5e-4 nearly freezes the devices)
    rates = {"lr_device": 0.05, "lr_server": 0.05} if method == "czofo" else {}
    sched = scheduler(digits, method, freeze=freeze, batch_size=32, embed_dim=16, **rates)
    start = sched.evaluate(digits.x_test, digits.y_test).test_accuracy
    run_rounds(sched, rounds)
    accuracy = sched.evaluate(digits.x_test, digits.y_test).test_accuracy
    assert accuracy >= floor and accuracy > start + 0.1


@pytest.mark.parametrize("method", ["czofo", "zoo-vfl"])
def test_same_seed_same_run(digits, method):
    def final(secret):
        sched = scheduler(digits, method, sigma=0.05, secret_seed=secret, epsilon=1.0)
        run_rounds(sched, 30)
        return [p.detach().clone() for d in sched.devices for p in d.model.parameters()] + [
            p.detach().clone() for p in sched.server.head.parameters()
        ]

    a, b, c = final(1), final(1), final(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))  # the noise comes from the secret seed


def _head_weights(sched) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in sched.server.head.parameters()])


@pytest.mark.parametrize(("sigma_h", "bound"), [(0.05, "drift"), (5.0, "noise")])
def test_zoo_vfl_head_rate_is_the_noise_limited_zo_step_and_moves_the_head_as_it_says(
    sigma_h, bound, tiny_scheduler, tiny_config
):
    """A private run's zeroth-order head rate is min(HEAD_RATE_TIMES_CLIP / C_h, ln(K) /
    (sigma_h^2 P), HEAD_DRIFT / (sigma_h sqrt(T))), P its parameters, T its steps (one a round).
    Run to its end with C_h far below the noise, the head's change (noise alone) has a standard
    deviation per weight near eta sigma_h sqrt(T) (HEAD_DRIFT where that cap binds) and not above
    it beyond the spread of T squared draws; at the old fixed 0.005 it was 0.0078 at sigma_h
    0.05 (the head stood still) and 0.78 at 5 (a random head). The rate printed is the rate
    applied, and ``--lr-server`` still wins."""
    config = dict(method="zoo-vfl", epochs=40, epsilon=2.0, clip=1.0)
    dp = HeadUpdate(clip=1e-4, batch_size=8, sigma=sigma_h)
    release = dataclasses.replace(methods.get("zoo-vfl").release(tiny_config(**config)), sigma=0.5, head=dp)
    sched = tiny_scheduler(release=release, **config)
    method, cfg = sched.method, sched.method.config
    steps = run.rounds_for(cfg, len(sched.server.labels))
    size, classes = _head_weights(sched).numel(), 3  # the tiny dataset's
    caps = {
        "noise": math.log(classes) / (sigma_h**2 * size),
        "drift": zoo_vfl.HEAD_DRIFT / (sigma_h * math.sqrt(steps)),
    }
    assert method.head.lr == pytest.approx(caps[bound]) == pytest.approx(min(caps.values()))
    assert method.default_rate("lr_server")[0] == method.head.lr
    start = _head_weights(sched)
    for _ in range(steps):
        assert sched.step()
    drift = float((_head_weights(sched) - start).std())
    expected = method.head.lr * sigma_h * math.sqrt(steps)
    assert 0.5 * expected < drift <= expected * (1 + 4 * math.sqrt(2 / steps))
    assert expected <= zoo_vfl.HEAD_DRIFT * (1 + 1e-9)
    given = tiny_scheduler(release=release, lr_server=0.02, **config).method
    assert given.head.lr == 0.02


def test_zoo_vfl_head_keeps_the_step_eta_c_h_where_the_noise_allows_and_its_rate_without_dp(
    tiny_scheduler, tiny_config
):
    """HEAD_RATE_TIMES_CLIP / C_h where the noise is small; the published LR_SERVER without a DP
    head (no noise, or a downlink-only sigma)."""
    config = dict(method="zoo-vfl", epsilon=2.0, clip=1.0)
    release = methods.get("zoo-vfl").release(tiny_config(**config))
    for clip in (0.1, 1.0):
        dp = HeadUpdate(clip=clip, batch_size=8, sigma=1e-6)
        sched = tiny_scheduler(release=dataclasses.replace(release, sigma=0.5, head=dp), **config)
        assert sched.method.head.lr == pytest.approx(zoo_vfl.HEAD_RATE_TIMES_CLIP / clip)
    assert tiny_scheduler(method="zoo-vfl").method.head.lr == zoo_vfl.ZooVFL.LR_SERVER
    assert tiny_scheduler(method="zoo-vfl", sigma=0.5).method.head.lr == zoo_vfl.ZooVFL.LR_SERVER
