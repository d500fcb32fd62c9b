import math

import numpy as np
import pytest
from scipy import special, stats

from privzv.attacks import canary_audit


def test_p_value_without_delta_is_the_binomial_tail():
    assert canary_audit.one_run_p_value(100, 40, 30, 1.0, 0.0) == pytest.approx(
        stats.binom.sf(29, 40, special.expit(1.0)))
    assert canary_audit.one_run_p_value(100, 40, 30, 1.0, 1e-3) > \
        canary_audit.one_run_p_value(100, 40, 30, 1.0, 0.0)


def test_one_run_bound_respects_a_randomised_response_guesser():
    """Guesses right with probability e^eps/(1+e^eps): exactly eps-DP; the bound must stay below."""
    rng = np.random.default_rng(0)
    eps, m, over = 1.0, 1000, 0
    for _ in range(40):
        truth = rng.integers(0, 2, m)
        right = rng.random(m) < special.expit(eps)
        guess = np.where(right, truth, 1 - truth)
        scores = np.where(guess == 1, 1.0, -1.0) * rng.random(m)
        b = canary_audit.eps_lower_bound(scores, truth, delta=0.0, alpha=0.05)
        over += b["eps_lb"] > eps
    assert over <= 4
    assert b["eps_lb"] > 0.5          # and it is not vacuous


def test_end_to_end_first_order_without_noise_leaks_and_noise_stops_it():
    leak = canary_audit.run("fo-vector", epsilon=math.inf, canaries=200, epochs=1.0)
    assert leak["accuracy_of_sign"] > 0.95 and leak["eps_lb"] > 2.0
    noisy = canary_audit.run("fo-vector", epsilon=1.0, canaries=200, epochs=1.0)
    assert noisy["eps_lb"] <= noisy["epsilon_upper"]
