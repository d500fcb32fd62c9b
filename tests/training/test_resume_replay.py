"""Kills and stop signals, then --resume, on a calibrated run with a pooled DP head (digits, 4
devices, --head-window 1: a window is 4 releases; checkpoints every 8 rounds). Seeded noise: the
resumed run is the unkilled run (metrics, ledger, transcripts) and completes its planned rounds;
secure noise: the ledger's K per record is the K of the head processes that ran. SIGINT,
SIGTERM and SIGHUP stop at a round's end with a checkpoint, the summary, no lock, exit 128 + n."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import time

import numpy as np
import pytest

from privzv import threats
from privzv.cli import main
from privzv.ledger import PrivacyLedger
from privzv.training import run, stopping
from privzv.training.config import TrainConfig
from privzv.training.methods.dpzv import DPZV

SECRET, EVERY, M = 7, 8, 4
CALIBRATED = TrainConfig(
    dataset="digits", devices=M, epochs=0.4, batch_size=64, evals=3, seed=5, epsilon=8.0, head_window=1
)
FLAGS = [
    "--dataset",
    "digits",
    "--devices",
    str(M),
    "--epochs",
    "0.4",
    "--batch-size",
    "64",
    "--epsilon",
    "8",
    "--head-window",
    "1",
    "--seed",
    "5",
    "--secret-seed",
    str(SECRET),
    "--checkpoint-every",
    str(EVERY),
    "--json",
]


def _flags(tmp_path):
    """FLAGS with the config's 3 evaluations (a --config file: train has no --evals flag)."""
    (tmp_path / "c.json").write_text(json.dumps({"evals": CALIBRATED.evals}))
    return [*FLAGS, "--config", str(tmp_path / "c.json")]


class _Killed(BaseException):
    """Ends a run in-process where a kill would: its files as a SIGKILL leaves them."""


def _bar(action, at: int):
    """A progress bar that calls ``action()`` once round ``at`` is done."""

    class Bar:
        def __init__(self, total):
            self.n = 0

        def update(self, n=1):
            before, self.n = self.n, self.n + n
            if before < at <= self.n:
                action()

        def close(self):
            pass

    return Bar


def _kill():
    raise _Killed


pytestmark = pytest.mark.usefixtures("no_plots")  # conftest.py


@pytest.fixture(scope="module")
def unkilled(tmp_path_factory, no_plots):
    out = tmp_path_factory.mktemp("unkilled") / "run"
    summary = run.train(CALIBRATED, out, secret_seed=SECRET, checkpoint_every=EVERY)
    assert summary["stopped"] is None and summary["rounds"] == summary["rounds_planned"] == 37
    return out, summary


def _json(path):
    return json.loads(path.read_text())


def _rows(out):
    return [
        {k: v for k, v in json.loads(x).items() if k != "wall_seconds"}
        for x in (out / "metrics.jsonl").read_text().splitlines()
    ]


def _transcripts(out):
    return {
        p.relative_to(out): p.read_bytes()
        for folder in ("transcripts", "private/transcripts")
        for p in sorted((out / folder).iterdir())
    }


def _markers(out):
    return [
        x
        for x in map(json.loads, (out / "private" / "ledger.journal").read_text().splitlines())
        if "resume" in x
    ]


def _same_run(out, reference, summary, ref_summary, replayed_rounds=range(0)):
    """``out`` is the unkilled ``reference``: summary, ledger, transcripts, model, metrics (an
    evaluation inside the replayed rounds shows the epsilon the killed run had already spent,
    never less than the unkilled run's)."""
    drop = ("wall_seconds", "curve")
    assert {k: v for k, v in summary.items() if k not in drop} == {
        k: v for k, v in ref_summary.items() if k not in drop
    }
    assert summary["stopped"] is None and summary["rounds"] == summary["rounds_planned"]
    assert _json(out / "private" / "ledger.json") == _json(reference / "private" / "ledger.json")
    assert _transcripts(out) == _transcripts(reference)
    traffic = "traffic.npz" if (reference / "traffic.npz").exists() else "private/traffic.npz"
    assert (out / traffic).read_bytes() == (reference / traffic).read_bytes()
    rows, ref_rows = _rows(out), _rows(reference)
    assert len(rows) == len(ref_rows)
    for row, ref in zip(rows, ref_rows):
        if row["round"] in replayed_rounds:
            assert row["epsilon_spent"] >= ref["epsilon_spent"]
            row = {**row, "epsilon_spent": ref["epsilon_spent"]}
        assert row == ref


# ------------------------------------------------------------------------------ kills, seeded noise
@pytest.mark.parametrize("killed_at", [13, 14, 15])  # 5, 6, 7 discarded: mod M = 1, 2, 3
def test_a_killed_run_resumes_to_the_unkilled_run(unkilled, tmp_path, killed_at):
    """Killed after round ``killed_at`` (checkpoint at 8): the resume re-makes the discarded
    releases bit for bit and counts them once; the head's windows and the ledger's agree, so the
    calibrated run completes its 37 rounds at exactly the unkilled run's epsilon (before: stopped
    for budget)."""
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        run.train(
            CALIBRATED, out, secret_seed=SECRET, checkpoint_every=EVERY, progress=_bar(_kill, killed_at)
        )
    summary = run.train(None, out, resume=True)
    _same_run(out, unkilled[0], summary, unkilled[1], range(EVERY + 1, killed_at + 1))
    [marker] = _markers(out)
    assert marker["discarded"] == killed_at - EVERY and marker["replayed"] is True
    assert _json(out / "private" / "ledger.json")["head_position"] == summary["rounds"]


def _unkilled_and_killed(config, tmp_path, kill_at: int) -> dict:
    """Summaries of ``config`` run whole ("unkilled") and killed at round ``kill_at``, then
    resumed ("run"), with the same secret seed."""
    summaries = {}
    for name, progress in (("unkilled", None), ("run", _bar(_kill, kill_at))):
        try:
            summaries[name] = run.train(
                config, tmp_path / name, secret_seed=SECRET, checkpoint_every=EVERY, progress=progress
            )
        except _Killed:
            summaries[name] = run.train(None, tmp_path / name, resume=True)
    return summaries


def test_the_default_window_across_a_kill(tmp_path):
    """The default pooled window (q = 4: 16 releases), killed with 13 discarded releases (mod M
    = 1) across a window's end: the resumed run is the unkilled one."""
    config = dataclasses.replace(CALIBRATED, head_window=None)
    summaries = _unkilled_and_killed(config, tmp_path, 21)
    _same_run(
        tmp_path / "run",
        tmp_path / "unkilled",
        summaries["run"],
        summaries["unkilled"],
        range(EVERY * 2 + 1, 22),
    )
    assert _markers(tmp_path / "run")[0]["discarded"] == 21 - 2 * EVERY


def test_a_killed_poisson_run_resumes_to_the_unkilled_run(tmp_path):
    """Threat eavesdropper (Poisson batches from the server's secret generator, every release
    counted): the re-made batches are the journal's, counted once."""
    config = TrainConfig(
        dataset="digits",
        devices=2,
        epochs=0.3,
        batch_size=64,
        evals=2,
        seed=5,
        sigma=1.0,
        epsilon=50.0,
        threat="eavesdropper",
    )
    summaries = _unkilled_and_killed(config, tmp_path, 11)
    _same_run(
        tmp_path / "run", tmp_path / "unkilled", summaries["run"], summaries["unkilled"], range(EVERY + 1, 12)
    )
    assert _markers(tmp_path / "run")[0]["discarded"] == 11 - EVERY


def test_a_ledger_json_without_head_position_is_still_resumed(unkilled, tmp_path):
    """ledger.json written before head_position was kept (no resume in its journal)."""
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        run.train(CALIBRATED, out, secret_seed=SECRET, checkpoint_every=EVERY, progress=_bar(_kill, 13))
    state = _json(out / "private" / "ledger.json")
    del state["head_position"]
    (out / "private" / "ledger.json").write_text(json.dumps(state))
    summary = run.train(None, out, resume=True)
    _same_run(out, unkilled[0], summary, unkilled[1], range(EVERY + 1, 14))


def test_sigkill_of_a_real_process_then_resume_is_the_unkilled_run(unkilled, tmp_path, capsys, cli_process):
    """A real SIGKILL once the journal holds releases after the round-8 checkpoint."""
    out = tmp_path / "run"
    pid = cli_process(["train", *_flags(tmp_path), "--out", str(out)])
    _wait(pid, lambda: _after_checkpoint(out) >= 2)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert (tmp_path / ".run.lock").exists()  # what a kill leaves
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    [marker] = _markers(out)
    summary.pop("out")
    replayed = range(marker["round"] + 1, marker["round"] + marker["discarded"] + 1)
    _same_run(out, unkilled[0], summary, unkilled[1], replayed)
    assert marker["discarded"] >= 2 and marker["replayed"] is True
    assert not (tmp_path / ".run.lock").exists()


def test_a_resume_on_another_platform_charges_the_remade_releases(tmp_path, monkeypatch):
    """Seeded noise, but resumed where torch may compute other bits (here: another CPU kernel
    set): the re-made releases are not known to be identical, so they are charged again."""
    config = dataclasses.replace(CALIBRATED, epsilon=1000.0, sigma=1.0)
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        run.train(config, out, secret_seed=SECRET, checkpoint_every=EVERY, progress=_bar(_kill, 14))
    here = run.replay_platform()
    monkeypatch.setattr(run, "replay_platform", lambda: {**here, "cpu": "another"})
    summary = run.train(None, out, resume=True)
    [marker] = _markers(out)
    assert marker["replayed"] is False and marker["discarded"] == 6
    assert _json(out / "private" / "ledger.json")["releases"] == summary["rounds"] + 6


# ------------------------------------------------------------------------------ kills, secure noise
def _walk_k(first, checkpoint, second, release, records):
    """Per record K of a killed head process (``first``) and one resumed at ``checkpoint`` with
    that process's open window (``second``), fresh draws: every release and every closed window
    counts, the resumed run's open one too."""
    per_epoch = -(-records // release.batch_size)
    w = release.head_weight

    def head(releases, start, window):
        squares, window = np.zeros(records), window.copy()
        for position, ids in enumerate(releases, start):
            window[ids] += 1
            if threats.window_closes(position, M, per_epoch, release.head.window):
                squares, window = squares + window**2, np.zeros(records)
        return squares, window

    k = np.zeros(records)
    for ids in first + second:
        k[ids] += 1
    killed, _ = head(first, 0, np.zeros(records))
    resumed, open_ = head(second, checkpoint, head(first[:checkpoint], 0, np.zeros(records))[1])
    return (1 - w) * k + w * (killed + resumed + open_**2)


@pytest.mark.parametrize("killed_at", [14])  # 6 discarded
def test_secure_noise_charges_the_remade_releases_as_the_heads_windows(tmp_path, killed_at):
    """--secure-noise: a re-made release is a fresh draw, charged again; per record the ledger's
    K equals the K of both head processes (windows closed by the head's own step count)."""
    config = dataclasses.replace(CALIBRATED, secure_noise=True, epsilon=1000.0, sigma=1.0, epochs=0.2)
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        run.train(config, out, checkpoint_every=EVERY, progress=_bar(_kill, killed_at))
    summary = run.train(None, out, resume=True)
    assert summary["rounds"] == summary["rounds_planned"]
    lines = [json.loads(x) for x in (out / "private" / "ledger.journal").read_text().splitlines()[1:]]
    cut = next(i for i, x in enumerate(lines) if "resume" in x)
    first = [np.array(x["ids"]) for x in lines[:cut] if "ids" in x]
    second = [np.array(x["ids"]) for x in lines[cut:] if "ids" in x]
    ledger = _json(out / "private" / "ledger.json")
    ledger["epsilon_budget"] = ledger["epsilon_budget"] or math.inf
    release = PrivacyLedger.from_state_dict(ledger).release
    records = len(ledger["counts"][0])
    w = release.head_weight
    got = (1 - w) * np.array(ledger["counts"]).sum(axis=0) + w * (
        np.array(ledger["window_squares"]) + np.array(ledger["window_counts"]) ** 2
    )
    assert np.allclose(got, _walk_k(first, EVERY, second, release, records))
    assert ledger["releases"] == summary["rounds"] + killed_at - EVERY
    assert lines[cut]["discarded"] == killed_at - EVERY and lines[cut]["replayed"] is False


# ------------------------------------------------------------------------------ stop signals
def _signal_at(sig, at):
    return _bar(lambda: os.kill(os.getpid(), sig), at)


@pytest.mark.parametrize("sig", [signal.SIGTERM])  # SIGINT: below; all three: real processes
def test_a_stop_signal_checkpoints_and_the_resume_is_the_unkilled_run(unkilled, tmp_path, sig):
    out = tmp_path / "run"
    stopped = run.train(
        CALIBRATED, out, secret_seed=SECRET, checkpoint_every=EVERY, progress=_signal_at(sig, 13)
    )
    assert stopped["stopped"] == stopping.REASONS[sig] and stopped["rounds"] == 13
    assert (out / "summary.json").is_file() and not (tmp_path / ".run.lock").exists()
    summary = run.train(None, out, resume=True)
    [marker] = _markers(out)
    assert marker["discarded"] == 0 and marker["round"] == 13
    _same_run(out, unkilled[0], summary, unkilled[1])


def test_a_signal_inside_a_round_stops_after_it(unkilled, tmp_path, monkeypatch):
    """Ctrl-C while the server makes round 13's release (journaled, noise drawn): the round is
    finished first, so the checkpoint holds it and the resume makes and charges it once."""
    reply = DPZV.server_reply

    def interrupted(self, server, up):
        if server.round == 12:
            os.kill(os.getpid(), signal.SIGINT)
        return reply(self, server, up)

    monkeypatch.setattr(DPZV, "server_reply", interrupted)
    out = tmp_path / "run"
    stopped = run.train(CALIBRATED, out, secret_seed=SECRET, checkpoint_every=EVERY)
    assert stopped["stopped"] == "interrupted" and stopped["rounds"] == 13
    monkeypatch.setattr(DPZV, "server_reply", reply)
    summary = run.train(None, out, resume=True)
    [marker] = _markers(out)
    assert marker["discarded"] == 0
    _same_run(out, unkilled[0], summary, unkilled[1])


def test_a_signal_before_training_leaves_nothing(tmp_path):
    """SIGTERM while the run is being set up: Stop (exit 143 from the CLI), no folder, no lock."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(stopping.Stop) as stop:
        run.train(
            CALIBRATED,
            tmp_path / "run",
            secret_seed=SECRET,
            announce=lambda line: os.kill(os.getpid(), signal.SIGTERM),
        )
    assert stop.value.exit_code == 143 and stop.value.reason == "terminated"
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def _after_checkpoint(out):
    """Releases journaled after the round-8 checkpoint marker (0 before it)."""
    try:
        lines = [
            json.loads(x)
            for x in (out / "private" / "ledger.journal").read_text().splitlines()
            if x.endswith("}")
        ]
    except FileNotFoundError:
        return 0
    marks = [i for i, x in enumerate(lines) if x.get("round") == EVERY and "checkpoint" in x]
    return sum("ids" in x for x in lines[marks[0] :]) if marks else 0


def _wait(pid, ready, limit=120.0):
    """Poll until ``ready()`` (the child still running), at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not ready():
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the run ended before the signal"
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.001)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_real_stop_signals_exit_128_plus_n_with_a_checkpoint_and_no_lock(tmp_path, sig, cli_process):
    out = tmp_path / "run"
    pid = cli_process(["train", *_flags(tmp_path), "--out", str(out)])
    _wait(pid, lambda: _after_checkpoint(out) >= 1)
    os.kill(pid, sig)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + sig
    summary = _json(out / "summary.json")
    assert summary["stopped"] == stopping.REASONS[sig] and summary["rounds"] < 37
    assert not (tmp_path / ".run.lock").exists()
    assert main(["train", "--resume", str(out), "--json"]) == 0
    assert _markers(out)[0]["discarded"] == 0


def _releases(out):
    """Releases journaled so far (complete lines; a replayed release is journaled again)."""
    try:
        text = (out / "private" / "ledger.journal").read_text()
    except FileNotFoundError:
        return 0
    return sum('"ids"' in x for x in text.splitlines() if x.endswith("}"))


def test_sigkills_and_a_sigint_in_sequence_resume_to_the_unkilled_run(
    unkilled, tmp_path, capsys, cli_process
):
    """The calibrated run (epsilon 8) killed with SIGKILL twice (between checkpoints: releases to
    re-make) and stopped with SIGINT once, each time resumed by a real process: it finishes its
    37 planned rounds (never stopped for budget) with the unkilled run's metrics curve, ledger,
    transcripts and summary (issue 24 item 4)."""
    out = tmp_path / "run"
    fresh, resume = ["train", *_flags(tmp_path), "--out", str(out)], ["train", "--resume", str(out), "--json"]
    signals = 0
    for sig, at in ((signal.SIGKILL, 11), (signal.SIGKILL, 22), (signal.SIGINT, 30)):
        pid = cli_process(resume if (out / "config.json").exists() else fresh)
        _wait(pid, lambda: _releases(out) >= at)
        os.kill(pid, sig)
        _, status = os.waitpid(pid, 0)
        signals += 1
        assert os.waitstatus_to_exitcode(status) == (-sig if sig == signal.SIGKILL else 128 + sig)
    capsys.readouterr()
    assert main(resume) == 0
    summary = json.loads(capsys.readouterr().out)
    summary.pop("out")
    markers = _markers(out)
    assert len(markers) == signals and all(m["replayed"] for m in markers)
    assert sum(m["discarded"] > 0 for m in markers) >= 1  # a kill between checkpoints
    replayed = {r for m in markers for r in range(m["round"] + 1, m["round"] + m["discarded"] + 1)}
    _same_run(out, unkilled[0], summary, unkilled[1], replayed)
