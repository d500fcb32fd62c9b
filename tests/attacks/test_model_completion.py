"""Model completion on simulated bottom models: beats the prior, falls to it on noise."""

import numpy as np
import pytest

from privzv.attacks import model_completion as mc
from privzv.errors import PrivzvError


def bottom_model_outputs(n=1000, classes=5, noise_only=False, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(classes, size=n)
    means = rng.normal(size=(classes, 8))
    raw = means[y] * 0.3 + rng.normal(size=(n, 8))  # weak raw features
    emb = rng.normal(size=(n, 8)) if noise_only else means[y] * 3 + rng.normal(size=(n, 8))
    return emb, y, raw


def test_completion_beats_prior_and_raw_features():
    emb, y, raw = bottom_model_outputs()
    out = mc.model_completion(emb, y, per_class=10, raw_features=raw)
    assert out["accuracy"] > 0.9 and out["advantage"] > 0.6
    assert out["raw_accuracy"] < out["accuracy"] - 0.2
    assert out["evaluated"] == len(y) - 50


def test_completion_on_noise_is_prior():
    emb, y, _ = bottom_model_outputs(noise_only=True)
    assert abs(mc.model_completion(emb, y, per_class=10)["advantage"]) < 0.06


def test_known_per_class_draws_each_class():
    y = np.repeat(np.arange(3), 20)
    known = mc.known_per_class(y, 4, seed=1)
    assert np.bincount(y[known]).tolist() == [4, 4, 4]
    assert not np.array_equal(known, mc.known_per_class(y, 4, seed=2))
    with pytest.raises(PrivzvError, match="per_class"):
        mc.known_per_class(y, 20, seed=0)
    with pytest.raises(PrivzvError, match="per_class"):
        mc.known_per_class(y, 0, seed=0)


def test_vafl_device_completes_from_its_clean_bottom_model(tmp_path):
    """A VAFL device adds the forward noise itself: it completes from its own clean outputs
    (the run's checkpoint), not from the noised uplink in its transcript."""
    from privzv.attacks import registry
    from privzv.training.config import TrainConfig
    from privzv.training.run import train
    from privzv.training.run_folder import CHECKPOINT

    cfg = TrainConfig(
        dataset="digits",
        method="vafl",
        epsilon=1.0,
        server_kind="sum",
        embed_dim=10,
        epochs=1,
        batch_size=32,
        evals=1,
        seed=0,
        clip=0.1,
    )
    train(cfg, tmp_path, secret_seed=1)
    clean = registry.run_attack("model-completion", tmp_path).metrics
    (tmp_path / CHECKPOINT).unlink()
    uplink = registry.run_attack("model-completion", tmp_path).metrics
    assert clean["source"] == "bottom-model" and uplink["source"] == "uplink"
    assert clean["advantage"] > 0.25 and abs(uplink["advantage"]) < 0.06
