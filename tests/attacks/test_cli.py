import json

import pytest

from privzv.cli import main

AUDIT = [
    "attack",
    "audit",
    "--delta",
    "1e-3",
    "--steps",
    "937",
    "--dataset-size",
    "6000",
    "--batch-size",
    "64",
    "--trials",
    "5000",
    "--json",
]


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("noise", [["--noise", "scalar"], ["--noise", "vector", "--dim", "4"]])
def test_audit_json_lower_below_upper(capsys, noise):
    code, out, _ = run(capsys, AUDIT + ["--epsilon", "2"] + noise)
    assert code == 0
    o = json.loads(out)
    assert o["releases_per_record"] == 10 and o["upper"]["accountant"] == "pld"
    assert 0 < o["lower"]["eps_lb"] < o["upper"]["epsilon"] <= 2 + 1e-6 and not o["refuted"]


def test_audit_human_output_with_sigma_and_seed_accountant(capsys):
    code, out, _ = run(capsys, AUDIT[:-1] + ["--sigma", "0.02", "--accountant", "seed"])
    assert code == 0
    (upper,) = [x for x in out.splitlines() if x.startswith("upper bound (seed")]
    assert "lower bound" in out and upper.endswith("NOT RIGOROUS")
    assert "upper bound (pld, same sigma)" in out


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--epsilon", "1", "--threat", "secret-subsampling"], "needs super_batch"),
        (["--epsilon", "1", "--noise", "matrix"], "--noise 'matrix'"),
        (["--epsilon", "-1"], "--epsilon '-1'"),
        (["--epsilon", "1", "--sigma", "1"], "not allowed with"),
    ],
)
def test_audit_bad_input_one_line_exit_2(capsys, extra, needle):
    code, out, err = run(capsys, AUDIT + extra)
    assert code == 2 and out == "" and needle in err and err.count("\n") == 1


def test_run_unknown_attack_and_missing_run(capsys, tmp_path):
    code, _, err = run(capsys, ["attack", "run", "--attack", "nope", "--run", str(tmp_path)])
    assert code == 2 and "--attack 'nope'" in err and "direct-label" in err
    missing = tmp_path / "missing"
    code, _, err = run(capsys, ["attack", "run", "--attack", "direct-label", "--run", str(missing)])
    assert code == 2 and "no such run folder" in err


def test_study_bad_input(capsys, tmp_path):
    code, _, err = run(capsys, ["attack", "study", "--dataset", "cifar", "--out", str(tmp_path)])
    assert code == 2 and "--dataset 'cifar'" in err
    (tmp_path / "x").write_text("taken")
    code, _, err = run(capsys, ["attack", "study", "--out", str(tmp_path), "--seeds", "1"])
    assert code == 2 and "not empty" in err
    # the study trains: only rigorous accountants (issue 19)
    code, _, err = run(capsys, ["attack", "study", "--out", str(tmp_path / "new"), "--accountant", "seed"])
    assert code == 2 and "--accountant 'seed': allowed are best, pld, rdp" in err


def test_no_subcommand(capsys):
    assert run(capsys, ["attack"])[0] == 2


def test_canary_audit_bad_input(capsys):
    code, _, err = run(capsys, ["attack", "canary-audit", "--canaries", "1"])
    assert code == 2 and "--canaries '1'" in err
    code, _, err = run(capsys, ["attack", "canary-audit", "--method", "sgd"])
    assert code == 2 and "--method 'sgd'" in err


# ---- attacks as registered objects, their output and their refusals (issue 22)
import dataclasses  # noqa: E402

import numpy as np  # noqa: E402

from privzv.attacks import registry  # noqa: E402
from privzv.attacks.registry import Attack  # noqa: E402
from privzv.errors import PrivzvError  # noqa: E402
from privzv.training import run_folder  # noqa: E402


def _run_folder(tmp_path, **config):
    """A run folder holding only a public config.json (enough for attacks that read no transcript)."""
    cfg = {
        "dataset": "digits",
        "devices": 2,
        "seed": 0,
        "method": "dpzv",
        "server_kind": "mlp",
        "threat": "device",
        **config,
    }
    (tmp_path / "config.json").write_text(
        json.dumps({"format": run_folder.FORMAT, "config": cfg, "sigma": 0.0})
    )
    return tmp_path


@pytest.fixture
def toy(monkeypatch):
    """A toy attack, registered for one test: always guesses the label 0."""

    def score(ctx):
        from privzv.attacks import metrics

        y = ctx.dataset.y_train.numpy()
        return metrics.classification_metrics(y, np.zeros_like(y)), 0

    attack = Attack(
        "toy-guess-zero", "always guesses label 0", "device", "nothing", "majority class", "accuracy", score
    )
    monkeypatch.setitem(registry.ATTACKS, attack.name, attack)
    return attack


def test_a_registered_attack_is_in_the_cli_and_runs(toy, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["attack", "run", "--help"])
    assert (
        "toy-guess-zero: always guesses label 0 [device; baseline: majority class]" in capsys.readouterr().out
    )
    code, out, _ = run(
        capsys, ["attack", "run", "--attack", "toy-guess-zero", "--run", str(_run_folder(tmp_path)), "--json"]
    )
    o = json.loads(out)
    assert code == 0 and o["party"] == "device0" and o["verdict"]["baseline_name"] == "majority class"
    # label 0 is not the majority class: below the baseline, never "leaks"
    assert o["verdict"]["gain"] < 0 and not o["verdict"]["leaks"]
    assert o["verdict"]["line"].startswith("no leak detected at this sample size")


def test_attack_run_table_names_baseline_interval_and_verdict(toy, tmp_path, capsys):
    code, out, _ = run(
        capsys, ["attack", "run", "--attack", "toy-guess-zero", "--run", str(_run_folder(tmp_path))]
    )
    lines = out.splitlines()
    assert code == 0 and lines[0] == "toy-guess-zero: always guesses label 0"
    header = next(x for x in lines if x.startswith("metric"))
    assert "baseline (majority class)" in header and "95% CI of the gain" in header
    assert "interval: Clopper-Pearson over records" in lines
    assert lines[-1].startswith("verdict: no leak detected at this sample size")


def test_a_name_taken_twice_or_a_bad_party_is_refused(toy):
    with pytest.raises(PrivzvError, match="already registered"):
        registry.register(toy)
    with pytest.raises(PrivzvError, match="party 'admin'"):
        dataclasses.replace(toy, party="admin")


@pytest.mark.parametrize(
    "name,config,needle",
    [
        ("direct-label", {"server_kind": "mlp"}, "server_kind sum; this run's is 'mlp'"),
        ("direct-label-summed", {"server_kind": "mlp"}, "summing server"),
        (
            "feature-device",
            {"server_kind": "sum", "threat": "eavesdropper"},
            "device0's sent messages, which 'eavesdropper' runs keep in their private area",
        ),
        (
            "direct-label-eavesdropper",
            {"server_kind": "sum", "threat": "eavesdropper"},
            "server's received messages",
        ),
        ("model-completion-active", {"method": "zoo-vfl"}, "method dpzv, vafl, fo-vector"),
        ("membership", {}, "needs the run's trained models"),
        ("cosine-scoring", {"server_kind": "sum"}, "needs a binary task"),
    ],
)
def test_an_attack_that_does_not_apply_is_refused_in_one_line(tmp_path, capsys, name, config, needle):
    """Before issue 22, direct-label behind an MLP head printed "advantage -0.56"."""
    code, out, err = run(
        capsys, ["attack", "run", "--attack", name, "--run", str(_run_folder(tmp_path, **config))]
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_verdict_leaks_only_when_the_interval_clears_the_baseline():
    from privzv.attacks import metrics, verdict

    y = np.repeat([0, 1], 500)
    strong = verdict.judge("accuracy", metrics.classification_metrics(y, y), "majority class")
    assert strong.leaks and strong.low == pytest.approx(metrics.accuracy_interval(1000, 1000)[0] - 0.5)
    few = np.repeat([0, 1], 10)
    guess = np.where(np.arange(20) < 13, few, 1 - few)  # 13 of 20 right: not enough to say
    weak = verdict.judge("accuracy", metrics.classification_metrics(few, guess), "majority class")
    assert weak.gain == pytest.approx(0.15) and not weak.leaks and weak.low < 0
    t = np.random.default_rng(0).normal(size=(300, 2))
    mse = verdict.judge("mse", metrics.regression_metrics(t, t * 0.9), "mean guess")
    assert mse.leaks and mse.value < mse.baseline and mse.gain > 0


def test_audit_says_not_refuted_with_both_bounds_and_refuted_when_false(capsys):
    code, out, _ = run(capsys, AUDIT[:-1] + ["--epsilon", "2"])
    (line,) = [x for x in out.splitlines() if x.startswith("verdict:")]
    assert code == 0 and line.startswith("verdict: not refuted: eps lower bound ")
    assert "<= claimed 2" in line
    code, out, _ = run(capsys, AUDIT + ["--epsilon", "1", "--accountant", "seed"])
    o = json.loads(out)
    assert o["refuted"] and o["verdict"].startswith("refuted: ")


def test_audit_of_a_run_folder_reads_its_public_claim(tmp_path, capsys):
    from privzv.training.config import TrainConfig
    from privzv.training.run import train

    cfg = TrainConfig(
        dataset="digits",
        method="dpzv",
        epsilon=2.0,
        server_kind="sum",
        embed_dim=10,
        epochs=0.2,
        batch_size=32,
        evals=1,
        seed=0,
        devices=2,
    )
    train(cfg, tmp_path / "run", secret_seed=1)
    code, out, _ = run(
        capsys, ["attack", "audit", "--run", str(tmp_path / "run"), "--trials", "2000", "--json"]
    )
    o = json.loads(out)
    assert code == 0 and o["target_epsilon"] == 2.0 and o["threat"] == "device"
    assert o["upper"]["epsilon"] == pytest.approx(2.0, rel=1e-3) and not o["refuted"]
    assert o["verdict"].startswith("not refuted")
    code, _, err = run(capsys, ["attack", "audit", "--run", str(tmp_path / "run"), "--delta", "0.1"])
    assert code == 2 and "--delta: not allowed with --run" in err


def test_the_docs_list_is_the_registry():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "attacks.md").read_text()
    start, end = "<!-- attacks:registry -->\n", "\n<!-- /attacks:registry -->"
    assert text[text.index(start) + len(start) : text.index(end)] == registry.markdown()
