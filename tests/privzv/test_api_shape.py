"""One API shape (issue 22 item 1): every entry point answers the same question the same way,
with the same defaults; Opacus's names; float(Result); the accountant registry; one validation
layer (issue 24 item 1)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from contextlib import redirect_stdout

import numpy as np
import pytest

import privzv
from privzv import api, registry
from privzv.cli import main
from privzv.errors import PrivzvError
from privzv.ledger import PrivacyLedger
from privzv.release import Release, Schedule

DELTA = 1e-5


def cli_json(*argv: str) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


GRID = [  # (epsilon, steps, dataset_size, batch_size, threat, neighbors, accountant)
    (1.0, 200, 1437, 32, None, None, None),
    (2.0, 60, 1000, 100, "eavesdropper", "add-remove", "rdp"),
    (0.5, 40, 500, 50, "device", "add-remove", "pld"),
    (4.0, 30, 300, 30, "eavesdropper", None, "gdp-clt"),
]


@pytest.mark.parametrize("eps, t, d, b, threat, neighbors, accountant", GRID)
def test_every_entry_point_gives_the_same_answer(eps, t, d, b, threat, neighbors, accountant):
    given = {
        k: v
        for k, v in dict(threat=threat, neighbors=neighbors, accountant=accountant).items()
        if v is not None
    }
    one = privzv.noise_multiplier(epsilon=eps, delta=DELTA, steps=t, dataset_size=d, batch_size=b, **given)
    release = Release(clip=1.0, batch_size=b, **({"neighbors": neighbors} if neighbors else {}))
    schedule = Schedule(steps=t, dataset_size=d, **({"threat": threat} if threat else {}))
    acc = {"accountant": accountant} if accountant else {}
    cal = privzv.calibrate(epsilon=eps, delta=DELTA, release=release, schedule=schedule, **acc)
    flags = [f"--{k}" if v is True else f"--{k}={v}" for k, v in given.items()]
    cli = cli_json(
        "calibrate",
        f"--epsilon={eps}",
        f"--delta={DELTA}",
        f"--steps={t}",
        f"--dataset-size={d}",
        f"--batch-size={b}",
        *flags,
    )
    z = float(one)
    assert z == one.noise_multiplier == cal.noise_multiplier == cli["noise_multiplier"]
    assert one.accountant == cal.accountant == cli["accountant"]
    assert cli["sigma"] is None  # no --clip: the noise multiplier only
    back = privzv.epsilon(noise_multiplier=z, delta=DELTA, steps=t, dataset_size=d, batch_size=b, **given)
    noised = release.with_noise_multiplier(z)
    acct = privzv.account(release=noised, schedule=schedule, delta=DELTA, **acc)
    cli_acct = cli_json(
        "account",
        f"--noise-multiplier={z!r}",
        f"--delta={DELTA}",
        f"--steps={t}",
        f"--dataset-size={d}",
        f"--batch-size={b}",
        *flags,
    )
    assert float(back) == back.epsilon == acct.epsilon == cli_acct["epsilon"]
    assert back.epsilon == pytest.approx(one.epsilon, rel=1e-12)
    if registry.get(one.requested).rigorous:  # a ledger of the whole schedule agrees
        ledger = PrivacyLedger(release=noised, schedule=schedule, delta=DELTA, epsilon_budget=math.inf, **acc)
        rng = np.random.default_rng(0)
        epochs = [rng.permutation(d) for _ in range(-(-t * b // d) + 1)]
        batches = [p[s : s + b] for p in epochs for s in range(0, d, b)]  # the schedule's walk
        for batch in batches[:t]:
            ledger.record(0, batch)
        assert ledger.epsilon_spent() == pytest.approx(back.epsilon, rel=1e-9)


@pytest.mark.parametrize("given", [1, 2, 4])
def test_the_ledger_refuses_positional_arguments_naming_the_rule(given):
    args = (Release(clip=1.0, batch_size=10, sigma=1.0), Schedule(steps=10, dataset_size=100), DELTA, 10.0)
    keywords = dict(zip(("release", "schedule", "delta", "epsilon_budget"), args))
    with pytest.raises(PrivzvError, match=f"{given} positional argument.*keyword-only"):
        PrivacyLedger(*args[:given], **{k: v for k, v in list(keywords.items())[given:]})
    assert PrivacyLedger(**keywords).epsilon_budget == 10.0  # the keyword form answers


def test_a_ledger_argument_left_out_is_named():
    with pytest.raises(PrivzvError, match="delta=None"):
        PrivacyLedger(
            release=Release(clip=1.0, batch_size=10, sigma=1.0),
            schedule=Schedule(steps=10, dataset_size=100),
            epsilon_budget=1.0,
        )
    with pytest.raises(PrivzvError, match="schedule=None"):
        PrivacyLedger(release=Release(clip=1.0, batch_size=10, sigma=1.0), delta=DELTA, epsilon_budget=1.0)


def test_defaults_are_declared_once_and_used_everywhere():
    assert privzv.DEFAULTS == {"threat": "device", "neighbors": "replace-one", "accountant": "best"}
    ledger = PrivacyLedger(
        release=Release(clip=1.0, batch_size=10, sigma=1.0),
        schedule=Schedule(steps=10, dataset_size=100),
        delta=DELTA,
        epsilon_budget=10.0,
    )
    assert ledger.accountant == "best"  # was pld
    one = privzv.noise_multiplier(epsilon=1.0, delta=DELTA, steps=2000, dataset_size=1437, batch_size=32)
    assert one.threat == "device" and one.neighbors == "replace-one" and one.requested == "best"
    assert float(one) == pytest.approx(25.03, rel=1e-3)  # issue 22: was 3.82 (eavesdropper)
    from privzv import commands

    audit = commands.cliutil.Parser()
    commands.add_release_options(audit, clip_default=10.0)
    assert audit.get_default("accountant") == "best"  # attack audit's was pld


def test_a_sample_rate_under_the_device_threat_is_refused_in_one_line(capsys):
    with pytest.raises(PrivzvError, match='pass threat="eavesdropper"'):
        privzv.noise_multiplier(epsilon=1.0, delta=DELTA, sample_rate=0.01, steps=100)
    assert main(["calibrate", "--epsilon=1", "--delta=1e-5", "--steps=100", "--sample-rate=0.01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "add --threat eavesdropper" in err


def test_opacus_names_epochs_and_conflicting_duplicates():
    base = dict(sample_rate=0.04, threat="eavesdropper", neighbors="add-remove")
    r = privzv.noise_multiplier(target_epsilon=8.0, target_delta=1e-5, epochs=90, **base)
    assert r.compositions == 2250  # ceil(90 / 0.04), 90 / 0.04 = 2249.9999999999995
    same = privzv.noise_multiplier(epsilon=8.0, delta=1e-5, steps=2250, **base)
    assert float(r) == float(same)
    assert (
        privzv.noise_multiplier(
            epsilon=1.0, delta=1e-5, epochs=1.5, **{**base, "sample_rate": 0.3}
        ).compositions
        == 5
    )  # ceil(5.000000000000001)
    for bad, named in (
        (dict(epsilon=1.0, target_epsilon=1.0, delta=1e-5, steps=10), "epsilon and target_epsilon"),
        (dict(epsilon=1.0, delta=1e-5, target_delta=1e-5, steps=10), "delta and target_delta"),
        (dict(epsilon=1.0, delta=1e-5, steps=10, epochs=1), "steps or epochs"),
    ):
        with pytest.raises(PrivzvError, match=named):
            privzv.noise_multiplier(**bad, **base)
    with pytest.raises(TypeError):
        privzv.noise_multiplier(1.0, 1e-5, steps=10, **base)  # keyword-only


def test_results_convert_with_float():
    release, schedule = Release(clip=1.0, batch_size=10), Schedule(steps=10, dataset_size=100)
    cal = privzv.calibrate(epsilon=2.0, delta=DELTA, release=release, schedule=schedule)
    acct = privzv.account(release=release.with_noise_multiplier(float(cal)), schedule=schedule, delta=DELTA)
    assert float(cal) == cal.noise_multiplier and float(acct) == acct.epsilon <= 2.0
    rows = privzv.calibrate_all(target_epsilon=2.0, target_delta=DELTA, release=release, schedule=schedule)
    assert all(float(r) == r.noise_multiplier for r in rows if hasattr(r, "answer"))


def test_cli_version_and_noise_multiplier_without_clip(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"privzv {privzv.__version__}"
    from importlib import metadata

    assert privzv.__version__ == metadata.version("privzv")  # pyproject.toml, one place
    assert (
        main(
            [
                "calibrate",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--steps",
                "100",
                "--dataset-size",
                "1000",
                "--batch-size",
                "10",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "noise multiplier" in text and not any(line.startswith("sigma") for line in text.splitlines())
    assert (
        main(
            [
                "account",
                "--sigma",
                "1",
                "--delta",
                "1e-5",
                "--steps",
                "100",
                "--dataset-size",
                "1000",
                "--batch-size",
                "10",
            ]
        )
        == 2
    )
    assert "--sigma 1: needs --clip" in capsys.readouterr().err


def test_the_api_is_visible_to_dir_and_import_stays_torch_free():
    import subprocess
    import sys

    assert {"noise_multiplier", "epsilon", "calibrate", "account", "register_accountant", "DEFAULTS"} <= set(
        dir(privzv)
    )
    code = (
        "import sys, privzv; privzv.noise_multiplier; "
        "assert 'torch' not in sys.modules and 'dp_accounting' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.fixture
def toy():
    """A toy accountant: epsilon = 1/z, registered in one call."""

    def epsilon(z, q, coarseness):
        return registry.Bound(1.0 / z, "toy")

    def note(bound, q, threat, requested):
        return False, f"toy: {threat}"

    registry.register_accountant(
        registry.Accountant("toy", False, epsilon, note, lambda mu, q: None, summary="1/z")
    )
    yield
    registry.unregister_accountant("toy")


def test_a_registered_accountant_is_a_choice_of_every_entry_point(toy, capsys):
    assert "toy" in privzv.ACCOUNTANTS
    r = privzv.epsilon(
        noise_multiplier=4.0, delta=DELTA, steps=10, dataset_size=100, batch_size=10, accountant="toy"
    )
    assert float(r) == 0.25 and not r.rigorous
    rows = cli_json(
        "account",
        "--noise-multiplier=4",
        "--delta=1e-5",
        "--steps=10",
        "--dataset-size=100",
        "--batch-size=10",
        "--all",
    )["results"]
    assert {(row["threat"], row["accountant"]) for row in rows} >= {
        ("device", "toy"),
        ("eavesdropper", "toy"),
    }
    assert (
        cli_json(
            "account",
            "--noise-multiplier=4",
            "--delta=1e-5",
            "--steps=10",
            "--dataset-size=100",
            "--batch-size=10",
            "--accountant=toy",
        )["epsilon"]
        == 0.25
    )
    with pytest.raises(PrivzvError, match="not a rigorous upper bound"):
        PrivacyLedger(
            release=Release(clip=1.0, batch_size=10, sigma=1.0),
            schedule=Schedule(steps=10, dataset_size=100),
            delta=DELTA,
            epsilon_budget=1.0,
            accountant="toy",
        )
    with pytest.raises(PrivzvError, match="already registered"):
        registry.register_accountant(registry.REGISTRY["toy"])


# ------------------------------------------------------------------ one validation layer
BAD = [
    (
        lambda: privzv.epsilon(noise_multiplier=True, delta=DELTA, steps=10, dataset_size=100, batch_size=10),
        "noise_multiplier=True",
    ),
    (lambda: Release(clip=1.0, batch_size=True), "batch_size=True"),
    (lambda: Schedule(steps=True, dataset_size=10), "steps=True"),
    (lambda: Release(clip=1.0, batch_size=1, dim=0), "dim=0"),
    (lambda: Release(clip=1.0, batch_size=1, sigma="1"), "sigma='1'"),
    (lambda: Release(clip=5e-324, batch_size=10), "clip=5e-324: the sensitivity"),
    (lambda: Release(clip=1.0, batch_size=10, sigma=5e-324), "sigma=5e-324"),
    (lambda: Release(clip=1.0, batch_size=10).with_sigma(1e308), "sigma=1e\\+308"),
    (lambda: Release(clip=10**400, batch_size=1), "beyond the floating-point range"),
    (lambda: Schedule(steps=10**70, dataset_size=1), "above the cap"),
    (lambda: Schedule(steps=4, dataset_size=10, devices=10**9), "devices=1000000000: above"),
    (lambda: Schedule(steps=4, dataset_size=10, devices=2, device_steps=4), "device_steps=4"),
    (lambda: Schedule(steps=4, dataset_size=10, devices=2, device_steps=["2", "2"]), "device_steps='2'"),
    (
        lambda: privzv.account(release=None, schedule=Schedule(steps=1, dataset_size=1), delta=DELTA),
        "release=None",
    ),
    (
        lambda: privzv.calibrate(
            epsilon=1.0, delta=DELTA, release=Release(clip=1.0, batch_size=1), schedule={"steps": 1}
        ),
        "schedule=",
    ),
    (lambda: privzv.to_dp_event(None, None), "release=None"),
    (
        lambda: PrivacyLedger(
            release=Release(clip=1.0, batch_size=10, sigma=1.0),
            schedule=Schedule(steps=10, dataset_size=10**12),
            delta=DELTA,
            epsilon_budget=1.0,
        ),
        "above the cap",
    ),
    (
        lambda: PrivacyLedger(
            release=Release(clip=1.0, batch_size=10, sigma=1.0),
            schedule=Schedule(steps=10, dataset_size=100, devices=2),
            delta=DELTA,
            epsilon_budget=1.0,
        ).record(True, [1]),
        "device=True",
    ),
    (
        lambda: api.describe(steps=10**12, dataset_size=100, batch_size=10, head_clip=1.0, head_window=4),
        "above the cap",
    ),
]


@pytest.mark.parametrize("call, named", BAD, ids=[n for _, n in BAD])
def test_bad_values_are_one_privzv_error_naming_them(call, named):
    with pytest.raises(PrivzvError, match=named):
        call()


def test_numpy_scalars_are_numbers():
    r = privzv.noise_multiplier(
        epsilon=np.float32(1.0),
        delta=np.float64(1e-5),
        steps=np.int64(100),
        dataset_size=np.int32(1000),
        batch_size=np.int64(10),
        devices=np.int8(2),
    )
    plain = privzv.noise_multiplier(
        epsilon=1.0, delta=1e-5, steps=100, dataset_size=1000, batch_size=10, devices=2
    )
    assert float(r) == float(plain)
    schedule = Schedule(
        steps=np.int64(4), dataset_size=np.int64(10), devices=2, device_steps=[np.int64(3), np.int64(1)]
    )
    assert type(schedule.steps) is int and schedule.device_steps == (3, 1)
    assert dataclasses.replace(schedule).devices == 2


def test_cli_names_the_given_value_not_a_derived_inf_or_zero(capsys):
    base = ["--delta", "1e-5", "--steps", "100", "--dataset-size", "1000", "--batch-size", "10"]
    assert main(["account", "--sigma", "1e308", "--clip", "1", *base]) == 2
    err = capsys.readouterr().err
    assert "sigma=1e+308" in err and "sigma=inf" not in err
    assert main(["calibrate", "--epsilon", "1", "--clip", "5e-324", *base]) == 2
    assert "clip=5e-324: the sensitivity" in capsys.readouterr().err  # not sigma 0
