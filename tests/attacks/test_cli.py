import json

import pytest

from privzv.cli import main

AUDIT = ["attack", "audit", "--delta", "1e-3", "--steps", "937", "--dataset-size", "6000",
         "--batch-size", "64", "--trials", "5000", "--json"]


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


@pytest.mark.parametrize("extra,needle", [
    (["--epsilon", "1", "--threat", "secret-subsampling"], "needs super_batch"),
    (["--epsilon", "1", "--noise", "matrix"], "--noise 'matrix'"),
    (["--epsilon", "-1"], "--epsilon '-1'"),
    (["--epsilon", "1", "--sigma", "1"], "not allowed with"),
])
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
