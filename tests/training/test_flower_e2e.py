"""``privzv train --engine flower`` with real processes on 127.0.0.1 (a SuperLink, one SuperNode
per device running its ClientApp, the ServerApp), against the in-process run (``--engine
flower-sim`` refuses private runs: test_flower_engine)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr", reason="the Flower engine needs the optional package flwr (privzv[flower])")

from privzv.training import run_folder, seeds, transcript  # noqa: E402
from privzv.training.cli import main  # noqa: E402

# 2 devices, 3 rounds (rounds of the idle device start ahead, downlinks ride on the next
# message), evaluations at 0 and 3
ARGS = [
    "--dataset",
    "digits",
    "--method",
    "dpzv",
    "--devices",
    "2",
    "--epochs",
    str(3 / 90),
    "--epsilon",
    "8",
    "--secret-seed",
    "5",
    "--json",
]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["flower"])  # flower-sim refuses private runs (test_flower_engine)
def test_flower_processes_give_the_in_process_run(tmp_path, capsys, engine):
    assert main([*ARGS, "--out", str(tmp_path / "inprocess")]) == 0
    ref = json.loads(capsys.readouterr().out)
    code = main([*ARGS, "--out", str(tmp_path / "flower"), "--engine", engine, "--flower-timeout", "300"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    out = json.loads(printed.out)
    assert out["engine"] == engine
    for key in ("test_accuracy", "test_loss"):
        assert out[key] == pytest.approx(ref[key], rel=1e-6)
    assert out["epsilon_spent"] == ref["epsilon_spent"] > 0
    assert (out["rounds"], out["bytes_up"], out["bytes_down"]) == (
        ref["rounds"],
        ref["bytes_up"],
        ref["bytes_down"],
    )
    assert out["wire_bytes"]["up"] > out["bytes_up"] and out["wire_bytes"]["down"] > out["bytes_down"]
    for party in ("server", "device0", "device1"):  # each party recorded its own transcript
        ours, theirs = (transcript.load(tmp_path / run, party) for run in ("flower", "inprocess"))
        assert [(e.round, e.direction, e.kind) for e in ours.entries] == [
            (e.round, e.direction, e.kind) for e in theirs.entries
        ]
    # no key the parties' noise comes from reaches a public file of the run folder (the devices'
    # noise-key files stay in their own folders; only their transcripts are copied)
    run_dir = tmp_path / "flower"
    keys = [seeds.key(5, "server"), *(seeds.key(5, "device", m) for m in range(2))]
    needles = [k for key in keys for k in (key, key.hex().encode())]
    for path in run_dir.rglob("*"):
        if path.is_file() and run_folder.PRIVATE not in path.relative_to(run_dir).parts:
            data = path.read_bytes()
            assert not any(n in data for n in needles), path


def test_flower_sim_and_extend_refuse_resume(tmp_path, capsys):
    """The simulation's devices keep their state in its temporary work folder; a Flower run is
    not lengthened (its devices check the config they saved)."""
    assert main(["--resume", str(tmp_path), "--engine", "flower-sim"]) == 2
    assert "--resume continues in-process and --engine flower runs only" in capsys.readouterr().err
    assert main(["--resume", str(tmp_path), "--engine", "flower", "--extend", "--epochs", "2"]) == 2
    assert "--extend: not with --engine flower" in capsys.readouterr().err
