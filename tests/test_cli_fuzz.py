"""Bad and edge invocations of every command: exit code 2, exactly one non-empty stderr line, no
traceback, and nothing written or left behind in the output folder (issue 8, item 6).

Placeholders in the argument lists: ``{in}`` is a folder of prepared inputs (bad config files,
corrupt datasets, a file where a folder is expected), ``{out}`` the output folder whose contents
must not change. Most cases run ``privzv.cli.main`` in-process; a few run the real executable.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privzv import cliutil
from privzv.cli import main

AUDIT = ["attack", "audit", "--delta", "1e-3", "--steps", "1000", "--dataset-size", "600",
         "--batch-size", "64", "--clip", "10"]
ACCOUNT = ["account", "--sigma", "1", "--delta", "1e-5", "--steps", "100", "--dataset-size", "1000",
           "--batch-size", "10", "--clip", "1"]
CALIBRATE = ["calibrate", "--epsilon", "1", "--delta", "1e-5", "--steps", "100",
             "--dataset-size", "1000", "--batch-size", "10", "--clip", "1"]
TRAIN = ["train", "--dataset", "digits", "--devices", "2", "--epochs", "0.05", "--out", "{out}/run"]
MNIST = ["train", "--dataset", "mnist", "--devices", "7", "--epochs", "0.05", "--out", "{out}/run"]
CIFAR = ["train", "--dataset", "cifar10", "--devices", "4", "--epochs", "0.05", "--out", "{out}/run"]
STUDY = ["attack", "study", "--out", "{out}/study"]

# --------------------------------------------------------------------------- the cases
TOP = [
    [], ["nope"], ["--nope"], ["-x"], ["help"], ["convert"], ["convert", "--mu", "1"],
    ["convert", "--mu", "-1", "--delta", "1e-5"], ["convert", "--mu", "nan", "--delta", "1e-5"],
    ["convert", "--mu", "1", "--delta", "1"], ["convert", "--mu", "1", "--delta", "0"],
    ["convert", "--epsilon", "x", "--delta", "0.1"], ["convert", "--mu", "1", "--epsilon", "1", "--delta", "0.1"],
    ["convert", "--mu", "inf", "--delta", "0.1"], ["convert", "--epsilon", "-1", "--delta", "0.1"],
    ["convert", "--mu", "1", "--delta", "1e-5", "--bogus"],
    ["calibrate"], ["account"], [*CALIBRATE[:2], "0", *CALIBRATE[3:]],
    [*CALIBRATE[:2], "nan", *CALIBRATE[3:]], [*CALIBRATE, "--batch-size", "2000"],
    [*CALIBRATE, "--threat", "secret-subsampling"], [*ACCOUNT[:2], "0", *ACCOUNT[3:]],
    [*ACCOUNT[:2], "inf", *ACCOUNT[3:]], [*ACCOUNT, "--steps", "0"], [*ACCOUNT, "--steps", "1.5"],
    [*ACCOUNT, "--threat", "nope"], [*ACCOUNT, "--accountant", "nope"], [*ACCOUNT, "--neighbors", "nope"],
    [*ACCOUNT, "--devices", "0"], [*ACCOUNT, "--clip", "-1"], [*ACCOUNT, "--super-batch", "50"],
    [*ACCOUNT, "--delta", "2"], [*ACCOUNT, "--dataset-size", "x"],
]

TRAIN_FLAGS = [
    ["--dataset", "nope"], ["--method", "nope"], ["--devices", "0"], ["--devices", "-1"],
    ["--devices", "x"], ["--devices", "1.5"], ["--devices", "9"], ["--epochs", "0"], ["--epochs", "-1"],
    ["--epochs", "nan"], ["--epochs", "inf"], ["--epochs", "1e308"], ["--epochs", "x"],
    ["--batch-size", "0"], ["--batch-size", "1e9"], ["--batch-size", "100000"], ["--epsilon", "0"],
    ["--epsilon", "-1"], ["--epsilon", "nan"], ["--delta", "0"], ["--delta", "1"], ["--delta", "nan"],
    ["--threat", "nope"], ["--accountant", "nope"], ["--sigma", "-1"], ["--sigma", "nan"],
    ["--sigma", "inf"], ["--sigma", "1e300"], ["--clip", "0"], ["--clip", "1e300"], ["--lam", "0"],
    ["--lam", "1e300"], ["--lam", "nan"], ["--lam", "-0.1"], ["--freeze", "nope"],
    ["--lr-device", "-1"], ["--lr-device", "1e300"], ["--lr-server", "nan"], ["--lr-server", "1e10"],
    ["--seed", "-1"], ["--seed", "1.5"], ["--seed", "x"], ["--seed", "99999999999999999999999"],
    ["--foo"], ["--config", "{in}/nope.json"], ["--resume", "{in}/nope"], ["--resume", "{in}/file"],
    ["--data-dir", "{in}/nope", "--dataset", "mnist"], ["--dataset", "mnist"],
    ["--dataset", "cifar10", "--data-dir", "{in}/file"], ["--dataset", "breast-cancer", "--devices", "31"],
    ["--epsilon", "1", "--sigma", "0"], ["--config", "{in}/dir-config"],
] + ([["--config", "/dev/zero"]] if os.path.exists("/dev/zero") else [])

CONFIGS = {   # name -> file content (bytes) for --config {in}/NAME
    "binary": bytes(range(256)) * 4, "empty": b"", "list": b"[]", "null": b"null", "open": b"{",
    "nan-token": b'{"epsilon": NaN}', "inf-token": b'{"lam": Infinity}', "unknown": b'{"nope": 1}',
    "deep": b"[" * 100_000 + b"]" * 100_000, "huge-int": b'{"seed": ' + b"9" * 5000 + b"}",
    "big-file": b'{"seed": 1' + b" " * (1 << 20) + b"}", "latin1": '{"dataset": "digité"}'.encode("latin-1"),
    "overflow": b'{"lam": 1e999}',
}
CONFIG_FIELDS = [  # JSON objects for --config (each refused)
    {"embed_dim": 1e9}, {"embed_dim": 1_000_000_000}, {"evals": 1e9}, {"evals": 1_000_000_000},
    {"devices": True}, {"devices": "4"}, {"activation": [0.5, 0.6]}, {"activation": ["a", "b"]},
    {"threat": "secret-subsampling"}, {"super_batch": 0}, {"max_delay": -1},
    {"max_delay": 1_000_000_000}, {"threads": 0}, {"threads": 100_000}, {"secret_seed": -1},
    {"secret_seed": 2 ** 64}, {"seed": 2 ** 70}, {"momentum": 1}, {"device_momentum": -0.1},
    {"server_update": "x"}, {"server_kind": "x"}, {"freeze": 3}, {"transcripts": "yes"},
    {"secure_noise": 1}, {"dataset": 5}, {"no_clip": True, "epsilon": 1.0}, {"epochs": 1e308},
    {"lam": 1e300}, {"batch_size": 1.5}, {"clip": "10"}, {"delta": 0}, {"epsilon": -1},
    {"accountant": None}, {"data_dir": 3},
]
BIGINT = 10 ** 400   # an integer beyond float range (issue 24: each raised OverflowError)
CONFIG_FIELDS += [{name: BIGINT} for name in ("clip", "epsilon", "delta", "head_share", "momentum",
                                               "sigma", "lr_device", "lr_server")]
CONFIG_FIELDS += [{"activation": [BIGINT, 0, 0, 0]}, {"epsilon": -BIGINT}, {"seed": BIGINT},
                  {"epochs": True}, {"lam": True}, {"devices": BIGINT}]   # the last: no --devices flag

DATA = {  # name -> (argv prefix, writer of {in}/NAME)
    "npz-nan-pixel": MNIST, "npz-label-10": MNIST, "npz-float-labels": MNIST, "npz-shape": MNIST,
    "npz-test-width": MNIST, "npz-truncated": MNIST, "npz-garbage": MNIST, "npz-object": MNIST,
    "npz-label-count": MNIST, "idx-truncated-gz": MNIST, "idx-not-gz": MNIST, "idx-header": MNIST,
    "idx-label-200": MNIST, "cifar-truncated": CIFAR, "cifar-float": CIFAR, "cifar-label-10": CIFAR,
    "cifar-not-dict": CIFAR, "cifar-label-count": CIFAR,
}

OUTS = [
    [*TRAIN[:-2], "--out", "{in}/file/run"], [*TRAIN[:-2], "--out", "{in}/file"],
    [*TRAIN[:-2], "--out", "{in}/full"], [*STUDY[:-2], "--out", "{in}/file/study"],
    [*STUDY[:-2], "--out", "{in}/full"],
    [*TRAIN[:-2], "--out", ""], [*TRAIN[:-2], "--out", "  "],   # issue 25 item 6: not ./runs
] + ([[*TRAIN[:-2], "--out", "/proc/privzv-fuzz/run"]] if sys.platform == "linux" else [])

ATTACK = [
    ["attack"], ["attack", "nope"], ["attack", "--json"], ["attack", "run"],
    ["attack", "run", "--attack", "label-inference"], ["attack", "run", "--run", "{in}/nope", "--attack", "x"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/nope"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/file"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/full"],
    ["attack", "run", "--attack", "nope", "--run", "{in}/full"],
    ["attack", "run", "--attack", "direct-label", "--run", "{in}/bad-run-json"],
    ["attack", "run", "--attack", "direct-label", "--run", "{in}/bad-run-config"],
    ["attack", "run", "--attack", "direct-label", "--run", "{in}/full"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/full", "--seed", "-1"],
    ["attack", "audit"], [*AUDIT], [*AUDIT, "--sigma", "0"], [*AUDIT, "--sigma", "1", "--epsilon", "1"],
    [*AUDIT, "--sigma", "nan"], [*AUDIT, "--sigma", "1", "--noise", "nope"],
    [*AUDIT, "--sigma", "1", "--dim", "1"], [*AUDIT, "--sigma", "1", "--dim", "1e8"],
    [*AUDIT, "--sigma", "1", "--noise", "vector", "--dim", "100000000"],
    [*AUDIT, "--sigma", "1", "--trials", "99"], [*AUDIT, "--sigma", "1", "--trials", "1e9"],
    [*AUDIT, "--sigma", "1", "--trials", "1000000000"], [*AUDIT, "--sigma", "1", "--alpha", "0"],
    [*AUDIT, "--sigma", "1", "--alpha", "1"], [*AUDIT, "--sigma", "1", "--steps", "1e11"],
    [*AUDIT, "--sigma", "1", "--steps", "100000000000"], [*AUDIT, "--sigma", "1", "--threat", "nope"],
    [*AUDIT, "--sigma", "1", "--batch-size", "601"], [*AUDIT, "--epsilon", "-1"],
    [*AUDIT, "--sigma", "1", "--seed", "x"],
    [*AUDIT, "--sigma", "1", "--noise", "vector", "--dim", "4096", "--steps", "100000"],
    ["attack", "canary-audit", "--method", "nope"], ["attack", "canary-audit", "--dataset", "nope"],
    ["attack", "canary-audit", "--canaries", "1"], ["attack", "canary-audit", "--canaries", "100000"],
    ["attack", "canary-audit", "--epsilon", "0"], ["attack", "canary-audit", "--epochs", "0"],
    ["attack", "canary-audit", "--epochs", "1e9"], ["attack", "canary-audit", "--delta", "2"],
    ["attack", "canary-audit", "--seed", "-3"],
    ["attack", "study"], [*STUDY, "--seeds", "0"], [*STUDY, "--seeds", "1000"], [*STUDY, "--epsilons"],
    [*STUDY, "--epsilons", "0"], [*STUDY, "--epsilons", "x"], [*STUDY, "--methods", "nope"],
    [*STUDY, "--epochs", "1e9"], [*STUDY, "--threat", "nope"], [*STUDY, "--dataset", "nope"],
    [*STUDY, "--epsilons", *["1"] * 51], [*STUDY, "--delta", "0"],
    ["demo", "--bogus"],
]

CASES = ([pytest.param(a, id="privzv " + " ".join(a)[:60]) for a in TOP]
         + [pytest.param([*TRAIN, *f], id="train " + " ".join(f)) for f in TRAIN_FLAGS]
         + [pytest.param([*TRAIN, "--config", f"{{in}}/{name}"], id=f"config {name}") for name in CONFIGS]
         + [pytest.param([*TRAIN[:5], *TRAIN[7:], "--config", f"{{in}}/field{i}.json"],
                         id=f"config {json.dumps(d)[:70]}")
            for i, d in enumerate(CONFIG_FIELDS[:-1])]
         + [pytest.param([*TRAIN[:3], *TRAIN[5:], "--config", f"{{in}}/field{len(CONFIG_FIELDS) - 1}.json"],
                         id="config devices bigint")]
         + [pytest.param([*argv, "--data-dir", f"{{in}}/{name}"], id=f"data {name}")
            for name, argv in DATA.items()]
         + [pytest.param(a, id=" ".join(a)[:70]) for a in OUTS]
         + [pytest.param(a, id=" ".join(a)[:80]) for a in ATTACK])


# --------------------------------------------------------------------------- the inputs
def _mnist_arrays(n_train=12, n_test=5):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (n_train, 28, 28)).astype(np.uint8), rng.integers(0, 10, n_train),
            rng.integers(0, 256, (n_test, 28, 28)).astype(np.uint8), rng.integers(0, 10, n_test)]


def _npz(folder: Path, change=lambda a: a, spoil=None):
    folder.mkdir()
    a = change(_mnist_arrays())
    np.savez(folder / "mnist.npz", **dict(zip(("x_train", "y_train", "x_test", "y_test"), a)))
    if spoil:
        spoil(folder / "mnist.npz")


def _idx(folder: Path, labels_plus=0, spoil=None):
    from privzv.training.data import MNIST_IDX_FILES

    folder.mkdir()
    arrays = _mnist_arrays()
    arrays[1] = arrays[1] + labels_plus
    for key, array in zip(MNIST_IDX_FILES, arrays):
        header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
        (folder / f"{MNIST_IDX_FILES[key][0]}.gz").write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))
    if spoil:
        spoil(folder / f"{MNIST_IDX_FILES['x_train'][0]}.gz")


def _cifar(folder: Path, bad):
    from privzv.training.data import CIFAR_FILES

    folder.mkdir(parents=True)
    for name in CIFAR_FILES:
        batch = {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 1, 2]}
        with open(folder / name, "wb") as f:
            pickle.dump(bad if name == "data_batch_2" and not callable(bad) else batch, f)
    if callable(bad):
        bad(folder / "data_batch_2")


def _set(a, i, value):
    a[i] = value
    return a


def _nan_pixel(a):
    a[0] = a[0].astype(np.float32)
    a[0][0, 0, 0] = np.nan
    return a


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("in")
    (root / "file").write_text("not a folder")
    (root / "full").mkdir()
    (root / "full" / "keep.txt").write_text("an earlier result")
    for name, content in CONFIGS.items():
        (root / name).write_bytes(content)
    (root / "dir-config").mkdir()
    for i, d in enumerate(CONFIG_FIELDS):
        (root / f"field{i}.json").write_text(json.dumps(d))
    (root / "bad-run-json").mkdir()
    (root / "bad-run-json" / "config.json").write_text("{not json")
    (root / "bad-run-config").mkdir()
    (root / "bad-run-config" / "config.json").write_text(json.dumps({"config": {"dataset": 7}}))
    truncate = lambda p: p.write_bytes(p.read_bytes()[:200])  # noqa: E731
    _npz(root / "npz-nan-pixel", _nan_pixel)
    _npz(root / "npz-label-10", lambda a: _set(a, 1, np.full(12, 10)))
    _npz(root / "npz-float-labels", lambda a: _set(a, 3, a[3] + 0.25))
    _npz(root / "npz-shape", lambda a: _set(a, 0, a[0].reshape(12, 784)))
    _npz(root / "npz-test-width", lambda a: _set(a, 2, a[2][:, :, :20]))
    _npz(root / "npz-label-count", lambda a: _set(a, 3, a[3][:4]))
    _npz(root / "npz-truncated", spoil=truncate)
    _npz(root / "npz-garbage", spoil=lambda p: p.write_bytes(b"PK\x03\x04garbage"))
    _npz(root / "npz-object", lambda a: _set(a, 0, np.array([{}] * 12, dtype=object)))
    _idx(root / "idx-truncated-gz", spoil=lambda p: p.write_bytes(p.read_bytes()[:-30]))
    _idx(root / "idx-not-gz", spoil=lambda p: p.write_bytes(b"plain bytes"))
    _idx(root / "idx-header", spoil=lambda p: p.write_bytes(gzip.compress(b"\x00\x00\x08\x03\x00")))
    _idx(root / "idx-label-200", labels_plus=200)
    _cifar(root / "cifar-truncated" / "cifar-10-batches-py", truncate)
    _cifar(root / "cifar-float" / "cifar-10-batches-py", {b"data": np.zeros((3, 3072)), b"labels": [0, 1, 2]})
    _cifar(root / "cifar-label-10" / "cifar-10-batches-py",
           {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 1, 10]})
    _cifar(root / "cifar-not-dict" / "cifar-10-batches-py", [1, 2, 3])
    _cifar(root / "cifar-label-count" / "cifar-10-batches-py",
           {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0]})
    return root


def _snapshot(folder: Path) -> list:
    return sorted((str(p.relative_to(folder)), p.stat().st_size if p.is_file() else -1)
                  for p in folder.rglob("*"))


def _expand(argv, inputs: Path, out: Path) -> list[str]:
    return [a.replace("{in}", str(inputs)).replace("{out}", str(out)) for a in argv]


def _one_line_refusal(rc: int, err: str) -> None:
    lines = err.splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].strip(), err
    assert "Traceback" not in err and ": error: " in lines[0]


# --------------------------------------------------------------------------- the tests
def test_there_are_at_least_150_cases():
    assert len(CASES) >= 150


@pytest.mark.parametrize("argv", CASES)
def test_bad_invocation_is_one_line_and_exit_2(argv, inputs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)          # a default runs/ folder would land here too
    before_in = _snapshot(inputs)
    rc = main(_expand(argv, inputs, out))
    captured = capsys.readouterr()
    _one_line_refusal(rc, captured.err)
    assert captured.out == ""
    assert _snapshot(out) == [], "something was left in the output folder"
    assert _snapshot(inputs) == before_in, "an input or an earlier result was changed"


@pytest.mark.parametrize("argv", [
    [], ["attack"], ["train", "--config", "{in}/binary", "--out", "{out}/run"],
    ["train", "--dataset", "mnist", "--data-dir", "{in}/npz-nan-pixel", "--devices", "7", "--out", "{out}/run"],
    ["attack", "audit", "--sigma", "1", "--delta", "1e-3", "--steps", "100000000000", "--dataset-size",
     "600", "--batch-size", "64", "--dim", "16", "--noise", "vector"],
], ids=["privzv", "privzv attack", "binary config", "nan pixel", "audit memory bomb"])
def test_real_executable(argv, inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    exe = Path(sys.executable).with_name("privzv")
    proc = subprocess.run([str(exe), *_expand(argv, inputs, out)], capture_output=True, text=True,
                          timeout=120, cwd=out, env={**os.environ, "PYTHONWARNINGS": "default"})
    _one_line_refusal(proc.returncode, proc.stderr)
    assert proc.stdout == "" and _snapshot(out) == []


# ------------------------------------------------ strict JSON and a diverging run (exit code 1)
def test_strict_json_has_no_nan_or_infinity_tokens():
    text = cliutil.dumps({"a": float("nan"), "b": [float("inf"), np.float32("-inf"), np.array([1.5])],
                          "c": Path("x"), "d": None})
    assert json.loads(text) == {"a": "nan", "b": ["inf", "-inf", [1.5]], "c": "x", "d": None}
    assert "NaN" not in text and "Infinity" not in text
    with pytest.raises(TypeError):
        cliutil.dumps({"x": object()})


def test_a_diverging_run_fails_with_exit_1_and_finishes_nothing(tmp_path, capsys):
    """Exit 1, one line; the run folder (committed at round 0 for crash safety) is left unfinished:
    no summary.json, and no NaN/Infinity token in any of its JSON files."""
    run = tmp_path / "out" / "run"
    rc = main(["train", "--dataset", "digits", "--devices", "2", "--epochs", "0.2", "--batch-size", "64",
               "--lr-device", "1000", "--lr-server", "1000", "--json", "--out", str(run)])
    captured = capsys.readouterr()
    assert rc == 1 and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "training diverged by round" in lines[0] and "Traceback" not in captured.err
    assert not (run / "summary.json").exists()
    documents = [p.read_text() for p in run.glob("*.json")]
    documents += [line for p in run.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert documents
    for text in documents:
        json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} in a run file"))


def test_divergence_check_names_the_party_with_non_finite_parameters(tiny_scheduler_for_fuzz):
    import torch

    from privzv.training import divergence
    from privzv.training.scheduler import Evaluation

    sched = tiny_scheduler_for_fuzz()
    fine = Evaluation(0, 0.5, 1.0, 0, 0)
    divergence.check(sched, fine)
    with pytest.raises(divergence.Diverged, match="test loss inf"):
        divergence.check(sched, Evaluation(0, 0.5, float("inf"), 0, 0))
    with torch.no_grad():
        next(sched.devices[1].model.parameters())[0] = float("nan")
    with pytest.raises(divergence.Diverged, match="non-finite parameters in device1"):
        divergence.check(sched, fine)


@pytest.fixture
def tiny_scheduler_for_fuzz():
    from privzv.training import data, run
    from privzv.training.config import TrainConfig

    def make():
        config = TrainConfig(dataset="breast-cancer", devices=2, batch_size=8, embed_dim=4, seed=0)
        return run.build(config, data.load("breast-cancer", 2), secret_seed=1)
    return make
