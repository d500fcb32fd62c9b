"""Every noise draw has the calibrated std, comes from the right party's generator, and the
server's generator cannot be reproduced from anything a device knows."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy import stats

from privzv import accounting
from privzv.training import methods, privacy, zo
from privzv.training.messages import Message, SERVER
from privzv.training.methods import common


N = 2000


def _pvalue(samples, sigma):
    """Smaller of two p-values for 'samples ~ N(0, sigma^2)': KS (shape) and the two-sided
    chi-square test of sum(x^2)/sigma^2 ~ chi2(n) (scale)."""
    x = np.asarray(samples, dtype=float).ravel()
    ks = stats.kstest(x, "norm", args=(0, sigma)).pvalue
    s = float(np.sum(x ** 2)) / sigma ** 2
    chi = 2 * min(stats.chi2.cdf(s, len(x)), stats.chi2.sf(s, len(x)))
    return min(ks, chi)


def _ks_pvalues(samples, sigma):
    """p-values against the right sigma and a 10% wrong one."""
    return _pvalue(samples, sigma), _pvalue(samples, 1.1 * sigma)


def _dpzv_noise(sched, draws):
    """Delta with h+ == h-: every delta_i is 0, so Delta is the noise z alone."""
    method, server = sched.method, sched.server
    method.train_server = False
    h = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    msg = Message(0, "device0", SERVER, "embeddings", {"ids": torch.arange(8), "h_plus": h, "h_minus": h})
    return [float(method.server_reply(server, msg)["delta"]) for _ in range(draws)]


def test_dpzv_scalar_noise_has_the_calibrated_std(tiny_scheduler, tiny_config):
    config = tiny_config(epsilon=2.0, delta=1e-5)
    plan = privacy.plan(config, methods.get("dpzv"), records=96, rounds=24)
    expected = accounting.calibrate(2.0, 1e-5, dataclasses.replace(plan.release, sigma=None),
                                    plan.schedule, accountant="pld").sigma
    assert plan.sigma == pytest.approx(expected)
    assert (plan.release.aggregate, plan.release.batch_size, plan.release.clip) == ("mean", 8, 10.0)
    sched = tiny_scheduler(sigma=plan.sigma)
    z = _dpzv_noise(sched, N)
    right, wrong = _ks_pvalues(z, plan.sigma)
    assert right > 1e-3 and wrong < 1e-3


def test_vector_methods_calibrate_a_per_sample_release_of_the_embedding_dimension(tiny_config):
    for name in ("vafl", "fo-vector"):
        plan = privacy.plan(tiny_config(method=name, epsilon=2.0), methods.get(name), records=96, rounds=24)
        assert (plan.release.aggregate, plan.release.dim, plan.release.sensitivity) == ("per-sample", 4, 20.0)
        assert plan.sigma > 0


def test_given_sigma_is_used_directly_and_sigma_zero_adds_nothing(tiny_scheduler, tiny_config):
    plan = privacy.plan(tiny_config(sigma=0.7), methods.get("dpzv"), records=96, rounds=24)
    assert plan.sigma == 0.7 and plan.result is None
    zero = privacy.plan(tiny_config(sigma=0.0), methods.get("dpzv"), records=96, rounds=24)
    assert zero.sigma == 0.0 and not zero.private
    assert set(_dpzv_noise(tiny_scheduler(sigma=0.0), 5)) == {0.0}


def test_vafl_device_noise_has_the_std_and_clipping_bounds_rows(tiny_scheduler):
    sigma = 0.3
    sched = tiny_scheduler(method="vafl", sigma=sigma, clip=0.5)
    device, method = sched.devices[0], sched.method
    diffs = []
    for _ in range(N // 8):
        up = method.device_send(device, torch.arange(8))
        clean = device.scratch["h"].detach()
        assert (clean.norm(dim=1) <= 0.5 + 1e-6).all()
        diffs.append((up["h"] - clean).numpy())
    right, wrong = _ks_pvalues(np.concatenate(diffs), sigma)
    assert right > 1e-3 and wrong < 1e-3


def test_fo_vector_downlink_noise_has_the_std_around_clipped_per_sample_gradients(tiny_scheduler):
    sigma, clip = 0.05, 0.01
    sched = tiny_scheduler(method="fo-vector", sigma=sigma, clip=clip)
    method, server = sched.method, sched.server
    method.train_server = False
    ids = torch.arange(8)
    h = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    clean = zo.clip_rows(common.embedding_gradients(server, None, 0, ids, h, False), clip)
    assert (clean.norm(dim=1) <= clip + 1e-7).all()
    msg = Message(0, "device0", SERVER, "embedding", {"ids": ids, "h": h})
    diffs = [(method.server_reply(server, msg)["g"] - clean).numpy() for _ in range(N // 32)]
    right, wrong = _ks_pvalues(np.concatenate(diffs), sigma)
    assert right > 1e-3 and wrong < 1e-3


def test_server_noise_is_not_reproducible_from_device_known_seeds(tiny_scheduler):
    sched = tiny_scheduler(sigma=1.0)
    for _ in range(12):
        sched.step()
    device_seeds = {int(e.fields["seed"][0]) for p, t in sched.recorder.transcripts.items()
                    if p != SERVER for e in t.select("local", "seed")}
    assert len(device_seeds) == 12
    z = _dpzv_noise(sched, 3)
    for s in device_seeds | {sched.devices[0].seed}:
        guess = torch.randn(8, generator=torch.Generator().manual_seed(s)).tolist()
        assert not any(abs(a - b) < 1e-6 for a in z for b in guess)
    assert sched.server.noise.gen.initial_seed() not in device_seeds


def test_secret_seed_changes_the_noise_but_nothing_a_device_draws(tiny_scheduler):
    a, b, c = (tiny_scheduler(sigma=1.0, secret_seed=s) for s in (11, 11, 12))
    for s in (a, b, c):
        for _ in range(6):
            s.step()
    seeds = lambda s: [int(e.fields["seed"][0]) for e in s.recorder.transcripts["device0"].select("local", "seed")]  # noqa: E731
    deltas = lambda s: [float(e.fields["delta"][0]) for e in s.recorder.transcripts[SERVER].select("sent")]  # noqa: E731
    assert seeds(a) == seeds(c) and seeds(a) == seeds(b)
    assert deltas(a) == deltas(b)
    assert all(x != y for x, y in zip(deltas(a), deltas(c)))
