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
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privzv import cliutil
from privzv.cli import main

AUDIT = [
    "attack",
    "audit",
    "--delta",
    "1e-3",
    "--steps",
    "1000",
    "--dataset-size",
    "600",
    "--batch-size",
    "64",
    "--clip",
    "10",
]
ACCOUNT = [
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
    "--clip",
    "1",
]
CALIBRATE = [
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
]
TRAIN = ["train", "--dataset", "digits", "--devices", "2", "--epochs", "0.05", "--out", "{out}/run"]
MNIST = ["train", "--dataset", "mnist", "--devices", "7", "--epochs", "0.05", "--out", "{out}/run"]
CIFAR = ["train", "--dataset", "cifar10", "--devices", "4", "--epochs", "0.05", "--out", "{out}/run"]
STUDY = ["attack", "study", "--out", "{out}/study"]

# --------------------------------------------------------------------------- the cases
TOP = [
    [],
    ["nope"],
    ["--nope"],
    ["-x"],
    ["help"],
    ["convert"],
    ["convert", "--mu", "1"],
    ["convert", "--mu", "-1", "--delta", "1e-5"],
    ["convert", "--mu", "nan", "--delta", "1e-5"],
    ["convert", "--mu", "1", "--delta", "1"],
    ["convert", "--mu", "1", "--delta", "0"],
    ["convert", "--epsilon", "x", "--delta", "0.1"],
    ["convert", "--mu", "1", "--epsilon", "1", "--delta", "0.1"],
    ["convert", "--mu", "inf", "--delta", "0.1"],
    ["convert", "--epsilon", "-1", "--delta", "0.1"],
    ["convert", "--mu", "1", "--delta", "1e-5", "--bogus"],
    ["calibrate"],
    ["account"],
    [*CALIBRATE[:2], "0", *CALIBRATE[3:]],
    [*CALIBRATE[:2], "nan", *CALIBRATE[3:]],
    [*CALIBRATE, "--batch-size", "2000"],
    [*CALIBRATE, "--threat", "secret-subsampling"],
    [*ACCOUNT[:2], "0", *ACCOUNT[3:]],
    [*ACCOUNT[:2], "inf", *ACCOUNT[3:]],
    [*ACCOUNT, "--steps", "0"],
    [*ACCOUNT, "--steps", "1.5"],
    [*ACCOUNT, "--threat", "nope"],
    [*ACCOUNT, "--accountant", "nope"],
    [*ACCOUNT, "--neighbors", "nope"],
    [*ACCOUNT, "--devices", "0"],
    [*ACCOUNT, "--clip", "-1"],
    [*ACCOUNT, "--super-batch", "50"],
    [*ACCOUNT, "--delta", "2"],
    [*ACCOUNT, "--dataset-size", "x"],
]

TRAIN_FLAGS = [
    ["--dataset", "nope"],
    ["--method", "nope"],
    ["--devices", "0"],
    ["--devices", "-1"],
    ["--devices", "x"],
    ["--devices", "1.5"],
    ["--devices", "9"],
    ["--epochs", "0"],
    ["--epochs", "-1"],
    ["--epochs", "nan"],
    ["--epochs", "inf"],
    ["--epochs", "1e308"],
    ["--epochs", "x"],
    ["--batch-size", "0"],
    ["--batch-size", "1e9"],
    ["--batch-size", "100000"],
    ["--epsilon", "0"],
    ["--epsilon", "-1"],
    ["--epsilon", "nan"],
    ["--delta", "0"],
    ["--delta", "1"],
    ["--delta", "nan"],
    ["--threat", "nope"],
    ["--accountant", "nope"],
    ["--sigma", "-1"],
    ["--sigma", "nan"],
    ["--sigma", "inf"],
    ["--sigma", "1e300"],
    ["--clip", "0"],
    ["--clip", "1e300"],
    ["--lam", "0"],
    ["--lam", "1e300"],
    ["--lam", "nan"],
    ["--lam", "-0.1"],
    ["--freeze", "nope"],
    ["--lr-device", "-1"],
    ["--lr-device", "1e300"],
    ["--lr-server", "nan"],
    ["--lr-server", "1e10"],
    ["--seed", "-1"],
    ["--seed", "1.5"],
    ["--seed", "x"],
    ["--seed", "99999999999999999999999"],
    ["--foo"],
    ["--config", "{in}/nope.json"],
    ["--resume", "{in}/nope"],
    ["--resume", "{in}/file"],
    ["--data-dir", "{in}/nope", "--dataset", "mnist"],
    ["--dataset", "mnist"],
    ["--dataset", "cifar10", "--data-dir", "{in}/file"],
    ["--dataset", "breast-cancer", "--devices", "31"],
    ["--epsilon", "1", "--sigma", "0"],
    ["--config", "{in}/dir-config"],
] + ([["--config", "/dev/zero"]] if os.path.exists("/dev/zero") else [])

CONFIGS = {  # name -> file content (bytes) for --config {in}/NAME
    "binary": bytes(range(256)) * 4,
    "empty": b"",
    "list": b"[]",
    "null": b"null",
    "open": b"{",
    "nan-token": b'{"epsilon": NaN}',
    "inf-token": b'{"lam": Infinity}',
    "unknown": b'{"nope": 1}',
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "huge-int": b'{"seed": ' + b"9" * 5000 + b"}",
    "big-file": b'{"seed": 1' + b" " * (1 << 20) + b"}",
    "latin1": '{"dataset": "digité"}'.encode("latin-1"),
    "overflow": b'{"lam": 1e999}',
}
CONFIG_FIELDS = [  # JSON objects for --config (each refused)
    {"embed_dim": 1e9},
    {"embed_dim": 1_000_000_000},
    {"evals": 1e9},
    {"evals": 1_000_000_000},
    {"devices": True},
    {"devices": "4"},
    {"activation": [0.5, 0.6]},
    {"activation": ["a", "b"]},
    {"threat": "secret-subsampling"},
    {"super_batch": 0},
    {"max_delay": -1},
    {"max_delay": 1_000_000_000},
    {"threads": 0},
    {"threads": 100_000},
    {"secret_seed": -1},
    {"secret_seed": 2**64},
    {"seed": 2**70},
    {"momentum": 1},
    {"device_momentum": -0.1},
    {"server_update": "x"},
    {"server_kind": "x"},
    {"freeze": 3},
    {"transcripts": "yes"},
    {"secure_noise": 1},
    {"dataset": 5},
    {"no_clip": True, "epsilon": 1.0},
    {"epochs": 1e308},
    {"lam": 1e300},
    {"batch_size": 1.5},
    {"clip": "10"},
    {"delta": 0},
    {"epsilon": -1},
    {"accountant": None},
    {"data_dir": 3},
]
BIGINT = 10**400  # an integer beyond float range (issue 24: each raised OverflowError)
CONFIG_FIELDS += [
    {name: BIGINT}
    for name in ("clip", "epsilon", "delta", "head_share", "momentum", "sigma", "lr_device", "lr_server")
]
CONFIG_FIELDS += [
    {"activation": [BIGINT, 0, 0, 0]},
    {"epsilon": -BIGINT},
    {"seed": BIGINT},
    {"epochs": True},
    {"lam": True},
    {"devices": BIGINT},
]  # the last: no --devices flag

DATA = {  # name -> (argv prefix, writer of {in}/NAME)
    "npz-nan-pixel": MNIST,
    "npz-label-10": MNIST,
    "npz-float-labels": MNIST,
    "npz-shape": MNIST,
    "npz-test-width": MNIST,
    "npz-truncated": MNIST,
    "npz-garbage": MNIST,
    "npz-object": MNIST,
    "npz-label-count": MNIST,
    "idx-truncated-gz": MNIST,
    "idx-not-gz": MNIST,
    "idx-header": MNIST,
    "idx-label-200": MNIST,
    "cifar-truncated": CIFAR,
    "cifar-float": CIFAR,
    "cifar-label-10": CIFAR,
    "cifar-not-dict": CIFAR,
    "cifar-label-count": CIFAR,
}

OUTS = (
    [
        [*TRAIN[:-2], "--out", "{in}/file/run"],
        [*TRAIN[:-2], "--out", "{in}/file"],
        [*TRAIN[:-2], "--out", "{in}/full"],
        [*STUDY[:-2], "--out", "{in}/file/study"],
        [*STUDY[:-2], "--out", "{in}/full"],
        [*TRAIN[:-2], "--out", ""],
        [*TRAIN[:-2], "--out", "  "],  # issue 25 item 6: not ./runs
    ]
    + ([[*TRAIN[:-2], "--out", "/proc/privzv-fuzz/run"]] if sys.platform == "linux" else [])
)

ATTACK = [
    ["attack"],
    ["attack", "nope"],
    ["attack", "--json"],
    ["attack", "run"],
    ["attack", "run", "--attack", "label-inference"],
    ["attack", "run", "--run", "{in}/nope", "--attack", "x"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/nope"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/file"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/full"],
    ["attack", "run", "--attack", "nope", "--run", "{in}/full"],
    ["attack", "run", "--attack", "direct-label", "--run", "{in}/bad-run-json"],
    ["attack", "run", "--attack", "direct-label", "--run", "{in}/bad-run-config"],
    ["attack", "run", "--attack", "direct-label", "--run", "{in}/full"],
    ["attack", "run", "--attack", "label-inference", "--run", "{in}/full", "--seed", "-1"],
    ["attack", "audit"],
    [*AUDIT],
    [*AUDIT, "--sigma", "0"],
    [*AUDIT, "--sigma", "1", "--epsilon", "1"],
    [*AUDIT, "--sigma", "nan"],
    [*AUDIT, "--sigma", "1", "--noise", "nope"],
    [*AUDIT, "--sigma", "1", "--dim", "1"],
    [*AUDIT, "--sigma", "1", "--dim", "1e8"],
    [*AUDIT, "--sigma", "1", "--noise", "vector", "--dim", "100000000"],
    [*AUDIT, "--sigma", "1", "--trials", "99"],
    [*AUDIT, "--sigma", "1", "--trials", "1e9"],
    [*AUDIT, "--sigma", "1", "--trials", "1000000000"],
    [*AUDIT, "--sigma", "1", "--alpha", "0"],
    [*AUDIT, "--sigma", "1", "--alpha", "1"],
    [*AUDIT, "--sigma", "1", "--steps", "1e11"],
    [*AUDIT, "--sigma", "1", "--steps", "100000000000"],
    [*AUDIT, "--sigma", "1", "--threat", "nope"],
    [*AUDIT, "--sigma", "1", "--batch-size", "601"],
    [*AUDIT, "--epsilon", "-1"],
    [*AUDIT, "--sigma", "1", "--seed", "x"],
    [*AUDIT, "--sigma", "1", "--noise", "vector", "--dim", "4096", "--steps", "100000"],
    ["attack", "canary-audit", "--method", "nope"],
    ["attack", "canary-audit", "--dataset", "nope"],
    ["attack", "canary-audit", "--canaries", "1"],
    ["attack", "canary-audit", "--canaries", "100000"],
    ["attack", "canary-audit", "--epsilon", "0"],
    ["attack", "canary-audit", "--epochs", "0"],
    ["attack", "canary-audit", "--epochs", "1e9"],
    ["attack", "canary-audit", "--delta", "2"],
    ["attack", "canary-audit", "--seed", "-3"],
    ["attack", "study"],
    [*STUDY, "--seeds", "0"],
    [*STUDY, "--seeds", "1000"],
    [*STUDY, "--epsilons"],
    [*STUDY, "--epsilons", "0"],
    [*STUDY, "--epsilons", "x"],
    [*STUDY, "--methods", "nope"],
    [*STUDY, "--epochs", "1e9"],
    [*STUDY, "--threat", "nope"],
    [*STUDY, "--dataset", "nope"],
    [*STUDY, "--epsilons", *["1"] * 51],
    [*STUDY, "--delta", "0"],
    ["demo", "--bogus"],
    ["demo", "--trials", "1000000000000"],  # a time bomb: capped, the cap named
]

CASES = (
    [pytest.param(a, id="privzv " + " ".join(a)[:60]) for a in TOP]
    + [pytest.param([*TRAIN, *f], id="train " + " ".join(f)) for f in TRAIN_FLAGS]
    + [pytest.param([*TRAIN, "--config", f"{{in}}/{name}"], id=f"config {name}") for name in CONFIGS]
    + [
        pytest.param(
            [*TRAIN[:5], *TRAIN[7:], "--config", f"{{in}}/field{i}.json"], id=f"config {json.dumps(d)[:70]}"
        )
        for i, d in enumerate(CONFIG_FIELDS[:-1])
    ]
    + [
        pytest.param(
            [*TRAIN[:3], *TRAIN[5:], "--config", f"{{in}}/field{len(CONFIG_FIELDS) - 1}.json"],
            id="config devices bigint",
        )
    ]
    + [
        pytest.param([*argv, "--data-dir", f"{{in}}/{name}"], id=f"data {name}")
        for name, argv in DATA.items()
    ]
    + [pytest.param(a, id=" ".join(a)[:70]) for a in OUTS]
    + [pytest.param(a, id=" ".join(a)[:80]) for a in ATTACK]
)


# --------------------------------------------------------------------------- the inputs
def _mnist_arrays(n_train=12, n_test=5):
    rng = np.random.default_rng(0)
    return [
        rng.integers(0, 256, (n_train, 28, 28)).astype(np.uint8),
        rng.integers(0, 10, n_train),
        rng.integers(0, 256, (n_test, 28, 28)).astype(np.uint8),
        rng.integers(0, 10, n_test),
    ]


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
        (folder / f"{MNIST_IDX_FILES[key][0]}.gz").write_bytes(
            gzip.compress(header + array.astype(np.uint8).tobytes())
        )
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
    _cifar(
        root / "cifar-label-10" / "cifar-10-batches-py",
        {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 1, 10]},
    )
    _cifar(root / "cifar-not-dict" / "cifar-10-batches-py", [1, 2, 3])
    _cifar(
        root / "cifar-label-count" / "cifar-10-batches-py",
        {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0]},
    )
    return root


def _snapshot(folder: Path) -> list:
    return sorted(
        (str(p.relative_to(folder)), p.stat().st_size if p.is_file() else -1) for p in folder.rglob("*")
    )


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
    monkeypatch.chdir(out)  # a default runs/ folder would land here too
    before_in = _snapshot(inputs)
    rc = main(_expand(argv, inputs, out))
    captured = capsys.readouterr()
    _one_line_refusal(rc, captured.err)
    assert captured.out == ""
    assert _snapshot(out) == [], "something was left in the output folder"
    assert _snapshot(inputs) == before_in, "an input or an earlier result was changed"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["attack"],
        ["train", "--config", "{in}/binary", "--out", "{out}/run"],
        [
            "train",
            "--dataset",
            "mnist",
            "--data-dir",
            "{in}/npz-nan-pixel",
            "--devices",
            "7",
            "--out",
            "{out}/run",
        ],
        [
            "attack",
            "audit",
            "--sigma",
            "1",
            "--delta",
            "1e-3",
            "--steps",
            "100000000000",
            "--dataset-size",
            "600",
            "--batch-size",
            "64",
            "--dim",
            "16",
            "--noise",
            "vector",
        ],
    ],
    ids=["privzv", "privzv attack", "binary config", "nan pixel", "audit memory bomb"],
)
def test_real_executable(argv, inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    exe = Path(sys.executable).with_name("privzv")
    proc = subprocess.run(
        [str(exe), *_expand(argv, inputs, out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=out,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    _one_line_refusal(proc.returncode, proc.stderr)
    assert proc.stdout == "" and _snapshot(out) == []


# ------------------------------------------------ strict JSON and a diverging run (exit code 1)
def test_strict_json_has_no_nan_or_infinity_tokens():
    text = cliutil.dumps(
        {
            "a": float("nan"),
            "b": [float("inf"), np.float32("-inf"), np.array([1.5])],
            "c": Path("x"),
            "d": None,
        }
    )
    assert json.loads(text) == {"a": "nan", "b": ["inf", "-inf", [1.5]], "c": "x", "d": None}
    assert "NaN" not in text and "Infinity" not in text
    with pytest.raises(TypeError):
        cliutil.dumps({"x": object()})


def test_a_diverging_run_fails_with_exit_1_and_leaves_a_complete_folder(tmp_path, capsys):
    """Exit 1, one line; the run folder (committed at round 0 for crash safety) is finished with a
    summary that says it diverged (issue 22 item 5), no NaN/Infinity token in any of its JSON
    files; --resume refuses it saying it diverged, and the same --out advises --overwrite, not
    --resume."""
    run = tmp_path / "out" / "run"
    argv = [
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
        "--no-transcripts",
        "--json",
        "--out",
        str(run),
    ]
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 1 and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "training diverged by round" in lines[0] and "Traceback" not in captured.err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "diverged" and "training diverged by round" in summary["failure"]
    assert summary["curve"] and all(np.isfinite(row["test_loss"]) for row in summary["curve"])
    documents = [p.read_text() for p in run.glob("*.json")]
    documents += [line for p in run.glob("*.jsonl") for line in p.read_text().splitlines()]
    for text in documents:
        json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} in a run file"))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "diverged at round" in err and "cannot be resumed" in err and len(err.splitlines()) == 1
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "diverged" in err and "--overwrite" in err and "--resume" not in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


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


# ------------------------------ issue 24 item 1 / issue 22 item 1: the validation layer's CLI side
BIG = str(10**70)
ACC_NO_CLIP = ["account", "--delta", "1e-5", "--steps", "100", "--dataset-size", "1000", "--batch-size", "10"]
CAL_NO_CLIP = [
    "calibrate",
    "--epsilon",
    "1",
    "--delta",
    "1e-5",
    "--dataset-size",
    "1000",
    "--batch-size",
    "10",
]
OPACUS = [
    "calibrate",
    "--epsilon",
    "1",
    "--delta",
    "1e-5",
    "--threat",
    "eavesdropper",
    "--neighbors",
    "add-remove",
]
VALIDATION = {
    "integers beyond float range or a cap": [
        [*CALIBRATE, "--steps", str(10**60)],
        [*CALIBRATE, "--devices", BIG],
        [*CALIBRATE, "--dataset-size", BIG],
        [*CALIBRATE, "--batch-size", BIG],
        [*ACCOUNT, "--steps", BIG],
        [*ACCOUNT, "--devices", BIG],
        [*ACCOUNT, "--head-window", BIG, "--head-clip", "1"],
        [*CALIBRATE, "--threat", "secret-subsampling", "--super-batch", BIG],
        [*ACCOUNT, "--steps", str(10**16)],
        [*CALIBRATE, "--steps", str(10**16)],
        [*AUDIT, "--sigma", "1", "--devices", BIG],
    ],
    "subnormal or overflowing derived values": [
        [*CALIBRATE, "--clip", "5e-324"],
        [*ACCOUNT, "--clip", "5e-324"],
        [*CALIBRATE, "--head-clip", "5e-324"],
        [*ACCOUNT, "--head-clip", "5e-324"],
        [*ACCOUNT[:2], "5e-324", *ACCOUNT[3:]],
        [*ACCOUNT[:2], "1e308", *ACCOUNT[3:]],
        [*ACCOUNT, "--clip", "1e308"],
        [*CALIBRATE, "--clip", "1e308"],
        [*ACC_NO_CLIP, "--noise-multiplier", "5e-324"],
        [*ACC_NO_CLIP, "--noise-multiplier", "1e-200"],
        [*AUDIT, "--sigma", "5e-324"],
        [*AUDIT, "--sigma", "1", "--clip", "5e-324"],
    ],
    "memory or time caps": [
        [*CALIBRATE, "--devices", "1000000000"],
        [*ACCOUNT, "--devices", "1000000000"],
        [*AUDIT, "--sigma", "1", "--devices", "1000000000"],
        [*CALIBRATE, "--steps", "1000000000000", "--head-clip", "1", "--head-window", "1"],
        [*ACCOUNT, "--steps", "1000000000000", "--head-clip", "1", "--head-window", "1"],
        [*OPACUS, "--epochs", "1e300", "--sample-rate", "1e-300"],
    ],
    "one API shape: the question's flags": [
        [*OPACUS[:5], "--steps", "100", "--sample-rate", "0.01"],
        [*OPACUS, "--steps", "100", "--sample-rate", "0.01", "--all"],
        [*OPACUS, "--steps", "100", "--sample-rate", "0.01", "--dataset-size", "1000"],
        [*OPACUS, "--steps", "100", "--epochs", "2", "--sample-rate", "0.01"],
        [*OPACUS, "--sample-rate", "0.01"],
        [*OPACUS, "--steps", "100"],
        [*OPACUS, "--steps", "100", "--sample-rate", "0"],
        [*OPACUS, "--steps", "100", "--sample-rate", "1.5"],
        [*OPACUS, "--steps", "100", "--sample-rate", "nan"],
        [*OPACUS, "--steps", "100", "--sample-rate", "x"],
        [*OPACUS, "--epochs", "0", "--sample-rate", "0.01"],
        [*OPACUS, "--epochs", "-1", "--sample-rate", "0.01"],
        [*OPACUS, "--epochs", "nan", "--sample-rate", "0.01"],
        [*OPACUS, "--epochs", "inf", "--sample-rate", "0.01"],
        [*CAL_NO_CLIP, "--steps", "100", "--epochs", "1"],
        [*CAL_NO_CLIP],
        [*ACC_NO_CLIP, "--sigma", "1"],
        [*ACC_NO_CLIP, "--sigma", "1", "--clip", "1", "--noise-multiplier", "1"],
        [*ACC_NO_CLIP, "--noise-multiplier", "0"],
        [*ACC_NO_CLIP, "--noise-multiplier", "-1"],
        [*ACC_NO_CLIP, "--noise-multiplier", "nan"],
        [*ACC_NO_CLIP, "--noise-multiplier", "inf"],
        [*ACC_NO_CLIP],
        [*ACC_NO_CLIP, "--noise-multiplier", "1", "--accountant", "toy"],
        ["calibrate", "--version"],
    ],
}
VALIDATION_CASES = [
    pytest.param(argv, id=f"{group}: {' '.join(argv)[:60]}")
    for group, cases in VALIDATION.items()
    for argv in cases
]


def test_the_validation_classes_have_their_cases():
    assert {g: len(c) for g, c in VALIDATION.items()} == {
        "integers beyond float range or a cap": 11,
        "subnormal or overflowing derived values": 12,
        "memory or time caps": 6,
        "one API shape: the question's flags": 25,
    }


@pytest.mark.parametrize("argv", VALIDATION_CASES)
def test_validation_refuses_in_one_line(argv, inputs, tmp_path, monkeypatch, capsys):
    test_bad_invocation_is_one_line_and_exit_2(argv, inputs, tmp_path, monkeypatch, capsys)


# ====================================================================== issue 24: run folders
# Groups of their own: corrupt folders given to --resume, output failures, special files. A
# refused --resume leaves the folder byte for byte as it was (and no lock beside it).
RESUME_FLAGS = [
    "--dataset",
    "digits",
    "--devices",
    "2",
    "--epochs",
    "0.05",
    "--sigma",
    "1",
    "--epsilon",
    "50",
    "--seed",
    "1",
    "--secret-seed",
    "3",
    "--checkpoint-every",
    "2",
]


def _journal_edit(change):
    """Edit the journal's lines (a list of dicts; the header first) with ``change``."""

    def edit(out):
        path = out / "private" / "ledger.journal"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        change(lines)
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))

    return edit


def _first(kind, key, value):
    """Set ``key`` of the first journal line of ``kind`` (its naming key) to ``value``
    (``DELETE``: remove it)."""

    def change(lines):
        line = next(x for x in lines[1:] if kind in x)
        if value is DELETE:
            del line[key]
        else:
            line[key] = value

    return _journal_edit(change)


DELETE = object()


def _checkpoint_edit(change):
    """Re-save checkpoint.pt after ``change(ckpt)`` (a foreign or older writer's checkpoint)."""

    def edit(out):
        import torch

        ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
        change(ckpt)
        torch.save(ckpt, out / "checkpoint.pt")

    return edit


def _json_edit(name, key, value):
    def edit(out):
        obj = json.loads((out / name).read_text())
        obj[key] = value
        (out / name).write_text(json.dumps(obj))

    return edit


def _same_size_garbage(name, at=0):
    """Overwrite bytes of ``name`` from ``at`` with others of the same length (size unchanged)."""

    def edit(out):
        (path,) = out.glob(name)
        data = bytearray(path.read_bytes())
        for i in range(at, min(len(data), at + 64)):
            data[i] ^= 0x5A
        path.write_bytes(bytes(data))

    return edit


def _replace(name, content: bytes):
    def edit(out):
        (path,) = out.glob(name)
        path.write_bytes(content)

    return edit


def _remove(name):
    def edit(out):
        (path,) = out.glob(name)
        path.unlink()

    return edit


CORRUPT = {  # name -> edit of a copy of a finished private run; each --resume is refused
    "journal marker without round": _first("checkpoint", "round", DELETE),
    "journal marker round a string": _first("checkpoint", "round", "2"),
    "journal marker round negative": _first("checkpoint", "round", -1),
    "journal marker round a bool": _first("checkpoint", "round", True),
    "journal marker id not an id": _first("checkpoint", "checkpoint", 7),
    "journal releases a float": _first("checkpoint", "releases", 2.0),
    "journal float ids": _first("ids", "ids", [0.5, 1.0, 2.0]),
    "journal ids as floats": _journal_edit(
        lambda lines: next(x for x in lines if "ids" in x).update(
            ids=[float(i) for i in next(x for x in lines if "ids" in x)["ids"]]
        )
    ),
    "journal bool ids": _first("ids", "ids", [True, False]),
    "journal bigint id": _first("ids", "ids", [10**30]),
    "journal nested ids": _first("ids", "ids", [[1, 2], [3, 4]]),
    "journal ids a string": _first("ids", "ids", "0,1,2"),
    "journal device a string": _first("ids", "device", "0"),
    "journal device a bool": _first("ids", "device", True),
    "journal device out of range": _first("ids", "device", 9),
    "journal line a list": _journal_edit(lambda lines: lines.insert(2, [1, 2])),
    "journal line null": _journal_edit(lambda lines: lines.insert(2, None)),
    "journal line of no kind": _journal_edit(lambda lines: lines.insert(2, {"what": 1})),
    "journal line of two kinds": _journal_edit(lambda lines: lines[2].update(checkpoint="x")),
    "journal resume replayed a string": _journal_edit(
        lambda lines: lines.append(
            {"resume": lines[-1]["checkpoint"], "round": 4, "discarded": 0, "replayed": "yes"}
        )
    ),
    "journal header other format": _journal_edit(lambda lines: lines[0].update(format=2)),
    "journal not UTF-8": _replace("private/ledger.journal", b"\xff\xfe\n"),
    "journal empty": _replace("private/ledger.journal", b""),
    "checkpoint without transcripts": _checkpoint_edit(lambda c: c.pop("transcripts")),
    "checkpoint releases a string": _checkpoint_edit(lambda c: c.update(releases="4")),
    "checkpoint releases negative": _checkpoint_edit(lambda c: c.update(releases=-1)),
    "checkpoint round a string": _checkpoint_edit(lambda c: c.update(round="4")),
    "checkpoint round a float": _checkpoint_edit(lambda c: c.update(round=4.0)),
    "checkpoint metrics a string": _checkpoint_edit(lambda c: c.update(metrics="x")),
    "checkpoint parties of ints": _checkpoint_edit(lambda c: c.update(parties=[0, 1])),
    "checkpoint transcripts a list": _checkpoint_edit(lambda c: c.update(transcripts=[1])),
    "checkpoint transcript sizes strings": _checkpoint_edit(
        lambda c: c["transcripts"]["server"].update(public=["1", "2"])
    ),
    "checkpoint without id": _checkpoint_edit(lambda c: c.pop("id")),
    "checkpoint state a list": _checkpoint_edit(lambda c: c.update(state=[])),
    "checkpoint truncated": lambda out: (out / "checkpoint.pt").write_bytes(
        (out / "checkpoint.pt").read_bytes()[:100]
    ),
    "checkpoint garbage": _replace("checkpoint.pt", b"PK\x03\x04" + b"\x00" * 300),
    "checkpoint same-size garbage": _same_size_garbage("checkpoint.pt", 2000),
    "checkpoint empty": _replace("checkpoint.pt", b""),
    "server state same-size garbage": _same_size_garbage("private/server/checkpoint-*.pt", 1500),
    "device state truncated": lambda out: next(out.glob("private/device0/checkpoint-*.pt")).write_bytes(
        b"PK"
    ),
    "device state missing": _remove("private/device1/checkpoint-*.pt"),
    "secret seed a bigint": _json_edit("private/secrets.json", "secret_seed", 10**30),
    "secret seed 2^63": _json_edit("private/secrets.json", "secret_seed", 2**63),
    "secret seed negative": _json_edit("private/secrets.json", "secret_seed", -1),
    "secret seed a bool": _json_edit("private/secrets.json", "secret_seed", True),
    "secret seed a float": _json_edit("private/secrets.json", "secret_seed", 3.0),
    "secret seed changed": _json_edit("private/secrets.json", "secret_seed", 4),
    "secrets garbage": _replace("private/secrets.json", b"\x00{"),
    "transcript same-size garbage (values)": _same_size_garbage("transcripts/device0.bin", 100),
    "transcript same-size garbage (index)": _same_size_garbage("transcripts/server.jsonl", 300),
    "transcript zeroed values": lambda out: (out / "transcripts" / "server.bin").write_bytes(
        bytes(len((out / "transcripts" / "server.bin").read_bytes()))
    ),
    "transcript swapped between devices": lambda out: (out / "transcripts" / "device0.bin").write_bytes(
        (out / "transcripts" / "device1.bin").read_bytes()[::-1]
    ),
    "manifest missing": _remove("private/manifest-*.json"),
    "manifest garbage": _replace("private/manifest-*.json", b"{"),
    "manifest a list": _replace("private/manifest-*.json", b"[]"),
    "manifest digest changed": lambda out: _json_edit(
        next(out.glob("private/manifest-*.json")).relative_to(out), "files", {}
    )(out),
}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished private run with transcripts (checkpoints every 2 rounds)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", *RESUME_FLAGS, "--json", "--out", str(out)]) == 0
    return out


def _copy_run(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", list(CORRUPT))
def test_a_corrupt_run_folder_is_refused_by_resume(name, finished_run, tmp_path, capsys):
    """One line naming a file of the folder, exit 2, nothing written (issue 24 item 2)."""
    out = _copy_run(finished_run, tmp_path)
    CORRUPT[name](out)
    before = _files(out)
    capsys.readouterr()
    rc = main(["train", "--resume", str(out)])
    captured = capsys.readouterr()
    _one_line_refusal(rc, captured.err)
    assert any(
        word in captured.err
        for word in (
            "ledger.journal",
            "checkpoint",
            "secrets.json",
            "transcripts/",
            "manifest",
            "ledger.json",
        )
    ), captured.err
    assert _files(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_the_intact_copy_resumes(finished_run, tmp_path, capsys):
    """The folder the corruptions start from is itself resumable (so each refusal is the edit's)."""
    out = _copy_run(finished_run, tmp_path)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--json"]) == 0


# ------------------------------------------------------------------------------ special files
def _special(kind: str, where: Path) -> None:
    """Make ``where`` (replacing a file) a FIFO, a socket, or a symbolic link to a FIFO."""
    import socket

    where.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(where)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(where))
        sock.close()
    else:
        os.mkfifo(where.with_name(where.name + ".fifo"))
        where.symlink_to(where.name + ".fifo")


SPECIAL_CONFIGS = ["fifo", "socket", "link"]
SPECIAL_RUN_FILES = [
    "config.json",
    "checkpoint.pt",
    "private/ledger.json",
    "private/ledger.journal",
    "private/secrets.json",
    "metrics.jsonl",
    "transcripts/server.bin",
    "transcripts/device1.jsonl",
]


@pytest.fixture(scope="module")
def special_inputs(inputs):
    """``inputs`` with special-fifo, special-socket, special-link (to a FIFO) and fifo-run/, a run
    folder whose config.json is a FIFO."""
    for kind in SPECIAL_CONFIGS:
        _special(kind, inputs / f"special-{kind}")
    (inputs / "fifo-run").mkdir()
    _special("fifo", inputs / "fifo-run" / "config.json")
    return inputs


@pytest.fixture
def _no_hang():
    """A FIFO opened for reading would block: fail after 60 s instead of hanging the suite."""
    import signal

    def hang(*_):
        raise AssertionError("hung on a special file")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    "argv",
    [
        *[
            pytest.param([*TRAIN, "--config", f"{{in}}/special-{k}"], id=f"train --config {k}")
            for k in SPECIAL_CONFIGS
        ],
        pytest.param([*TRAIN, "--config", "/dev/null"], id="train --config /dev/null"),
        pytest.param([*TRAIN[:-2], "--out", "/dev/null"], id="train --out /dev/null"),
        pytest.param([*TRAIN[:-2], "--out", "/dev/null/run"], id="train --out /dev/null/run"),
        pytest.param([*TRAIN[:-2], "--out", "{in}/special-fifo"], id="train --out a fifo"),
        pytest.param(["train", "--resume", "{in}/special-fifo"], id="train --resume a fifo"),
        pytest.param(
            ["attack", "run", "--attack", "direct-label", "--run", "{in}/fifo-run"],
            id="attack run: config.json a fifo",
        ),
    ],
)
def test_special_files_are_refused_without_opening_them(
    argv, special_inputs, tmp_path, monkeypatch, capsys, _no_hang
):
    inputs = special_inputs
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    rc = main(_expand(argv, inputs, out))
    captured = capsys.readouterr()
    _one_line_refusal(rc, captured.err)
    assert _snapshot(out) == []


@pytest.mark.parametrize("name", SPECIAL_RUN_FILES)
def test_a_special_file_in_a_run_folder_is_refused_by_resume(name, finished_run, tmp_path, capsys, _no_hang):
    out = _copy_run(finished_run, tmp_path)
    _special("fifo", out / name)
    capsys.readouterr()
    rc = main(["train", "--resume", str(out)])
    _one_line_refusal(rc, capsys.readouterr().err)


# ------------------------------------------------------------------------------ output failures
OUTPUT_PATHS = {  # --out / --resume paths no folder can have, made in {in}
    "a symlink loop": "loop/run",
    "the loop itself": "loop",
    "a component too long": "a" * 300 + "/run",
    "a path too long": "/".join(["d" * 200] * 25),
    "under /proc": "/proc/self/privzv/run",
    "under /sys": "/sys/privzv-fuzz/run",
}


@pytest.mark.parametrize("flag", ["--out", "--resume"])
@pytest.mark.parametrize("what", list(OUTPUT_PATHS))
def test_an_out_no_folder_can_have_is_one_line(flag, what, inputs, tmp_path, monkeypatch, capsys):
    if not (inputs / "loop").is_symlink():
        (inputs / "loop").symlink_to("loop")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    path = OUTPUT_PATHS[what]
    path = path if path.startswith("/") else str(inputs / path)
    argv = [*TRAIN[:-2], "--out", path] if flag == "--out" else ["train", "--resume", path]
    before = _snapshot(inputs)
    rc = main(argv)
    _one_line_refusal(rc, capsys.readouterr().err)
    assert _snapshot(out) == [] and _snapshot(inputs) == before


COMMANDS_OUT = [
    ["convert", "--mu", "1", "--delta", "1e-5"],
    ["convert", "--mu", "1", "--delta", "1e-5", "--json"],
    [*ACCOUNT],
    [*CALIBRATE],
    [*ACCOUNT, "--json"],
]


@pytest.mark.parametrize("argv", COMMANDS_OUT, ids=[" ".join(a)[:40] for a in COMMANDS_OUT])
def test_a_full_stdout_is_one_line_and_exit_1(argv, tmp_path):
    """``> /dev/full``: the output cannot be written; one stderr line, exit 1 (not a traceback)."""
    exe = Path(sys.executable).with_name("privzv")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [str(exe), *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path
        )
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "stdout" in lines[0] and "No space left" in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "argv",
    [["convert", "--mu", "1", "--delta", "1e-5"], [*TRAIN[:-2], "--out", "{out}/run"]],
    ids=["convert", "train"],
)
def test_a_closed_stdout_is_refused_before_anything_runs(argv, inputs, tmp_path):
    exe = Path(sys.executable).with_name("privzv")
    proc = subprocess.run(
        [str(exe), *_expand(argv, inputs, tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        cwd=tmp_path,
        preexec_fn=lambda: os.close(1),
    )
    _one_line_refusal(proc.returncode, proc.stderr)
    assert "stdout is closed" in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "argv", [["convert", "--mu", "1", "--delta", "1e-5"], [*TRAIN[:-2]]], ids=["convert", "train"]
)
def test_a_deleted_working_directory_is_one_line(argv, tmp_path):
    """Not torch's oneMKL fatal error at import."""
    gone = tmp_path / "gone"
    gone.mkdir()
    exe = Path(sys.executable).with_name("privzv")
    proc = subprocess.run(
        ["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone), str(exe), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    _one_line_refusal(proc.returncode, proc.stderr)
    assert "working directory" in proc.stderr and proc.stdout == ""


# ------------------------------------------------ corrupt run folders read by attacks (issue 24, item 2)
def _rewrite_line(index: int, change):
    """Spoil line ``index`` of device0's transcript index (JSON lines) with ``change(line) -> line``."""

    def spoil(run: Path) -> None:
        path = run / "transcripts" / "device0.jsonl"
        lines = path.read_bytes().split(b"\n")
        lines[index] = change(lines[index])
        path.write_bytes(b"\n".join(lines))

    return spoil


def _entry_field(change):
    """Spoil device0's first uplink entry's first field spec [name, dtype, shape, offset]."""

    def edit(line: bytes) -> bytes:
        entry = json.loads(line)
        entry[4][0] = change(entry[4][0])
        return json.dumps(entry).encode()

    return _rewrite_line(3, edit)  # line 3: the first "sent" entry (after batch and seed notes)


def _truncate(path: str, keep: int):
    return lambda run: (run / path).write_bytes((run / path).read_bytes()[:keep])


CORRUPT_TRANSCRIPTS = {
    "garbage line": _rewrite_line(2, lambda line: b"garbage{"),
    "missing bin": lambda run: (run / "transcripts" / "device0.bin").unlink(),
    "non-utf8 bytes": _rewrite_line(2, lambda line: b"\xff\xfe\x80 not text"),
    "list header": _rewrite_line(0, lambda line: b"[]"),
    "object dtype": _entry_field(lambda f: [f[0], "|O", f[2], f[3]]),
    "negative shape": _entry_field(lambda f: [f[0], f[1], [-1, 10], f[3]]),
    "bad dtype": _entry_field(lambda f: [f[0], "not-a-dtype", f[2], f[3]]),
    "huge shape": _entry_field(lambda f: [f[0], f[1], [2**62, 2**62], f[3]]),
    "entry not a list": _rewrite_line(3, lambda line: b'{"round": 0}'),
    "bin is a folder": lambda run: (
        (run / "transcripts" / "device0.bin").unlink(),
        (run / "transcripts" / "device0.bin").mkdir(),
    ),
}


def _edit_checkpoint(run: Path, change) -> None:
    import torch

    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    change(ckpt)
    torch.save(ckpt, run / "checkpoint.pt")


CORRUPT_CHECKPOINTS = {
    "garbage checkpoint": lambda run: (run / "checkpoint.pt").write_bytes(b"garbage, not torch"),
    "truncated checkpoint": _truncate("checkpoint.pt", 200),
    "garbage device checkpoints": lambda run: [
        p.write_bytes(b"garbage") for p in (run / "private").glob("device*/*.pt")
    ],
    "state emptied": lambda run: _edit_checkpoint(run, lambda c: c.update(state={})),
}
CORRUPT_SUMMARIES = {  # attack audit --run reads the run's public summary.json
    "summary missing": lambda run: (run / "summary.json").unlink(),
    "summary garbage": lambda run: (run / "summary.json").write_bytes(b"\xff{not json"),
    "summary a list": lambda run: (run / "summary.json").write_text("[]"),
    "summary sigma text": lambda run: (run / "summary.json").write_text(
        json.dumps({"sigma": "1", "rounds_planned": 9})
    ),
    "summary rounds float": lambda run: (run / "summary.json").write_text(
        json.dumps({"sigma": 1.0, "rounds_planned": 9.5})
    ),
}
RUN_CASES = (
    [pytest.param("direct-label", s, id=f"direct-label {n}") for n, s in CORRUPT_TRANSCRIPTS.items()]
    + [
        pytest.param(a, s, id=f"{a} {n}")
        for n, s in CORRUPT_CHECKPOINTS.items()
        for a in ("membership", "model-completion", "feature-inversion")
    ]
    + [pytest.param("audit", s, id=f"audit --run {n}") for n, s in CORRUPT_SUMMARIES.items()]
)


@pytest.fixture(scope="module")
def summing_run(tmp_path_factory) -> Path:
    """A short DPZV run with a summing server (direct-label applies), transcripts and checkpoint."""
    run = tmp_path_factory.mktemp("runs") / "run"
    rc = main(
        [
            "train",
            "--dataset",
            "digits",
            "--devices",
            "2",
            "--epochs",
            "0.1",
            "--server-kind",
            "sum",
            "--embed-dim",
            "10",
            "--json",
            "--out",
            str(run),
        ]
    )
    assert rc == 0
    return run


@pytest.mark.parametrize("attack,spoil", RUN_CASES)
def test_attack_on_a_corrupt_run_is_one_line_naming_the_file(attack, spoil, summing_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(summing_run, run)
    spoil(run)
    capsys.readouterr()
    argv = (
        ["audit", "--run", str(run)] if attack == "audit" else ["run", "--attack", attack, "--run", str(run)]
    )
    rc = main(["attack", *argv])
    captured = capsys.readouterr()
    _one_line_refusal(rc, captured.err)
    assert captured.out == ""
    assert any(
        name in captured.err for name in ("device0.jsonl", "device0.bin", "checkpoint", "summary.json")
    )
