import math

import numpy as np
import pytest
from scipy import stats

from privzv.attacks import metrics
from privzv.errors import PrivzvError


def test_classification_against_prior():
    y = np.array([0, 0, 0, 1])
    m = metrics.classification_metrics(y, np.array([0, 0, 0, 0]))
    ci = stats.binomtest(3, 4).proportion_ci(0.95, method="exact")
    assert m == {
        "accuracy": 0.75,
        "prior": 0.75,
        "advantage": 0.0,
        "n": 4,
        "accuracy_ci": [pytest.approx(ci.low), pytest.approx(ci.high)],
    }
    m = metrics.classification_metrics(y, y)
    assert m["advantage"] == pytest.approx(0.25)


def test_scoring_perfect_random_and_inverted():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 5000)
    perfect = metrics.scoring_metrics(y, y + 0.1 * rng.random(y.size))
    assert perfect["auc"] == 1.0 and perfect["tpr@fpr=0.001"] == 1.0
    chance = metrics.scoring_metrics(y, rng.random(y.size))
    assert abs(chance["auc"] - 0.5) < 0.03 and chance["tpr@fpr=0.01"] < 0.03
    assert metrics.roc_auc(y, -y) == 0.0


def test_tpr_at_fpr_matches_gaussian_shift():
    rng = np.random.default_rng(1)
    n = 200_000
    y = np.repeat([0, 1], n)
    s = np.concatenate([rng.normal(0, 1, n), rng.normal(2, 1, n)])
    want = stats.norm.sf(stats.norm.isf(1e-2) - 2)
    assert metrics.tpr_at_fpr(y, s, 1e-2) == pytest.approx(want, abs=0.01)
    assert metrics.roc_auc(y, s) == pytest.approx(stats.norm.cdf(2 / math.sqrt(2)), abs=0.005)


def test_regression_baseline_mean_gives_zero_r2():
    rng = np.random.default_rng(2)
    t = rng.normal(size=(100, 3))
    m = metrics.regression_metrics(t, t + 0.1)
    assert m["mse"] == pytest.approx(0.01) and m["baseline_r2"] == 0.0
    assert m["baseline_mse"] == pytest.approx(t.var(axis=0).mean())
    assert m["mse_gain"] > 0


def test_mean_ci_t_interval_and_coverage():
    out = metrics.mean_ci([1.0, 2.0, 3.0])
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)
    assert out["mean"] == 2.0 and out["low"] == pytest.approx(2 - half) and out["n"] == 3
    assert metrics.mean_ci([5.0])["low"] == -math.inf
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(400):
        ci = metrics.mean_ci(rng.normal(1.0, 2.0, 5))
        covered += ci["low"] <= 1.0 <= ci["high"]
    assert 0.92 <= covered / 400 <= 0.98


def test_summarize_and_bad_input():
    s = metrics.summarize([{"acc": 0.5, "name": "x"}, {"acc": 0.7, "name": "y"}])
    assert set(s) == {"acc"} and s["acc"]["mean"] == pytest.approx(0.6)
    with pytest.raises(PrivzvError):
        metrics.roc_auc([1, 1], [0.1, 0.2])
    with pytest.raises(PrivzvError):
        metrics.accuracy([1, 2], [1])
    with pytest.raises(PrivzvError):
        metrics.mean_ci([])


def test_weighted_auc_with_unit_weights_is_roc_auc_and_resamples_count_records():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 500)
    s = np.round(rng.normal(size=500) + y, 1)  # ties included
    assert metrics._weighted_auc(y, s, np.ones((1, 500)))[0] == pytest.approx(metrics.roc_auc(y, s))
    twice = np.concatenate([y, y[:100]]), np.concatenate([s, s[:100]])
    w = np.ones((1, 500))
    w[0, :100] = 2  # a record drawn twice counts twice
    assert metrics._weighted_auc(y, s, w)[0] == pytest.approx(metrics.roc_auc(*twice))


def test_intervals_over_records_cover_and_separate():
    """The bootstrap intervals hold the point estimate, exclude chance for a real signal and
    hold it for none; they narrow with more records."""
    rng = np.random.default_rng(4)
    y = np.repeat([0, 1], 1000)
    real = metrics.scoring_metrics(y, y * 0.5 + rng.normal(size=y.size))
    none = metrics.scoring_metrics(y, rng.normal(size=y.size))
    assert real["auc_ci"][0] < real["auc"] < real["auc_ci"][1] and real["auc_ci"][0] > 0.55
    assert none["auc_ci"][0] < 0.5 < none["auc_ci"][1]
    t = rng.normal(size=(400, 2))
    gain = metrics.regression_metrics(t, t + 0.5 * rng.normal(size=t.shape))
    assert gain["mse_gain_ci"][0] < gain["mse_gain"] < gain["mse_gain_ci"][1]
    assert gain["mse_gain_ci"][0] > 0  # better than the mean guess (MSE 1 vs 0.25)
    small = metrics.regression_metrics(t[:40], t[:40] + 0.5 * rng.normal(size=(40, 2)))
    assert np.diff(small["mse_gain_ci"]) > np.diff(gain["mse_gain_ci"])
