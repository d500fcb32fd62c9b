"""The release the audits simulate (``privzv.attacks.releases`` with the run's ``Release``) has the
same distribution as the real DPZV server reply on a trained model: same mean, same sigma, same
sensitivity. If training's server step and the audited release drifted apart, these fail."""

import numpy as np
import pytest
import torch
from scipy import stats

from privzv.attacks import releases
from privzv.training import data, methods, privacy
from privzv.training import run as training_run
from privzv.training.config import TrainConfig
from privzv.training.messages import SERVER, device_name


@pytest.fixture(scope="module")
def trained():
    """A DPZV run on digits at epsilon 2 (one epoch), its privacy plan and its trained server."""
    cfg = TrainConfig(
        dataset="digits", method="dpzv", epsilon=2.0, epochs=1, evals=1, batch_size=32, clip=0.3, seed=0
    )
    ds = data.load("digits", cfg.devices, seed=0)
    rounds = training_run.rounds_for(cfg, len(ds.y_train))
    plan = privacy.plan(cfg, methods.get("dpzv"), len(ds.y_train), rounds)
    sched = training_run.build(cfg, ds, release=plan.release, secret_seed=5)
    sched.run(rounds, lambda r: False, lambda r: None)
    sched.method.train_server = False  # probe the trained server without moving it
    return plan, sched


def _uplink(sched, ids, h_plus, h_minus):
    return sched.method.message(device_name(0), SERVER, "embeddings", ids=ids, h_plus=h_plus, h_minus=h_minus)


def _quotients(sched, ids, h_plus, h_minus):
    """Per-record (L(h+) - L(h-)) / lam of the trained head: the records' contributions."""
    from privzv.training.methods import common

    server = sched.server
    stale = server.table.gather(ids)
    return (
        common.loss_differences(server, 0, stale, server.labels[ids], h_plus, h_minus, sched.method.lam)
        .double()
        .numpy()
    )


def test_real_reply_has_the_simulated_releases_mean_and_sigma(trained):
    plan, sched = trained
    release = plan.release
    b, e = release.batch_size, sched.server.table.data.shape[2]
    ids = torch.arange(b)
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(b, e, generator=gen)
    u = torch.randn(b, e, generator=gen) * 50  # some quotients beyond the clip
    up = _uplink(sched, ids, h + sched.method.lam * u, h - sched.method.lam * u)
    q = _quotients(sched, ids, up["h_plus"], up["h_minus"])
    assert np.abs(q).max() > release.clip  # the clip is exercised
    mean = releases.noiseless(release, q[:, None])[0]
    real = np.array([float(sched.method.server_reply(sched.server, up)["delta"][0]) for _ in range(2000)])
    rng = np.random.default_rng(0)
    simulated = releases.sample(release, np.broadcast_to(q[:, None], (2000, b, 1)), rng)[:, 0]
    assert release.sigma == pytest.approx(sched.method.sigma) and release.sigma > 0
    assert real.mean() == pytest.approx(mean, abs=4 * release.sigma / np.sqrt(2000))
    assert real.std() == pytest.approx(release.sigma, rel=0.06)
    assert stats.ks_2samp(real, simulated).pvalue > 1e-3


def test_real_reply_moves_by_the_releases_sensitivity(trained):
    """Replacing one record's contribution by the opposite extreme moves the noiseless reply by
    exactly 2C/B = ``release.sensitivity``, and no contribution moves it further."""
    plan, sched = trained
    release = plan.release
    b, e = release.batch_size, sched.server.table.data.shape[2]
    ids = torch.arange(b)
    h = torch.zeros(b, e)
    direction = torch.randn(e, generator=torch.Generator().manual_seed(1))
    sched.method.sigma = 0.0
    try:
        replies = []
        for sign in (1.0, -1.0):
            u = torch.zeros(b, e)
            u[0] = sign * 1e3 * direction  # push record 0 to a clip end
            up = _uplink(sched, ids, h + sched.method.lam * u, h - sched.method.lam * u)
            assert abs(_quotients(sched, ids, up["h_plus"], up["h_minus"])[0]) > release.clip
            replies.append(float(sched.method.server_reply(sched.server, up)["delta"][0]))
    finally:
        sched.method.sigma = plan.sigma
    assert abs(replies[0] - replies[1]) == pytest.approx(release.sensitivity, rel=1e-4)
    assert release.sensitivity == pytest.approx(2 * release.clip / release.batch_size)
