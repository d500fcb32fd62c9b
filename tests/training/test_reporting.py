"""The trainer's reporting edges (issue 22 item 5): the start banner prints the values applied,
and a divergence names the flags and values to try."""

from __future__ import annotations

import pytest

from privzv.cli import main
from privzv.training import divergence, run
from privzv.training.config import TrainConfig
from privzv.training.scheduler import Scheduler

SMALL = [
    "train",
    "--dataset",
    "breast-cancer",
    "--devices",
    "2",
    "--epochs",
    "0.05",
    "--no-transcripts",
    "--secret-seed",
    "1",
]


def test_the_banner_prints_the_method_default_as_a_number(tmp_path, capsys):
    assert main([*SMALL, "--method", "vafl", "--epsilon", "2", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "lr_device 5 (VAFL.LR_DEVICE (EMBED_NORM / min(C, EMBED_NORM))^2 with noise" in err
    line = next(x for x in err.splitlines() if x.startswith("lr_server"))  # noised inputs: below 0.05
    assert float(line.split()[1]) < 0.05 and "min(VAFL.LR_SERVER, 0.3 / s)" in line
    assert "method default" not in err


def test_the_banner_prints_the_dp_heads_rate(tmp_path, capsys):
    assert main([*SMALL, "--method", "fo-vector", "--epsilon", "2", "--out", str(tmp_path / "r")]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("lr_server"))
    value = float(line.split()[1])
    assert value > 0 and "the DP head's default (methods.head.default_lr)" in line


def test_advice_names_each_rate_flag_with_a_hundredth_of_the_applied_rate(tiny_scheduler):
    method = tiny_scheduler(method="vafl").method
    assert method.config.lr_device is None  # left to the method: its LR_DEVICE 0.05 applies
    assert divergence.advice(method) == (
        "lower the learning rates: try --lr-device 0.0005 --lr-server 0.0005 (a hundredth of this run's)"
    )
    given = tiny_scheduler(method="vafl", lr_device=0.2, lr_server=0.3).method
    assert "--lr-device 0.002 --lr-server 0.003" in divergence.advice(given)
    third = divergence.advice(given, divergence.OVERCONFIDENT_CUT)
    assert "--lr-device 0.0667 --lr-server 0.1 (a third of this run's)" in third


def test_a_divergence_during_a_round_is_advised_once(tmp_path, monkeypatch):
    def blow_up(self, *args, **kwargs):
        raise divergence.Diverged("a value to be released is NaN or infinite (training diverged)")

    monkeypatch.setattr(Scheduler, "run", blow_up)
    config = TrainConfig(dataset="breast-cancer", devices=2, epochs=0.05, method="vafl", transcripts=False)
    with pytest.raises(divergence.Diverged) as caught:
        run.train(config, tmp_path / "r", secret_seed=1)
    assert str(caught.value).count("try --lr-device 0.0005 --lr-server 0.0005") == 1


def test_a_diverging_run_names_values_to_try(tmp_path, capsys):
    rc = main(
        [
            "train",
            "--dataset",
            "digits",
            "--devices",
            "2",
            "--epochs",
            "0.2",
            "--batch-size",
            "64",
            "--lr-device",
            "1000",
            "--lr-server",
            "1000",
            "--json",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "training diverged by round" in err[0]
    assert "try --lr-device 10 --lr-server 10" in err[0]
