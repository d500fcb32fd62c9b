"""Issue 19, items 1, 6 and 7: what a reader of a run folder's public files can learn.

The reader (:func:`_read_public`) opens EVERY file outside ``private/`` and knows every format
privzv writes (JSON, JSON lines, transcripts, .npz, torch checkpoints). From it, it guesses, for
each round, which records were in the secret sample (eavesdropper: the Poisson batch among all D
records; secret-subsampling: the kept rows among the device's public super-batch), and tries to
follow the secret batch sizes. Each guess must be at chance within a confidence bound.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from privzv.cli import main
from privzv.errors import PrivzvError
from privzv.training import run, run_folder, sampling, transcript
from privzv.training.config import TrainConfig

RECORDS = 1437  # digits' training split
RUN = TrainConfig(
    dataset="digits",
    devices=2,
    epochs=1.0,
    batch_size=64,
    clip=0.1,
    sigma=1.0,
    epsilon=50.0,
    seed=4,
    evals=46,
    accountant="rdp",
)  # evaluated every round; rdp: fast


# ------------------------------------------------------------------------------ the reader
def _public(run_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in run_dir.rglob("*")
        if p.is_file() and run_folder.PRIVATE not in p.relative_to(run_dir).parts
    )


def _tensors(tree):
    """Every array in a nested checkpoint state."""
    if isinstance(tree, torch.Tensor):
        yield tree.numpy()
    elif isinstance(tree, np.ndarray):
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _tensors(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _tensors(v)


def _int_lists(obj):
    """Every list of integers in a JSON value, in order."""
    if isinstance(obj, list) and obj and all(isinstance(v, int) and not isinstance(v, bool) for v in obj):
        yield obj
    elif isinstance(obj, list):
        for v in obj:
            yield from _int_lists(v)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _int_lists(v)


def _read_public(run_dir: Path, rounds: int) -> tuple[dict, dict]:
    """What every public file says, as membership guesses and per-round series.

    ``guesses``: name -> [rounds, D] bool (record guessed in the round's secret sample), or a
    per-round list of row masks over the round's candidates (``"mask:..."``); ``series``: name ->
    [rounds] floats that may follow the secret sizes."""
    guesses, series = {}, {}
    for path in _public(run_dir):
        name = str(path.relative_to(run_dir))
        if path.suffix == ".jsonl" and path.parent.name == "transcripts":
            t = transcript.read_folder(path.parent, path.stem)
            ids = np.zeros((rounds, RECORDS), bool)
            rows = np.zeros(rounds)
            masks = [[] for _ in range(rounds)]
            for e in t.entries:
                for v in e.fields.values():
                    if e.round >= rounds or v.ndim == 0:
                        continue
                    rows[e.round] += v.shape[0]
                    if v.dtype.kind in "iu" and v.ndim == 1 and len(v) and v.min() >= 0 and v.max() < RECORDS:
                        ids[e.round, v] = True
                    if v.dtype.kind == "b" and v.ndim == 1:
                        masks[e.round].append(v)
            guesses[f"{name} ids"], series[f"{name} rows"] = ids, rows
            guesses[f"mask:{name}"] = masks
        elif path.suffix in (".json", ".jsonl", ".journal"):
            text = path.read_text()
            lines = (
                [json.loads(text)]
                if path.suffix == ".json"
                else [json.loads(x) for x in text.splitlines() if x.strip()]
            )
            ordered = np.zeros((rounds, RECORDS), bool)
            k = 0
            for line in lines:
                for ints in _int_lists(line):
                    v = np.asarray(ints)
                    if len(v) == RECORDS:  # a per-record list (counts): the records touched
                        ordered |= v > 0
                    elif v.min() >= 0 and v.max() < RECORDS and k < rounds:  # k-th id list: round k
                        ordered[k, v] = True
                        k += 1
            guesses[name] = ordered
            rows_ = [r for r in lines if isinstance(r, dict) and isinstance(r.get("round"), int)]
            for key in {k for r in rows_ for k, v in r.items() if isinstance(v, (int, float))}:
                s = np.full(rounds + 1, np.nan)
                for r in rows_:
                    if isinstance(r.get(key), (int, float)) and r["round"] <= rounds:
                        s[r["round"]] = r[key]
                series[f"{name} {key}"] = np.diff(s)  # the increment of round t
        elif path.suffix in (".npz", ".pt"):
            arrays = (
                list(np.load(path).values())
                if path.suffix == ".npz"
                else list(_tensors(torch.load(path, weights_only=True)))
            )
            union = np.zeros(RECORDS, bool)
            for a in arrays:
                a = np.asarray(a, dtype=float)
                for axis, size in enumerate(a.shape):  # a per-record array: touched records
                    if size == RECORDS:
                        union |= np.moveaxis(a, axis, 0).reshape(RECORDS, -1).any(axis=1)
                if a.ndim == 2 and len(a) == rounds and np.array_equal(a[:, 0], np.arange(rounds)):
                    for c in range(1, a.shape[1]):  # a per-round log
                        series[f"{name} column {c}"] = a[:, c]
            guesses[name] = np.broadcast_to(union, (rounds, RECORDS))
    return guesses, series


def _advantage(guess: np.ndarray, truth: np.ndarray, candidates: np.ndarray) -> tuple[float, float]:
    """TPR - FPR of ``guess`` over the candidate (round, record) pairs, and a 5-sigma bound on
    it for a guess that does not depend on the truth."""
    g, y = guess[candidates], truth[candidates]
    tpr, fpr = g[y].mean(), g[~y].mean()
    p = g.mean()
    return tpr - fpr, 5 * np.sqrt(p * (1 - p) * (1 / y.sum() + 1 / (~y).sum())) + 1e-12


def _check_reader_learns_nothing(run_dir: Path, truth: np.ndarray, candidates: np.ndarray) -> None:
    """No public guess of membership beats chance; no public per-round series follows the
    secret sizes (|S_t|: batch, or kept rows) beyond what the public candidates explain (their
    number times the sampling rate: a super-batch that is smaller keeps fewer)."""
    rounds, candidates_per_round = len(truth), candidates.sum(axis=1)
    sizes = truth.sum(axis=1) - candidates_per_round * truth.sum() / candidates.sum()
    assert np.std(sizes) > 0
    guesses, series = _read_public(run_dir, rounds)
    leaks = []
    for name, guess in guesses.items():
        if name.startswith("mask:"):  # a boolean field of round t, over its candidates in order
            guess = np.zeros_like(truth)
            for t, found in enumerate(guesses[name]):
                for mask in found:
                    if len(mask) == candidates[t].sum():
                        guess[t, np.flatnonzero(candidates[t])[mask]] = True
        adv, bound = _advantage(np.asarray(guess), truth, candidates)
        if adv > bound:
            leaks.append(f"{name}: membership advantage {adv:.3f} > {bound:.3f}")
    for name, s in series.items():
        ok = np.isfinite(s)
        if ok.sum() > 10 and np.std(s[ok]) > 0:
            r = np.corrcoef(s[ok], sizes[ok])[0, 1]
            if abs(r) > 0.7:  # ~ 5 sigma for 46 independent rounds
                leaks.append(f"{name}: correlation {r:.2f} with the secret sizes")
    assert not leaks, leaks


def test_a_reader_of_every_public_file_recovers_no_poisson_batch(tmp_path, monkeypatch):
    """Eavesdropper: the Poisson batches (ids, their counts, their sizes in bytes) are the
    server's secret. Old code: ledger.journal, ledger.json, the transcripts' ids, traffic.npz and
    metrics' bytes_up (and the table in checkpoint.pt) gave them away (advantage 1.0)."""
    drawn = []
    draw = sampling.PoissonSampler.draw
    monkeypatch.setattr(
        sampling.PoissonSampler, "draw", lambda self, d, s: drawn.append(draw(self, d, s)) or drawn[-1]
    )
    config = dataclasses.replace(RUN, threat="eavesdropper")
    summary = run.train(config, tmp_path / "run", secret_seed=1)
    rounds = summary["rounds"]
    assert rounds == len(drawn) == 46
    truth = np.zeros((rounds, RECORDS), bool)
    for t, ids in enumerate(drawn):
        truth[t, ids.numpy()] = True
    _check_reader_learns_nothing(tmp_path / "run", truth, np.ones_like(truth))
    # the secrets are kept, in the private area: the ledger resumes from them
    assert (tmp_path / "run" / "private" / "ledger.journal").is_file()
    private = transcript.read_folder(tmp_path / "run" / "private" / "transcripts", "device0")
    assert [e.fields["ids"].tolist() for e in private.select("local", "batch")] == [
        ids.tolist() for ids in drawn[0::2]
    ]
    assert summary["bytes_up"] is None and summary["bytes_down"] > 0


def test_a_reader_of_every_public_file_recovers_no_keep_decision(tmp_path):
    """Secret subsampling: the device knows its super-batch (public to it); which of its rows
    the server kept is the server's secret, and the reader guesses no better than chance."""
    config = dataclasses.replace(RUN, threat="secret-subsampling", super_batch=128, epochs=2.0)
    run.train(config, tmp_path / "run", secret_seed=2)
    server = transcript.read_folder(tmp_path / "run" / "private" / "transcripts", "server")
    keeps = {e.round: e.fields["mask"] for e in server.select("local", "keep")}
    public = transcript.load(tmp_path / "run", "server")
    supers = {e.round: e.fields["ids"] for e in public.select("received")}
    rounds = max(keeps) + 1
    assert sorted(keeps) == list(range(rounds)) == sorted(supers)
    truth = np.zeros((rounds, RECORDS), bool)
    candidates = np.zeros_like(truth)
    for t in range(rounds):
        candidates[t, supers[t]] = True
        truth[t, supers[t][keeps[t]]] = True
    _check_reader_learns_nothing(tmp_path / "run", truth, candidates)


# ------------------------------------------------------------------------------ item 7
def test_no_public_file_holds_the_table_or_a_device_model(tmp_path):
    """The server's table (every device's latest raw embedding of every record) and each
    device's model and optimiser live in their owner's private area: checkpoint.pt holds only
    what every party may see. Old code: both were in checkpoint.pt."""
    config = dataclasses.replace(RUN, method="fo-vector", epochs=0.3, evals=1)
    run.train(config, tmp_path / "run", secret_seed=3)
    out = tmp_path / "run"
    ckpt = torch.load(out / run_folder.CHECKPOINT, weights_only=True)
    state = ckpt["state"]
    assert "table" not in state["server"] and state["devices"] == [None, None]
    assert state["method"]["devices"] == {} and "traffic" not in state
    for path in _public(out):
        if path.suffix in (".pt", ".npz"):
            arrays = (
                list(np.load(path).values())
                if path.suffix == ".npz"
                else list(_tensors(torch.load(path, weights_only=True)))
            )
            assert not any(RECORDS in np.shape(a) for a in arrays), path  # no per-record array
    # each device's state is its own file; a party reads its own state only
    for m in range(2):
        own = run_folder.party_state(out, f"device{m}")
        assert own["devices"][m]["model"] and own["devices"][1 - m] is None
    assert "table" in run_folder.party_state(out, "server")["server"]
    assert "table" not in run_folder.party_state(out, "device0")["server"]
    # transcripts say whose raw embeddings they hold
    for party, whose in (("server", ["device0", "device1"]), ("device1", ["device1"])):
        assert transcript.load(out, party).meta["contains"] == {"raw_embeddings": whose}


def test_an_attack_reads_its_own_party_model_only(tmp_path):
    from privzv.attacks import party_models, registry

    config = dataclasses.replace(RUN, epochs=0.1, evals=1, epsilon=float("inf"), sigma=None)
    out = tmp_path / "run"
    run.train(config, out, secret_seed=3)
    cfg = run_folder.public_config(out)["config"]
    dataset = registry._dataset(cfg, None, "--run")
    mine = party_models.for_run(out, cfg, dataset, "device0")
    assert mine.outputs(0).shape[0] == RECORDS
    with pytest.raises(PrivzvError, match="device1's model"):
        mine.device(1)
    assert registry.run_attack("model-completion", out, attacker=1).metrics["source"] == "bottom-model"


# ------------------------------------------------------------------------------ item 6
def test_add_remove_is_refused_for_training(tmp_path, capsys):
    """D is public in a training run (transcripts state it, the epoch permutations depend on it):
    add-remove neighbours are refused there; privzv calibrate still answers them."""
    with pytest.raises(PrivzvError, match="replace-one"):
        dataclasses.replace(RUN, neighbors="add-remove").validate()
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"neighbors": "add-remove", "threat": "eavesdropper", "epsilon": 1}))
    code = main(["train", "--config", str(config), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "replace-one" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
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
                "--clip",
                "1",
                "--threat",
                "eavesdropper",
                "--neighbors",
                "add-remove",
            ]
        )
        == 0
    )


# ------------------------------------------------------------------------------ Flower
@pytest.mark.parametrize("threat", ["eavesdropper", "secret-subsampling"])
def test_flower_refuses_sampled_threats(tmp_path, threat):
    from privzv.training.engines.flower import launcher

    config = dataclasses.replace(RUN, threat=threat, super_batch=128)
    with pytest.raises(PrivzvError, match="not with --engine flower"):
        launcher.run(config, tmp_path / "o", secret_seed=1)
