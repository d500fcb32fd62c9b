"""Published values of other DP libraries, run through privzv (each case names its source).

Conventions: these libraries' noise multiplier is noise std / clipping norm of the summed
gradients under add-remove neighbours; privzv's one-call API (:mod:`privzv.api`) uses the same
for ``sample_rate=`` with the default ``neighbors="add-remove"``. RDP values from Opacus and
TF-Privacy use the classic RDP-to-DP conversion (Mironov 2017, Prop. 3); privzv's rdp uses
dp-accounting's, which is never larger (Canonne, Kamath & Steinke 2020, Prop. 12), so privzv's
rdp must be at most the published value and close to it; pld is tighter still.
"""

import math

import pytest

import privzv

# (source, noise multiplier, sample rate, steps, delta, published epsilon)
RDP_CASES = [
    # Opacus, opacus/tests/accountants_test.py::test_rdp_accountant (RDPAccountant)
    ("opacus test_rdp_accountant", 1.5, 0.04, int(90 / 0.04), 1e-5, 7.32911117143),
    # TF-Privacy, tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py, Test0 and
    # Test1 (n, batch, z, epochs, delta): steps = ceil(epochs n / batch), q = batch / n
    ("tf-privacy Test0", 1.3, 150 / 60000, math.ceil(15 * 60000 / 150), 1e-5, 0.7242234026109595),
    ("tf-privacy Test1", 1.0, 100 / 100000, math.ceil(30 * 100000 / 100), 1e-7, 1.4154988495444845),
]


@pytest.mark.parametrize("source, z, q, steps, delta, published", RDP_CASES, ids=[c[0] for c in RDP_CASES])
def test_rdp_peer_values(source, z, q, steps, delta, published):
    rdp = privzv.epsilon(
        noise_multiplier=z,
        delta=delta,
        sample_rate=q,
        steps=steps,
        accountant="rdp",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert rdp.accountant == "rdp"
    # the RDP order grids differ (dp-accounting's default orders against theirs): 0.1% slack
    assert 0.9 * published <= rdp.epsilon <= published * (1 + 1e-3)
    best = privzv.epsilon(
        noise_multiplier=z,
        delta=delta,
        sample_rate=q,
        steps=steps,
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert best.epsilon <= rdp.epsilon and best.rigorous


def test_tf_privacy_huge_dataset_case_is_answered_by_pld_far_below_rdp():
    """TF-Privacy Test2: n = 1e8, batch 1024, z = 0.1, 10 epochs, delta 1e-7: eps 5907982.31
    (RDP, optimal order 1.25; the classic conversion). dp-accounting's RDP gives about 7.8e3;
    issue 9 measured 4.89e7 from the old pld. best must be at most both, and agree with
    dp-accounting's own pessimistic PLD composed directly (discretisation 1e-2): about 1.2e3
    (privzv: 1.22e3, allowing for round-off)."""
    import dp_accounting  # noqa: F401 - the PLD below
    from dp_accounting.pld import privacy_loss_distribution as pld

    n, batch, delta = 100_000_000, 1024, 1e-7
    q, k = batch / n, math.ceil(10 * n / batch)
    r = privzv.epsilon(
        noise_multiplier=0.1,
        delta=delta,
        sample_rate=q,
        steps=k,
        threat="eavesdropper",
        neighbors="add-remove",
    )
    rdp = privzv.epsilon(
        noise_multiplier=0.1,
        delta=delta,
        sample_rate=q,
        steps=k,
        accountant="rdp",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert r.accountant == "pld" and r.rigorous and r.fallback is None
    assert r.epsilon <= rdp.epsilon <= 5907982.31138195
    single = pld.from_gaussian_mechanism(
        0.1,
        value_discretization_interval=1e-2,
        sampling_prob=q,
        log_mass_truncation_bound=math.log(delta) - 10,
    )
    direct = pld.PrivacyLossDistribution(
        single._pmf_remove.to_dense_pmf().self_compose(k, 1e-16),
        single._pmf_add.to_dense_pmf().self_compose(k, 1e-16),
    ).get_epsilon_for_delta(delta)
    # privzv allows for the FFT round-off of its composition (accountants.pld_epsilon), which
    # here costs about 2%; dp-accounting's direct reading does not
    assert direct * (1 - 1e-3) <= r.epsilon <= direct * 1.03 and r.epsilon < rdp.epsilon / 5


def test_opacus_gdp_accountant_bracket():
    """Opacus test_gdp_accountant: GaussianAccountant (Bu et al. 2020's CLT) gives 6.59 < eps
    < 6.6 for z = 1.5, q = 0.04, 2250 steps, delta 1e-5; privzv's gdp-clt is the same formula."""
    r = privzv.epsilon(
        noise_multiplier=1.5,
        delta=1e-5,
        sample_rate=0.04,
        steps=int(90 // 0.04),
        accountant="gdp-clt",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert 6.59 < r.epsilon < 6.6 and not r.rigorous


def test_opacus_get_noise_multiplier():
    """Opacus test_get_noise_multiplier: get_noise_multiplier(target_epsilon=8, target_delta=1e-5,
    sample_rate=0.04, epochs=90) = 1.425307617 (RDP, epsilon tolerance 0.01). privzv's rdp
    calibration is one-sided with a tighter conversion, so at most that and close to it."""
    r = privzv.noise_multiplier(
        epsilon=8.0,
        delta=1e-5,
        sample_rate=0.04,
        steps=int(90 / 0.04),
        accountant="rdp",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert r.epsilon <= 8.0
    assert 0.95 * 1.425307617 <= r.noise_multiplier <= 1.425307617
    assert (
        privzv.noise_multiplier(
            epsilon=8.0,
            delta=1e-5,
            sample_rate=0.04,
            steps=2250,
            threat="eavesdropper",
            neighbors="add-remove",
        ).noise_multiplier
        <= r.noise_multiplier
    )


def test_dp_accounting_pld_test_cases():
    """dp-accounting pld/pld_privacy_accountant_test.py: test_gaussian_basic (three Gaussians
    with z = sqrt(3): (1, 0.126936)) and test_poisson_subsampled_gaussian (three releases,
    q = 0.2, z = 0.5: (1, 0.15594)), both to within 1e-3 in epsilon."""
    r = privzv.epsilon(
        noise_multiplier=math.sqrt(3),
        delta=0.126936,
        sample_rate=1.0,
        steps=3,
        accountant="pld",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert r.epsilon == pytest.approx(1.0, abs=1e-3)
    r = privzv.epsilon(
        noise_multiplier=0.5,
        delta=0.15594,
        sample_rate=0.2,
        steps=3,
        accountant="pld",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert r.epsilon == pytest.approx(1.0, abs=1e-3)


def test_dp_accounting_rdp_gaussian_case():
    """dp-accounting rdp/rdp_privacy_accountant_test.py::test_compute_epsilon_delta_gaussian:
    one Gaussian with z = 4.530877117 is exactly (1, 1e-6)-DP by RDP over orders 1..100 in
    steps of 0.001. privzv's rdp uses dp-accounting's default orders (coarser, so >= 1); the
    exact Gaussian curve (pld, unsampled) is below."""
    rdp = privzv.epsilon(
        noise_multiplier=4.530877117,
        delta=1e-6,
        sample_rate=1.0,
        steps=1,
        accountant="rdp",
        threat="eavesdropper",
        neighbors="add-remove",
    )
    assert rdp.epsilon == pytest.approx(1.0, rel=5e-3) and rdp.epsilon >= 1.0 - 1e-9
    assert (
        privzv.epsilon(
            noise_multiplier=4.530877117,
            delta=1e-6,
            sample_rate=1.0,
            steps=1,
            threat="eavesdropper",
            neighbors="add-remove",
        ).epsilon
        < 1.0
    )
