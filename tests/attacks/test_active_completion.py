"""Fu et al.'s active model completion: the malicious optimiser scales the attacker's own step
(and nothing else); completion succeeds without noise and falls to the prior on labels that are
independent of the features."""

import dataclasses

import numpy as np
import pytest
import torch

from privzv.attacks import active_completion as ac
from privzv.attacks import model_completion as mc
from privzv.attacks import party_models
from privzv.errors import PrivzvError
from privzv.training import data, run
from privzv.training.config import TrainConfig


def _config(method, **kw):
    clip, rate = {"fo-vector": (1.0, 0.05), "vafl": (10.0, 0.05), "dpzv": (10.0, 0.03)}[method]
    return TrainConfig(
        dataset="digits",
        method=method,
        server_kind="sum",
        embed_dim=10,
        epochs=1,
        batch_size=32,
        evals=1,
        seed=0,
        clip=clip,
        lr_device=rate,
        transcripts=False,
        **kw,
    )


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", 4, seed=0)


def _one_round_each(config, dataset, boost):
    """Every device's parameter change over the first M rounds (one round each, round-robin)."""
    sched = run.build(config, dataset, secret_seed=3)
    if boost is not None:
        ac.amplify(sched.method, 0, boost)
    before = [d.flat.clone() for d in sched.devices]
    for _ in sched.devices:
        sched.step()
    return [d.flat - b for d, b in zip(sched.devices, before)]


@pytest.mark.parametrize("method", ["fo-vector", "vafl", "dpzv"])
def test_amplify_scales_the_attackers_step_and_no_other(digits, method):
    honest = _one_round_each(_config(method), digits, None)
    malicious = _one_round_each(_config(method), digits, 5.0)
    assert honest[0].norm() > 0
    # DPZV's step restores +lam u and moves by -eta Delta u in float32: compare to the step's size
    tol = 1e-3 * float(honest[0].norm())
    assert float((malicious[0] - 5.0 * honest[0]).norm()) < tol
    for m in range(1, len(honest)):
        assert torch.equal(malicious[m], honest[m])


def test_amplify_refuses_a_method_it_does_not_cover_and_a_scale_down(digits):
    sched = run.build(_config("fo-vector"), digits, secret_seed=3)
    with pytest.raises(PrivzvError, match="boost"):
        ac.amplify(sched.method, 0, 0.5)
    czofo = run.build(dataclasses.replace(_config("fo-vector"), method="czofo"), digits, secret_seed=3)
    with pytest.raises(PrivzvError, match="active completion applies to"):
        ac.amplify(czofo.method, 0, 5.0)


def _completion(model, dataset, labels):
    x = dataset.x_train[0]
    return mc.model_completion(party_models.outputs(model, x), labels, 10, seed=0)


def test_active_completion_reads_labels_without_noise_and_beats_passive(digits):
    y = digits.y_train.numpy()
    passive, _ = ac.malicious_run(_config("fo-vector"), digits, 0, boost=1.0, secret_seed=1)
    active, accuracy = ac.malicious_run(_config("fo-vector"), digits, 0, secret_seed=1)
    out, base = _completion(active, digits, y), _completion(passive, digits, y)
    assert accuracy > 0.5  # the joint model still trains
    assert out["advantage"] > 0.3
    assert out["accuracy"] > base["accuracy"]


def test_active_completion_fails_when_labels_are_independent_of_features(digits):
    rng = np.random.default_rng(0)
    shuffled = dataclasses.replace(digits, y_train=digits.y_train[rng.permutation(len(digits.y_train))])
    model, _ = ac.malicious_run(_config("fo-vector"), shuffled, 0, secret_seed=1)
    out = _completion(model, shuffled, shuffled.y_train.numpy())
    assert abs(out["advantage"]) < 0.06


def test_registry_runs_both_completions_on_a_finished_run(tmp_path):
    """``privzv attack run`` rows: the attacker is device 0, each with its baseline beside it."""
    from privzv.attacks import registry

    run.train(dataclasses.replace(_config("fo-vector"), transcripts=True), tmp_path, secret_seed=1)
    active = registry.run_attack("model-completion-active", tmp_path)
    semi = registry.run_attack("model-completion-semi", tmp_path)
    assert active.party == semi.party == "device0"
    m = active.metrics
    assert m["boost"] == ac.BOOST and m["advantage"] > 0.3 and 0 < m["passive_accuracy"] < 1
    assert semi.metrics["advantage"] > 0.3 and 0 < semi.metrics["supervised_accuracy"] < 1


def test_a_diverged_malicious_run_is_an_error_not_a_result(digits):
    from privzv.training.divergence import Diverged

    with pytest.raises(Diverged, match="diverged"):
        ac.malicious_run(_config("fo-vector"), digits, 0, boost=1e12, secret_seed=1)
