"""`privzv train`: a small run end to end, and every error path (one stderr line, exit code 2)."""

from __future__ import annotations

import json

import pytest

from privzv.cli import main

SMALL = ["--dataset", "digits", "--devices", "2", "--epochs", "0.3", "--batch-size", "64"]


def test_json_summary_and_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--epsilon", "3", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    for key in (
        "test_accuracy",
        "rounds",
        "bytes_up",
        "bytes_down",
        "epsilon_spent",
        "sigma",
        "wall_seconds",
    ):
        assert key in summary
    assert 0 < summary["epsilon_spent"] <= 3 and summary["sigma"] > 0
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "metrics.jsonl",
        "summary.json",
        "private",
        "checkpoint.pt",
        "traffic.npz",
        "transcripts",
        "accuracy_vs_rounds.png",
        "accuracy_vs_rounds.svg",
        "accuracy_vs_bytes.png",
        "accuracy_vs_bytes.svg",
    } <= names
    # no leftovers: nothing beside the folder (no lock file), no temp file in it
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert not list(out.rglob(".*.tmp"))


def test_config_file_and_flags_precedence(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"embed_dim": 8, "batch_size": 32, "lam": 0.01}))
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--config", str(cfg), "--no-transcripts", "--out", str(out), "--json"]) == 0
    saved = json.loads((out / "config.json").read_text())["config"]
    assert (saved["embed_dim"], saved["batch_size"], saved["lam"], saved["transcripts"]) == (
        8,
        64,
        0.01,
        False,
    )
    assert not (out / "transcripts").exists()


def test_clip_and_lam_flags_reach_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    args = [*SMALL, "--epsilon", "3", "--clip", "0.5", "--lam", "0.01", "--no-transcripts"]
    assert main(["train", *args, "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "config.json").read_text())
    assert (saved["config"]["clip"], saved["config"]["lam"]) == (0.5, 0.01)
    assert saved["release"]["clip"] == 0.5
    # sigma is calibrated for sensitivity 2C/B, so it scales with C: C=0.5 gives a 20x smaller
    # sigma than C=10 at the same budget
    ref = tmp_path / "ref"
    assert (
        main(
            [
                "train",
                *SMALL,
                "--epsilon",
                "3",
                "--clip",
                "10",
                "--no-transcripts",
                "--out",
                str(ref),
                "--json",
            ]
        )
        == 0
    )
    assert summary["sigma"] == pytest.approx(json.loads(capsys.readouterr().out)["sigma"] / 20, rel=1e-3)


def test_bottleneck_flags_reach_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    args = [*SMALL, "--embed-dim", "10", "--server-kind", "sum", "--no-transcripts"]
    assert main(["train", *args, "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    saved = json.loads((out / "config.json").read_text())["config"]
    assert (saved["embed_dim"], saved["server_kind"]) == (10, "sum")
    assert (
        main(["train", *SMALL, "--embed-dim", "2", "--server-kind", "sum", "--out", str(tmp_path / "bad")])
        == 2
    )
    assert "needs embed_dim == num_classes" in capsys.readouterr().err


def test_a_private_run_prints_the_whole_runs_epsilon_with_each_mechanism(tmp_path, capsys):
    """Issue 7's acceptance: epsilon_spent <= 1 covers every release, the head's included."""
    out = tmp_path / "run"
    args = [*SMALL, "--epsilon", "1", "--head-clip", "0.5", "--head-share", "0.7", "--no-transcripts"]
    assert main(["train", *args, "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert 0 < summary["epsilon_spent"] <= 1 and summary["rounds"] == summary["rounds_planned"]
    down, head = summary["mechanisms"]
    assert (down["mechanism"], head["mechanism"], head["clip"], head["share"]) == (
        "downlink",
        "head",
        0.5,
        0.7,
    )
    assert down["sigma"] == summary["sigma"] and head["sigma"] > 0
    # the sampled head (the default): a step every round, each on a secret sample of the table
    assert head["window"] == 0 and head["count"] == summary["rounds"] >= down["count"] >= 1
    assert 0 < head["sampling_rate"] < 1
    release = json.loads((out / "config.json").read_text())["release"]
    assert release["head"]["clip"] == 0.5 and release["head"]["sigma"] == head["sigma"]
    assert (
        main(
            [
                "train",
                *SMALL,
                "--epsilon",
                "1",
                "--freeze",
                "server",
                "--no-transcripts",
                "--out",
                str(tmp_path / "frozen"),
                "--json",
            ]
        )
        == 0
    )
    assert [m["mechanism"] for m in json.loads(capsys.readouterr().out)["mechanisms"]] == ["downlink"]


def test_resume_extends_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--sigma", "1", "--out", str(out), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["train", "--resume", str(out), "--extend", "--epochs", "0.6", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["rounds"] > first["rounds"] and second["epsilon_spent"] >= first["epsilon_spent"]
    assert json.loads((out / "private" / "ledger.json").read_text())["releases"] == second["rounds"]


def _bad_config(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    return str(path)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--dataset", "imagenet"], "--dataset"),
        (["--method", "sgd"], "--method"),
        (["--batch-size", "100000"], "--batch-size 100000"),
        (["--batch-size", "0"], "--batch-size"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--epsilon", "abc"], "--epsilon"),
        (["--delta", "1.5"], "--delta"),
        (["--freeze", "both"], "--freeze"),
        (["--clip", "0"], "--clip"),
        (["--clip", "-1"], "--clip"),
        (["--clip", "inf"], "--clip"),
        (["--lam", "0"], "--lam"),
        (["--lam", "nan"], "--lam"),
        (["--head-clip", "0"], "--head-clip"),
        (["--head-share", "1"], "--head-share"),
        (["--epsilon", "0.01", "--sigma", "0.1"], "too small for even one release"),
        (["--dataset", "mnist"], "--data-dir"),
        (["--dataset", "mnist", "--data-dir", "/nonexistent/dir"], "--data-dir"),
        (["--threat", "secret-subsampling", "--epsilon", "1"], "super_batch"),
        (["--method", "vafl", "--epsilon", "1", "--devices", "0"], "--devices"),
        (["--resume", "/nonexistent/run"], "--resume"),
        (["--config", "/nonexistent/c.json"], "--config"),
        # issue 19: a non-rigorous accountant printed "epsilon spent 1" for a run whose pld epsilon is 15.5
        (["--epsilon", "1", "--accountant", "seed"], "--accountant"),
        (["--epsilon", "1", "--accountant", "gdp-clt"], "--accountant"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, words):
    code = main(["train", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not JSON"),
        ('{"learning_rate": 1}', "learning_rate"),
        ('{"no_clip": true, "epsilon": 1}', "no_clip"),
        ('{"activation": [0.5, 0.6]}', "activation"),
        ("[1, 2]", "JSON object"),
        ('{"transcripts": "no"}', "transcripts"),
        ('{"clip": "ten"}', "clip"),
        ('{"accountant": "seed", "epsilon": 1}', "--accountant seed: not a rigorous upper bound"),
        ('{"accountant": "gdp-clt", "epsilon": 1}', "--accountant gdp-clt: not a rigorous upper bound"),
    ],
)
def test_bad_config_files(tmp_path, capsys, content, words):
    code = main(
        ["train", "--config", _bad_config(tmp_path, content), "--devices", "2", "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_out_folder_that_exists_and_resume_with_other_flags(tmp_path, capsys):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    assert main(["train", *SMALL, "--out", str(busy)]) == 2
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--no-transcripts", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--method", "vafl"]) == 2
    assert "--method" in capsys.readouterr().err
