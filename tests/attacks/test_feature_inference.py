"""Feature inference on simulated releases: beats its baseline with no defense, not on noise."""

import numpy as np
import pytest

from privzv.attacks import feature_inference as fi
from privzv.errors import PrivzvError


def records(n=1200, d=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng, rng.normal(size=(n, d))


@pytest.mark.parametrize("regressor", fi.REGRESSORS)
def test_server_inverts_clean_embeddings(regressor):
    rng, x = records()
    h = np.tanh(x @ rng.normal(size=(6, 16)) / 2)  # a device's bottom model
    out = fi.server_feature_inference(h, x, aux=300, regressor=regressor)
    assert out["r2"] > 0.8 and out["mse"] < 0.25 * out["baseline_mse"]


def test_forward_vector_noise_protects_and_pure_noise_is_baseline():
    rng, x = records()
    h = np.tanh(x @ rng.normal(size=(6, 16)) / 2)
    clean = fi.server_feature_inference(h, x, aux=300)
    noisy = fi.server_feature_inference(h + rng.normal(scale=1.0, size=h.shape), x, aux=300)
    pure = fi.server_feature_inference(rng.normal(size=h.shape), x, aux=300)
    assert noisy["mse"] > clean["mse"] + 0.2  # VAFL's forward noise hides features
    assert abs(pure["r2"]) < 0.05 and abs(pure["mse_gain"]) < 0.05 * pure["baseline_mse"]


def two_devices(n=1200, seed=0):
    """Device 0 (attacker), device 1 (victim), a summing server with squared loss to targets t.

    The gradient w.r.t. device 0's output is h0 + h1 - t: it carries device 1's output.
    """
    rng = np.random.default_rng(seed)
    x0, x1 = rng.normal(size=(n, 5)), rng.normal(size=(n, 5))
    h0, h1 = x0 @ rng.normal(size=(5, 5)), x1 @ rng.normal(size=(5, 5))
    t = rng.normal(scale=0.2, size=(n, 5))
    return rng, x0, x1, h0 + h1 - t


@pytest.mark.parametrize("regressor", fi.REGRESSORS)
def test_device_reads_other_features_from_gradient_downlink(regressor):
    rng, x0, x1, g = two_devices()
    out = fi.device_feature_inference(x0, g, x1, aux=300, regressor=regressor)
    assert out["r2"] > 0.6 and out["baseline_r2"] < 0.05
    assert out["baseline"] == "own-features regression"


def test_device_with_scalar_or_noise_downlink_is_baseline():
    rng, x0, x1, g = two_devices()
    batch_scalar = np.repeat(rng.normal(size=len(x0) // 64 + 1), 64)[: len(x0)]  # DPZV-like
    for downlink in (batch_scalar, rng.normal(size=g.shape)):
        out = fi.device_feature_inference(x0, downlink, x1, aux=300)
        assert abs(out["mse_gain"]) < 0.05 * out["baseline_mse"]


def test_bad_inputs_raise():
    _, x = records(n=50)
    with pytest.raises(PrivzvError, match="aux"):
        fi.server_feature_inference(x, x, aux=49)
    with pytest.raises(PrivzvError, match="regressor"):
        fi.server_feature_inference(x, x, aux=10, regressor="forest")
    with pytest.raises(PrivzvError, match="rows"):
        fi.device_feature_inference(x, x[:10], x, aux=10)


def test_inputs_beyond_the_auxiliary_range_do_not_explode():
    rng, x = records()
    h = np.tanh(x @ rng.normal(size=(6, 16)) / 2)
    _, rest = fi.split_auxiliary(len(h), 300, seed=0)
    h[rest[:5]] = 1e30  # a diverged run's embeddings, unlike any aux row
    out = fi.server_feature_inference(h, x, aux=300, seed=0)
    assert out["mse"] < 0.5 * out["baseline_mse"]


def labelled_records(n=1200, classes=5, seed=0):
    """Features = a class mean (what the server's labels tell) + a per-record part."""
    rng = np.random.default_rng(seed)
    y = rng.integers(classes, size=n)
    own = rng.normal(size=(n, 6))
    return rng, y, rng.normal(size=(classes, 6))[y] + own, own


def test_labels_are_the_server_baseline_and_embeddings_must_beat_them():
    rng, y, x, own = labelled_records()
    # embeddings carrying only the label: no gain over what the server's labels already give
    label_only = np.eye(5)[y] @ rng.normal(size=(5, 16)) + 0.1 * rng.normal(size=(len(y), 16))
    out = fi.server_feature_inference(label_only, x, y, aux=300)
    assert out["baseline"] == "labels regression" and out["baseline_r2"] > 0.3
    assert abs(out["r2"] - out["baseline_r2"]) < 0.03
    assert out["r2"] - fi.server_feature_inference(label_only, x, aux=300)["baseline_r2"] > 0.3
    # embeddings carrying the per-record part: a real gain over the labels
    informative = np.tanh(own @ rng.normal(size=(6, 16)) / 2)
    out = fi.server_feature_inference(informative, x, y, aux=300)
    assert out["r2"] - out["baseline_r2"] > 0.3
