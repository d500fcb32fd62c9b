"""Whole runs on digits: reproducibility, the ledger (budget, stop, resume), secret subsampling."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from privzv.training import run, run_folder, transcript
from privzv.training.config import TrainConfig
from privzv.training.messages import SERVER

BASE = TrainConfig(dataset="digits", devices=2, epochs=0.5, batch_size=64, evals=2, seed=5, clip=10.0)
SECRET = 9


def _train(tmp_path, name, **changes):
    out = tmp_path / name
    return out, run.train(dataclasses.replace(BASE, **changes), out, secret_seed=SECRET)


def _checkpoint(out):
    """The whole scheduler state: the public checkpoint with its private part merged back."""
    public = torch.load(out / run_folder.CHECKPOINT, weights_only=True)
    secret = {
        party: torch.load(
            out / run_folder.PRIVATE / party / f"checkpoint-{public['id']}.pt", weights_only=True
        )["state"]
        for party in public["parties"]
    }
    return run_folder.merge_state(public["state"], secret)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _metrics(out):
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("wall_seconds")
    return rows


def test_same_seed_same_run_bitwise(tmp_path):
    a, _ = _train(tmp_path, "a", sigma=0.3)
    b, _ = _train(tmp_path, "b", sigma=0.3)
    c, _ = _train(tmp_path, "c", sigma=0.3, seed=6)
    assert _same(_checkpoint(a), _checkpoint(b))
    assert _metrics(a) == _metrics(b)
    for name in ("device0.jsonl", "device0.bin"):
        assert (a / "transcripts" / name).read_bytes() == (b / "transcripts" / name).read_bytes()
    assert not _same(_checkpoint(a)["devices"], _checkpoint(c)["devices"])


def test_private_run_reports_epsilon_and_saves_the_ledger(tmp_path):
    out, summary = _train(tmp_path, "p", epsilon=4.0, delta=1e-5)
    rows = _metrics(out)
    eps = [r["epsilon_spent"] for r in rows]
    assert eps[0] == 0.0 and all(x <= y for x, y in zip(eps, eps[1:])) and 0 < eps[-1] <= 4.0
    ledger = json.loads((out / "private" / "ledger.json").read_text())
    assert ledger["releases"] == summary["rounds"] and summary["epsilon_spent"] == eps[-1]
    config = json.loads((out / "config.json").read_text())
    assert config["sigma"] == summary["sigma"] > 0 and config["calibration"]["sigma"] == summary["sigma"]
    assert {"torch", "numpy", "privzv"} <= set(config["versions"]) and config["seed"] == 5


def test_resume_continues_the_run_and_the_ledger(tmp_path):
    kw = dict(sigma=2.0, epsilon=50.0)
    straight, s_sum = _train(tmp_path, "straight", epochs=1.0, **kw)
    half, h_sum = _train(tmp_path, "half", epochs=0.5, **kw)
    first = json.loads((half / "private" / "ledger.json").read_text())["releases"]
    resumed = run.train(dataclasses.replace(BASE, epochs=1.0, **kw), half, resume=True, extend=True)
    ledger = json.loads((half / "private" / "ledger.json").read_text())
    assert first == h_sum["rounds"] and ledger["releases"] == resumed["rounds"] == s_sum["rounds"]
    assert _same(_checkpoint(half), _checkpoint(straight))  # bit for bit
    assert resumed["epsilon_spent"] == pytest.approx(s_sum["epsilon_spent"])
    assert len(transcript.load(half, SERVER).entries) == len(transcript.load(straight, SERVER).entries)


def test_run_stops_before_the_release_that_would_exceed_the_budget_even_after_resume(tmp_path):
    out, summary = _train(tmp_path, "b", sigma=2.0, epsilon=1.5, epochs=2.0)
    assert summary["stopped"] == "budget" and summary["rounds"] < summary["rounds_planned"]
    assert summary["epsilon_spent"] <= 1.5
    again = run.train(
        dataclasses.replace(BASE, sigma=2.0, epsilon=1.5, epochs=4.0), out, resume=True, extend=True
    )
    assert again["stopped"] == "budget" and again["rounds"] == summary["rounds"]


def test_secret_subsampling_keeps_a_private_poisson_subset(tmp_path):
    out, summary = _train(
        tmp_path, "s", sigma=0.5, threat="secret-subsampling", batch_size=16, super_batch=64
    )
    server, device = transcript.load(out, SERVER), transcript.load(out, "device0")
    assert not server.select("local", "keep")  # the server's secret: private/ only
    private = transcript.load(out / "private", SERVER)
    masks = np.concatenate([e.fields["mask"] for e in private.select("local", "keep")])
    sent = sum(len(e.fields["ids"]) for e in server.select("received"))
    assert masks.size == sent and sent > 16 * summary["rounds"]  # B' records sent per round
    p = masks.mean()
    assert abs(p - 0.25) <= 5 * np.sqrt(0.25 * 0.75 / masks.size)
    assert not device.select("local", "keep") and all(
        len(e.fields["ids"]) <= 64 for e in device.select("sent")
    )
    assert all(e.kind != "keep" for e in device.entries)
