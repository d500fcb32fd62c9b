"""The fuzz's slow calibration corners (issue 22 item 8; ``benchmarks/fuzz_accounting.py --n 300
--seed 0``, sample rates <= 2.3e-4): each cure keeps the answer one-sided and the search cheap."""

import math
import sys
from pathlib import Path

import pytest

import privzv
from privzv import accountants, calibration, tilted_pld
from privzv.threats import Exposure

# fuzz row 148 (155 s on 2026-11-25, 14.6 s on 2026-11-27): eavesdropper, add-remove
Q, T, DELTA = 1.3808158999086137e-06, 6312852, 4.166216859003889e-06


def test_the_tilted_range_is_sized_by_the_tilted_spread():
    """A sampled release tilted at its saddle point is far wider than untilted (std 4e-6 here):
    Chernoff's thetas above the tilt scaled by the untilted std started at 26, where the tail's
    moment generating function is astronomically large, and the composition asked for 5.9e9
    points (pld declined; the calibration stopped at noise multiplier 0.795, epsilon 0.058 for a
    target of 0.307). Scaled by the tilted std, the same bound asks for under 1e7."""
    exp = Exposure(T, Q)
    disc = accountants.pld_grid_step(0.7455, exp, DELTA, accountants.pld_discretization(0.3, T, DELTA))
    _, tilted = accountants._tilted_release(0.7455, T, Q, "remove", DELTA, disc)
    assert tilted_pld.composed_points(tilted, T, accountants._tail(DELTA)) < 1e7


def test_a_grid_too_large_is_declined_before_any_release_is_composed(monkeypatch):
    """pld at epsilon 1294, T = 5.4e6, q = 4.8e-8 (fuzz row 131: 10.5 s, rdp answered): the probe
    sizes every direction first, so no composition runs and rdp answers the same noise
    multiplier."""
    case = dict(
        epsilon=1293.7348113777564,
        delta=1.0820877180061035e-08,
        steps=5436593,
        sample_rate=4.816278657675352e-08,
        neighbors="add-remove",
        threat="eavesdropper",
    )
    found = privzv.noise_multiplier(accountant="pld", **case)
    assert found.accountant == "rdp" and found.epsilon <= case["epsilon"]
    by_rdp = privzv.noise_multiplier(accountant="rdp", **case)
    assert found.noise_multiplier == pytest.approx(by_rdp.noise_multiplier, rel=calibration.Z_RTOL)
    composed = []
    original = tilted_pld.self_compose
    monkeypatch.setattr(tilted_pld, "self_compose", lambda *a: composed.append(a) or original(*a))
    exp = Exposure(case["steps"], case["sample_rate"])
    estimate = accountants.rdp_epsilon(found.noise_multiplier, exp, "add-remove", case["delta"])
    disc = accountants.pld_discretization(estimate, case["steps"], case["delta"])
    with pytest.raises(accountants.CannotAnswer, match="would need about"):
        accountants.pld_epsilon(found.noise_multiplier, exp, "add-remove", case["delta"], disc)
    assert composed == []  # the old code composed the remove direction, then declined on add


def test_a_flat_secant_does_not_send_the_search_to_the_top_of_the_range():
    """Where pld declines, rdp answers an epsilon that barely moves with z: the secant through two
    such points aimed the old search at z = 1e15 and it spent evaluations coming back."""
    seen = []

    def epsilon(z):  # rdp's slope (d log eps / d log z = -0.006) below z = 0.8, then pld's
        seen.append(z)
        return 0.676 * (0.745 / z) ** 0.006 if z < 0.8 else 0.05 * (0.8 / z) ** 4

    z, e = calibration.smallest_feasible(
        epsilon,
        0.3,
        1e-5,
        lambda z: 1 / z,
        lambda mu: 1 / mu,
        start=0.745,
        first_step=lambda z, e, aim: z * math.exp((math.log(aim) - math.log(e)) / -400.0),
    )
    assert e <= 0.3 and 0.8 <= z < 0.8 * (1 + 2 * calibration.Z_RTOL)
    assert max(seen) <= 0.745 * calibration.MAX_SECANT_STEP**2
    assert math.isfinite(e)


# fuzz row 65 (3.1 s on main, 2026-11-27): rdp 5x above the answer; row 152: add-remove, both
# directions composed on the full grid
ROW_65 = dict(z=0.20414156657663074, k=7801, q=1.1646493821309954e-06, delta=0.0017903125950816748)
ROW_152 = dict(z=0.4865450403135612, k=80352, q=0.00010805348027487288, delta=5.076226245624563e-07)


def _full_compositions(monkeypatch, row, accountant="pld"):
    """(epsilon, number of compositions of a release grid above PLD_SKIP_POINTS points) of one
    cold evaluation at ``row``."""
    accountants.clear_caches()
    sizes, original = [], tilted_pld.self_compose
    monkeypatch.setattr(
        tilted_pld, "self_compose", lambda pmf, *a: sizes.append(len(pmf.probs)) or original(pmf, *a)
    )
    found = privzv.epsilon(
        noise_multiplier=row["z"],
        delta=row["delta"],
        steps=row["k"],
        sample_rate=row["q"],
        threat="eavesdropper",
        neighbors="add-remove",
        accountant=accountant,
    )
    return found.epsilon, sum(n > accountants.PLD_SKIP_POINTS + 2 for n in sizes)


@pytest.mark.parametrize("row, was", [(ROW_65, 4), (ROW_152, 2)])
def test_a_fine_evaluation_composes_one_full_grid(row, was, monkeypatch):
    """The slow corners' fine evaluations: where rdp is far above the answer (row 65), pld built
    both directions' full grids at rdp's step and again at the answer's (4 compositions); where
    the add direction is the smaller (both rows), it was composed on the full grid too. Now the
    probe's estimate chooses the step and a cheaper grid bounds the add direction below the
    remove direction's answer: one full composition. (On the old code: ``was``.)"""
    eps, full = _full_compositions(monkeypatch, row)
    assert full == 1 < was
    k, q, delta = row["k"], row["q"], row["delta"]
    disc = accountants.pld_grid_step(
        row["z"], Exposure(k, q), delta, accountants.pld_discretization(eps, k, delta)
    )
    # the premise of the skip: the add direction composed on the fine grid is below the answer
    assert accountants._direction_epsilon(row["z"], k, q, "add", delta, disc, True) <= eps


@pytest.mark.parametrize("row", [ROW_65, ROW_152])
def test_the_answer_is_the_larger_direction_on_the_fine_grid(row):
    """pld's epsilon at the slow corners equals both directions composed on its fine grid,
    without the shortcuts (the largest of remove and add at the step the answer calls for),
    to 1e-6: skipping the bounded direction changes nothing but the time."""
    accountants.clear_caches()
    k, q, delta, z = row["k"], row["q"], row["delta"], row["z"]
    eps = privzv.epsilon(
        noise_multiplier=z,
        delta=delta,
        steps=k,
        sample_rate=q,
        threat="eavesdropper",
        neighbors="add-remove",
        accountant="pld",
    ).epsilon
    disc = accountants.pld_grid_step(z, Exposure(k, q), delta, accountants.pld_discretization(eps, k, delta))
    both = max(accountants._direction_epsilon(z, k, q, kind, delta, disc, True) for kind in ("remove", "add"))
    assert eps == pytest.approx(both, rel=1e-6)


@pytest.mark.parametrize("eps, delta, q", [(2.0, 1e-6, 1e-4), (5.0, 1e-9, 1e-6), (0.5, 1e-5, 4e-4)])
def test_one_rarely_sampled_release_is_one_sided_against_its_exact_hockey_stick(eps, delta, q):
    """T = 1 at the slow corners' sample rates (the shortcuts: the probe's estimate, the skipped
    add direction, the binary FFT power): the calibrated noise multiplier meets the target by
    the exact delta of the pair (50 digits) and 0.1% less noise does not."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from fuzz_accounting import exact_sampled_delta

    found = privzv.noise_multiplier(
        epsilon=eps, delta=delta, sample_rate=q, steps=1, threat="eavesdropper", neighbors="add-remove"
    )
    assert found.accountant == "pld" and found.epsilon <= eps
    assert exact_sampled_delta(found.epsilon, q, found.noise_multiplier) <= delta
    assert exact_sampled_delta(eps, q, found.noise_multiplier * (1 - 1e-3)) > delta
