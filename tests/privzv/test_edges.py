"""Issue 9: no crash, hang, NaN or Infinity anywhere in the documented ranges (epsilon up to 1e4,
delta down to 1e-300, T up to 1e8, sigma down to 1e-12); fallbacks name the accountant."""

import json

import numpy as np
import pytest

import privzv
from privzv import accountants, gdp
from privzv.accounting import account, calibrate
from privzv.cli import main
from privzv.release import Release, Schedule
from privzv.threats import Exposure

SIZES = ["--dataset-size", "60000", "--batch-size", "256", "--clip", "1"]


def _strict(text):
    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "argv",
    [
        # issue 9's crashes: OverflowError in the secant, in clt_noise_multiplier, numpy
        # ArrayMemoryError, RuntimeWarnings leaking from convert
        [
            "calibrate",
            "--epsilon",
            "1e4",
            "--delta",
            "1e-5",
            "--steps",
            "1000",
            "--threat",
            "eavesdropper",
            "--neighbors",
            "add-remove",
            "--accountant",
            "rdp",
        ],
        ["account", "--sigma", "1e-12", "--delta", "1e-5", "--steps", "1", "--threat", "eavesdropper"],
        [
            "account",
            "--sigma",
            "0.01",
            "--delta",
            "1e-300",
            "--steps",
            "1000",
            "--threat",
            "eavesdropper",
            "--neighbors",
            "add-remove",
        ],
        ["calibrate", "--epsilon", "1e4", "--delta", "1e-300", "--steps", "100000000"],
        ["calibrate", "--epsilon", "1e-9", "--delta", "1e-5", "--steps", "1000"],
        ["account", "--sigma", "1e-12", "--delta", "1e-300", "--steps", "100000000", "--accountant", "seed"],
        ["convert", "--epsilon", "1e308", "--delta", "1e-5"],
    ],
)
def test_edge_inputs_give_strict_json_or_a_one_line_error(capsys, argv):
    extra = SIZES if argv[0] != "convert" else []
    code = main([*argv, *extra, "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 2) and "Traceback" not in err
    if code == 0:
        obj = _strict(out)
        assert all(np.isfinite(v) for v in obj.values() if isinstance(v, float))
    else:
        assert out == "" and err.count("\n") == 1


def test_convert_refuses_an_epsilon_beyond_the_float_range(capsys):
    assert main(["convert", "--mu", "1e300", "--delta", "1e-5", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "epsilon exceeds the floating-point range" in err
    assert gdp.mu_from_epsilon(1e308, 1e-5) == pytest.approx(2**0.5 * 1e154, rel=1e-12)


def test_pld_declines_below_its_reliable_delta_and_rdp_answers_saying_so():
    """Below delta 1e-12 (where pld was not measured; dp-accounting's plain FFT composition was
    erratic at 1e-13 and 1e-14) pld hands over to rdp and the answer says so."""
    release = Release(clip=1.0, batch_size=256, neighbors="add-remove", sigma=0.01)
    schedule = Schedule(steps=1000, dataset_size=60000, threat="eavesdropper")
    r = account(release, schedule, 1e-300, "pld")
    assert r.accountant == "rdp" and r.requested == "pld" and r.rigorous
    assert "below 1e-12" in r.fallback and "rdp answered" in r.fallback
    assert 0 < r.epsilon < 20 and "fallback" in r.note
    exp = Exposure(1000, 256 / 60000)
    with pytest.raises(accountants.CannotAnswer, match="below"):
        accountants.pld_epsilon(2.0, exp, "add-remove", 1e-13, 1e-4)
    # near the limit pld answers only where its round-off guard allows (next test), and
    # monotonically in sigma
    near_limit = [
        accountants.pld_epsilon(z, exp, "add-remove", 1e-10, 1e-4) for z in np.linspace(1.5, 3.0, 4)
    ]
    assert np.all(np.diff(near_limit) < 0)


def test_pld_at_delta_1e_12_is_smooth_in_sigma_and_converges_in_the_grid():
    """At delta 1e-12 and z = 0.642 (T = 1000) dp-accounting's plain FFT composition had a
    round-off of ~2e-12 (its epsilon moved by 0.8% between discretisations); the tilted
    composition reads the same epsilon at grids 2x apart within 0.05%, decreasing in sigma, and
    below rdp's bound."""
    exp = Exposure(1000, 256 / 60000)
    coarse, fine = (accountants.pld_epsilon(0.6421, exp, "add-remove", 1e-12, d) for d in (8e-4, 4e-4))
    assert fine <= coarse * (1 + 1e-9) and coarse == pytest.approx(fine, rel=5e-4)
    assert fine < accountants.rdp_epsilon(0.6421, exp, "add-remove", 1e-12)
    curve = [accountants.pld_epsilon(z, exp, "add-remove", 1e-12, 8e-4) for z in np.linspace(0.6, 0.7, 6)]
    assert np.all(np.diff(curve) < 0)


def test_an_unusable_pld_grid_hands_over_to_rdp():
    release = Release(clip=1.0, batch_size=256, neighbors="add-remove", sigma=1e-12)
    schedule = Schedule(steps=1, dataset_size=60000, threat="eavesdropper")
    r = account(release, schedule, 1e-5, "best")
    assert r.rigorous and np.isfinite(r.epsilon) and "points" in r.fallback


def test_best_is_the_smaller_of_pld_and_rdp_and_names_it():
    release = Release(clip=1.0, batch_size=256, sigma=0.02)
    for steps in (50, 2000):
        schedule = Schedule(steps=steps, dataset_size=60000, threat="eavesdropper")
        pld, rdp = (account(release, schedule, 1e-5, a) for a in ("pld", "rdp"))
        best = account(release, schedule, 1e-5, "best")
        assert best.epsilon == min(pld.epsilon, rdp.epsilon)
        assert best.accountant == (pld.accountant if pld.epsilon < rdp.epsilon else "rdp")
        assert best.requested == "best" and "best" in best.note
        if pld.accountant != "pld":  # epsilon 0.04: the PLD grid at 1e-4 epsilon is too fine
            assert "points" in best.fallback and steps == 50
    assert best.accountant == "pld"  # 2000 steps: pld is tighter than rdp


def test_calibration_at_tiny_epsilon_under_rdp_is_one_sided():
    """dp-accounting's RDP conversion drops to 0 once the RDP is below delta^2 (issue 9: the
    secant overflowed on that jump); the calibration brackets it instead."""
    release = Release(clip=1.0, batch_size=256, neighbors="add-remove")
    schedule = Schedule(steps=100, dataset_size=60000, threat="eavesdropper")
    r = calibrate(1e-3, 1e-5, release, schedule, "rdp")
    assert r.epsilon <= 1e-3 and np.isfinite(r.noise_multiplier)


def test_one_call_api_matches_the_dataclass_route():
    release = Release(clip=1.0, batch_size=256, neighbors="add-remove")
    schedule = Schedule(steps=300, dataset_size=60000, threat="eavesdropper")
    via = calibrate(1.0, 1e-5, release, schedule, "rdp")
    one = privzv.noise_multiplier(
        epsilon=1.0,
        delta=1e-5,
        sample_rate=256 / 60000,
        steps=300,
        accountant="rdp",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert one.noise_multiplier == pytest.approx(via.noise_multiplier, rel=1e-12)
    full = privzv.noise_multiplier(
        epsilon=1.0,
        delta=1e-5,
        dataset_size=60000,
        batch_size=256,
        steps=300,
        accountant="rdp",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert full.noise_multiplier == pytest.approx(via.noise_multiplier, rel=1e-12)
    back = privzv.epsilon(
        noise_multiplier=one.noise_multiplier,
        delta=1e-5,
        sample_rate=256 / 60000,
        steps=300,
        accountant="rdp",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert back.epsilon == pytest.approx(one.epsilon, rel=1e-12)
    device = privzv.epsilon(
        noise_multiplier=5.0,
        delta=1e-5,
        dataset_size=1000,
        batch_size=100,
        steps=40,
        threat="device",
        devices=2,
        device_steps=(30, 10),
        neighbors="add-remove",
    )
    assert device.compositions == 3 + 1 and device.sampling_rate is None


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(sample_rate=0.1, dataset_size=10, batch_size=1), "sample_rate with dataset_size"),
        (dict(sample_rate=0.1, threat="device"), "threat='device'"),
        (dict(sample_rate=1.5, threat="eavesdropper"), "sample_rate=1.5"),
        (dict(), "give sample_rate"),
    ],
)
def test_one_call_api_refuses_unclear_descriptions(kwargs, named):
    with pytest.raises(privzv.PrivzvError, match=named):
        privzv.noise_multiplier(epsilon=1.0, delta=1e-5, steps=10, **kwargs)


def test_doctests_of_the_one_call_api():
    import doctest

    from privzv import api

    assert doctest.testmod(api).failed == 0


def test_the_pld_grid_is_fine_enough_for_a_large_saddle_point():
    """The pessimistic rounding moves epsilon by about t k Delta^2 / 12 (t the saddle point,
    here about 370): the grid chosen from (epsilon, k, delta) reads within 0.02% of the grid
    half as coarse, where sqrt(r epsilon / k), the rule that ignores t, is 0.1% off."""
    exp = Exposure(10_000, 256 / 60000)
    z, delta = 19.64, 1e-8
    chosen = accountants.pld_discretization(0.1, exp.compositions, delta)
    ignoring_t = (accountants.PLD_RELATIVE_DISCRETIZATION * 0.1 / exp.compositions) ** 0.5
    assert chosen < ignoring_t / 2
    at = {
        d: accountants.pld_epsilon(z, exp, "add-remove", delta, d) for d in (ignoring_t, chosen, chosen / 2)
    }
    assert 0.09 < at[chosen / 2] < 0.11
    assert at[chosen] == pytest.approx(at[chosen / 2], rel=2e-4)
    assert at[ignoring_t] > at[chosen / 2] * (1 + 5e-4)


def test_a_secant_through_epsilons_with_equal_logs_bisects_instead_of_dividing_by_zero():
    """Two epsilons an ulp apart can have equal logarithms (a ZeroDivisionError in the secant,
    found by fuzzing at q <= 1.4e-6 and tiny delta)."""
    from privzv import calibration

    e = 4.2187490100110985
    assert np.isnan(calibration._secant((1.0, e), (1.1, np.nextafter(e, 10.0)), 4.0))
    r = privzv.noise_multiplier(
        epsilon=e,
        delta=2.885931350998402e-264,
        sample_rate=1e-8,
        steps=8,
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert r.rigorous and r.epsilon <= e


@pytest.mark.parametrize("neighbors", ["add-remove", "replace-one"])
def test_at_a_delta_above_the_chance_of_ever_being_sampled_any_noise_gives_epsilon_0(neighbors):
    """1 - (1-q)^k is the chance that the record is in any release; the runs on neighbouring
    datasets, coupled through the same sampling and noise, differ only then, so (0, that)-DP
    holds at any noise. It is the exact limit for one release at tiny noise: the remove pair's
    total variation is q (2 Phi(a/2) - 1) -> q, so just below it epsilon is large."""
    q, k = 3e-4, 68
    chance = -np.expm1(k * np.log1p(-q))
    r = privzv.noise_multiplier(
        epsilon=303.73,
        delta=chance * 1.0001,
        sample_rate=q,
        steps=k,
        neighbors=neighbors,
        threat="eavesdropper",
    )
    assert r.epsilon == 0.0 and r.accountant == "sampling" and r.noise_multiplier == 1e-4
    assert "sampled at all" in r.note
    below = privzv.epsilon(
        noise_multiplier=1e-3,
        delta=chance * 0.9,
        sample_rate=q,
        steps=k,
        neighbors=neighbors,
        threat="eavesdropper",
    )
    assert below.epsilon > 10 and below.accountant != "sampling"
    one = gdp.delta_from_epsilon(0.0, 1.0 / 1e-3) * q  # remove pair at z = 1e-3, k = 1
    assert q * 0.999 < one <= q


def test_pld_answers_small_epsilons_after_few_releases_instead_of_handing_over_to_rdp():
    """A release's grid was sized from the unsampled span, about 7x too wide at q = 0.04, so pld
    declined and rdp answered 88% above the tight noise multiplier (fuzzing; the exact check
    is in test_pld_tightness.py)."""
    r = privzv.noise_multiplier(
        epsilon=0.021813277366518165,
        delta=0.001639155863730288,
        sample_rate=0.040523513932264284,
        steps=1,
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert r.accountant == "pld" and r.fallback is None
    assert r.noise_multiplier < 2.3746 * 1.001  # tight: 2.3745347 (50-digit hockey stick)


def test_a_delta_one_ulp_below_the_chance_of_being_sampled_is_not_epsilon_0():
    """-expm1(k log1p(-q)) came out one ulp below 1 - (1-q)^k (q = 0.23, k = 1: 0.22999999999999998
    where the exact chance is 0.23 + 1e-18), and that delta got epsilon 0 at noise 1e-4, where
    the true epsilon is huge."""
    r = privzv.epsilon(
        noise_multiplier=1e-4,
        delta=0.22999999999999998,
        sample_rate=0.23,
        steps=1,
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert r.accountant != "sampling" and r.epsilon > 1.0


@pytest.mark.parametrize("accountant", ["best", "pld", "rdp", "gdp-clt"])
@pytest.mark.parametrize("z", [1e160, 1e300])
def test_a_noise_multiplier_near_the_float_maximum_answers_without_error_or_warning(accountant, z):
    """gdp-clt raised ValueError (log of e^{1/z^2} - 1 = 0: 1/z^2 underflows), pld warned of
    overflow (its release grid's step was subnormal) and then divided by zero: any noise is a
    valid input, and this much leaks nothing a float can show (epsilon 0 at delta 1e-12)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for steps, how in (
            (1, dict(threat="eavesdropper", sample_rate=1e-9)),
            (10**9, dict(threat="eavesdropper", sample_rate=1e-9)),
            (100, dict(threat="device", dataset_size=1000, batch_size=10)),
        ):
            r = privzv.epsilon(noise_multiplier=z, delta=1e-12, steps=steps, accountant=accountant, **how)
            assert r.epsilon == 0.0
    assert accountants.clt_mu(1e300, Exposure(4, 1e-3)) == pytest.approx(1e-3 * 2 / 1e300)


@pytest.mark.parametrize("rate", [1e-300, 1e-6])
@pytest.mark.parametrize("accountant", ["best", "pld", "rdp"])
def test_a_target_epsilon_of_1e_300_is_refused_in_one_line(accountant, rate):
    """The CLT model's inverse (the calibration's first guess) divided by zero (log(1 + x) = 0 for
    x = mu^2 / (q^2 k) below e^-745) or took log(0): ZeroDivisionError / ValueError, not
    PrivzvError. Now it answers in log space and the target is refused as unreachable."""
    with pytest.raises(privzv.PrivzvError, match="epsilon 1e-300: unreachable"):
        privzv.noise_multiplier(
            target_epsilon=1e-300,
            target_delta=1e-300,
            steps=1,
            accountant=accountant,
            threat="eavesdropper",
            sample_rate=rate,
        )
    model = Exposure(4, 1e-6)
    z = accountants.clt_noise_multiplier(1e-300, model)
    assert accountants.clt_mu(z, model) == pytest.approx(1e-300, rel=1e-9)
    assert (
        accountants.clt_noise_multiplier(0.0, model)
        == accountants.clt_noise_multiplier(1e-320, Exposure(4, None))
        == np.inf
    )
