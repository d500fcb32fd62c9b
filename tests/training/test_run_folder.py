"""The run folder: secrets stay in private/, runs survive SIGKILL, resume refuses tampered folders."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import random
import shutil
import signal
import stat
import time

import numpy as np
import pytest
import torch

from privzv.cli import main
from privzv.training import run, run_folder, seeds, transcript
from privzv.training.config import TrainConfig
from privzv.training.noise import KeyedNoise

CLIP, SIGMA = 0.1, 1.0
PRIVATE_RUN = TrainConfig(
    dataset="digits",
    devices=2,
    epochs=0.3,
    batch_size=64,
    evals=2,
    seed=5,
    clip=CLIP,
    sigma=SIGMA,
    epsilon=50.0,
    head_sampling="batch",
)  # _denoised replays the pooled head's draws


def _one_line_exit_2(capsys, argv, *words):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture(scope="module")
def private_run(tmp_path_factory):
    """A finished private DPZV run (OS-entropy secret seed), checkpointed every 4 rounds."""
    out = tmp_path_factory.mktemp("runs") / "run"
    summary = run.train(PRIVATE_RUN, out, checkpoint_every=4)
    return out, summary


def _copy(private_run, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(private_run[0], out)
    return out


def _public_files(out):
    return [p for p in out.rglob("*") if p.is_file() and run_folder.PRIVATE not in p.relative_to(out).parts]


# ------------------------------------------------------------------------------ secrets boundary
def test_public_files_hold_no_secret_seed_and_no_generator_state(private_run):
    out, _ = private_run
    secret = json.loads((out / "private" / "secrets.json").read_text())
    assert secret["source"] == "os-entropy" and isinstance(secret["secret_seed"], int)
    s = secret["secret_seed"]
    server = KeyedNoise(seeds.key(s, "server"))
    keys = [
        seeds.key(s, "server"),
        seeds.key(s, "device", 0),
        seeds.key(s, "device", 1),
        *(server.stream(name)._key for name in ("downlink", "head", "sampling", "keep")),
    ]
    needles = [str(s).encode(), s.to_bytes(8, "little")] + [
        k for key in keys for k in (key, key.hex().encode())
    ]
    # the secret states are in the private checkpoint only
    ckpt = torch.load(out / run_folder.CHECKPOINT, weights_only=True)
    server_state = run_folder.party_state(out, "server")["server"]["noise"]
    device_state = run_folder.party_state(out, "device0")["devices"][0]["noise"]
    assert server_state["kind"] == device_state["kind"] == "keyed"
    public = _public_files(out)
    assert {
        "config.json",
        "checkpoint.pt",
        "metrics.jsonl",
        "summary.json",
        "server.jsonl",
        "server.bin",
        "device0.jsonl",
        "device0.bin",
    } <= {p.name for p in public}
    for path in public:
        data = path.read_bytes()
        assert not any(n in data for n in needles), path
    assert "secret" not in (out / "config.json").read_text()
    assert not any("noise" in key for key in _keys(ckpt["state"]))
    # the private area is the owner's only
    assert stat.S_IMODE((out / "private").stat().st_mode) == 0o700
    assert all(
        stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600)
        for p in (out / "private").rglob("*")
    )


def _whole_state(out):
    """The whole scheduler state: checkpoint.pt with every party's private part merged back."""
    ckpt = torch.load(out / run_folder.CHECKPOINT, weights_only=True)
    return run_folder.merge_state(
        ckpt["state"],
        {
            party: torch.load(out / "private" / party / f"checkpoint-{ckpt['id']}.pt", weights_only=True)[
                "state"
            ]
            for party in ckpt["parties"]
        },
    )


def _keys(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield f"{prefix}/{k}"
            yield from _keys(v, f"{prefix}/{k}")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _keys(v, f"{prefix}/{i}")


def _released(out):
    """Every downlink Delta in round order, as the devices received them."""
    rows = [
        (e.round, float(e.fields["delta"][0]))
        for party in ("device0", "device1")
        for e in transcript.load(out, party).select("received")
    ]
    return np.array([d for _, d in sorted(rows)])


def _denoised(released, root):
    """Released minus the draws of the server's downlink stream under ``root``, in order (the
    head's noise is on a stream of its own)."""
    noise = KeyedNoise(seeds.key(root, "server")).stream("downlink")
    return released - np.array([float(noise.gaussian((), SIGMA)) for _ in released])


def test_no_public_value_rebuilds_the_noise(private_run):
    """The issue's attack: subtract the draws of a generator seeded from a public value. With the
    secret seed (positive control) every Delta falls back into [-C, C]; with any public value
    (every integer in config.json, and the old derivations seed+1, 10000+seed, 1000003+seed)
    the result stays as noisy as the release."""
    out, _ = private_run
    released = _released(out)
    secret = json.loads((out / "private" / "secrets.json").read_text())["secret_seed"]
    assert np.abs(_denoised(released, secret)).max() <= CLIP + 1e-4  # the attack works...
    # ...on a noisy release. Thresholds at 2C, not 10C: with ~14 releases of N(0, 1) all 14 stay
    # below 10C = 1 with probability 0.68^14 ~ 0.5% (a flake seen once); below 2C, ~1e-11.
    assert np.abs(released).max() > 2 * CLIP
    saved = json.loads((out / "config.json").read_text())
    public = {v for v in _values(saved) if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
    seed = saved["seed"]
    public |= {seed + 1, 10_000 + seed, 1_000_003 + seed, 0, 1}
    for value in sorted(public):
        residual = _denoised(released, value)
        assert np.abs(residual).max() > 2 * CLIP and residual.std() > 0.5 * SIGMA, value


def _values(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _values(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _values(v)
    else:
        yield tree


def test_secret_seed_flag_reproduces_the_noise_and_stays_private(tmp_path, capsys):
    args = [
        "train",
        "--dataset",
        "digits",
        "--devices",
        "2",
        "--epochs",
        "0.2",
        "--batch-size",
        "64",
        "--sigma",
        "1",
        "--secret-seed",
        "123",
        "--json",
    ]
    for name in ("a", "b"):
        assert main([*args, "--out", str(tmp_path / name)]) == 0
    assert main([*args[:-3], "--json", "--out", str(tmp_path / "c")]) == 0  # OS entropy
    a, b, c = (_released(tmp_path / n) for n in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    secrets_a = json.loads((tmp_path / "a" / "private" / "secrets.json").read_text())
    assert (secrets_a["secret_seed"], secrets_a["source"]) == (123, "given")
    assert 123 not in set(_values(json.loads((tmp_path / "a" / "config.json").read_text())))


def test_secret_seed_file_gives_the_flags_run_and_keeps_the_seed_off_the_command_line(tmp_path, capsys):
    """--secret-seed-file FILE (mode 0600) makes the run --secret-seed makes, without the number
    in the process's arguments, where every local user can read it (/proc/PID/cmdline)."""
    args = ["train", "--dataset", "digits", "--devices", "2", "--epochs", "0.2", "--batch-size", "64"]
    args += ["--sigma", "1", "--json"]
    seed_file = tmp_path / "seed"
    seed_file.write_text("123\n")
    seed_file.chmod(0o600)
    assert main([*args, "--secret-seed", "123", "--out", str(tmp_path / "flag")]) == 0
    by_file = [*args, "--secret-seed-file", str(seed_file), "--out", str(tmp_path / "file")]
    assert main(by_file) == 0
    assert "123" not in by_file
    assert np.array_equal(_released(tmp_path / "flag"), _released(tmp_path / "file"))
    saved = json.loads((tmp_path / "file" / "private" / "secrets.json").read_text())
    assert (saved["secret_seed"], saved["source"]) == (123, "given")


@pytest.mark.parametrize(
    "content, mode, expected",
    [
        ("123", 0o644, "mode 0644"),
        ("123", 0o620, "mode 0620"),
        ("12 3", 0o600, "one integer"),
        ("-1", 0o600, "one integer"),
        (str(2**63), 0o600, "one integer"),
        ("0x10", 0o600, "one integer"),
        ("", 0o600, "one integer"),
        ("1" * 70, 0o600, "one integer"),
        (None, None, "no such file"),
    ],
)
def test_a_bad_secret_seed_file_is_one_line_and_writes_nothing(tmp_path, capsys, content, mode, expected):
    seed_file = tmp_path / "seed"
    if content is not None:
        seed_file.write_text(content)
        seed_file.chmod(mode)
    out = tmp_path / "run"
    argv = ["train", "--dataset", "digits", "--epochs", "0.1", "--secret-seed-file", str(seed_file)]
    _one_line_exit_2(capsys, [*argv, "--out", str(out)], expected)
    assert not out.exists()


def test_a_secret_seed_file_that_is_a_fifo_or_given_with_the_flag_is_refused(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    _one_line_exit_2(capsys, ["train", "--secret-seed-file", str(fifo)], "not a regular file")
    seed_file = tmp_path / "seed"
    seed_file.write_text("5")
    seed_file.chmod(0o600)
    both = ["train", "--secret-seed", "5", "--secret-seed-file", str(seed_file)]
    _one_line_exit_2(capsys, both, "not allowed with")


def test_attack_run_refuses_the_private_area(private_run, capsys):
    out, _ = private_run
    _one_line_exit_2(
        capsys, ["attack", "run", "--attack", "direct-label", "--run", str(out / "private")], "private area"
    )
    assert (
        main(["attack", "run", "--attack", "feature-server", "--run", str(out), "--json"]) == 0
    )  # MLP head: not direct-label


# ------------------------------------------------------------------------------ crash safety
def _journal_releases(tmp_path, name):
    paths = [
        tmp_path / name / "private" / "ledger.journal",
        *tmp_path.glob(f".{name}.new-*/private/ledger.journal"),
    ]
    return sum(_read_or_empty(p).count(b'"ids"') for p in paths)


def _read_or_empty(path):
    """The file's bytes, or none: a run being created is renamed into place at any moment."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _alive(pid):
    done, _ = os.waitpid(pid, os.WNOHANG)
    return done == 0


def test_sigkill_at_random_points_then_resume_completes(tmp_path, capsys, cli_process):
    """SIGKILL a training process after a random number of releases (a few times, creation
    included), then --resume: the run completes, the model, metrics and ledger equal an unkilled
    run's bit for bit (seeded noise re-makes the discarded releases, counted once)."""
    config = dataclasses.replace(PRIVATE_RUN, epochs=1.0, batch_size=32, evals=3)
    flags = [
        "--dataset",
        "digits",
        "--devices",
        "2",
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--clip",
        str(CLIP),
        "--sigma",
        str(SIGMA),
        "--epsilon",
        "50",
        "--seed",
        "5",
        "--secret-seed",
        "77",
        "--checkpoint-every",
        "7",
        "--head-sampling",
        "batch",
        "--json",
    ]
    with open(tmp_path / "c.json", "w") as fh:
        json.dump({"evals": 3}, fh)
    reference = run.train(config, tmp_path / "reference", secret_seed=77)  # (also warms imports)
    out = tmp_path / "run"
    fresh = ["train", *flags, "--config", str(tmp_path / "c.json"), "--out", str(out)]
    resume = ["train", "--resume", str(out), "--json"]
    rng = random.Random(8)
    kills = 0
    for target in [0, rng.randint(1, 10), rng.randint(5, 40), rng.randint(5, 40)]:
        before = _journal_releases(tmp_path, "run")
        pid = cli_process(resume if (out / "config.json").exists() else fresh)
        while (alive := _alive(pid)) and _journal_releases(tmp_path, "run") < before + target:
            time.sleep(0.001)
        if alive:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            kills += 1
    capsys.readouterr()
    assert main(resume if (out / "config.json").exists() else fresh) == 0
    assert kills >= 3
    summary = json.loads(capsys.readouterr().out)
    assert summary["rounds"] == reference["rounds"] == summary["rounds_planned"]
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["round"] == summary["rounds"]
    state, ref_state = _whole_state(out), _whole_state(tmp_path / "reference")
    for a, b in zip(state["devices"] + [state["server"]], ref_state["devices"] + [ref_state["server"]]):
        key = "model" if "model" in a else "head"
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key])
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    ref_rows = [json.loads(x) for x in (tmp_path / "reference" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [r["round"] for r in ref_rows]
    assert [r["test_accuracy"] for r in rows] == [r["test_accuracy"] for r in ref_rows]
    for party in ("server", "device0", "device1"):  # streamed transcripts: cut back and continued
        got, ref = (transcript.load(o, party).entries for o in (out, tmp_path / "reference"))
        assert [(e.round, e.direction, e.kind) for e in got] == [(e.round, e.direction, e.kind) for e in ref]
        assert all(
            a.fields.keys() == b.fields.keys()
            and all(np.array_equal(a.fields[k], b.fields[k]) for k in a.fields)
            for a, b in zip(got, ref)
        )
    # seeded noise: the discarded releases were re-made bit for bit, so counted once (the ledger
    # is the unkilled run's); the journal says how many were discarded and replayed
    ledger = json.loads((out / "private" / "ledger.json").read_text())
    journal = [json.loads(x) for x in (out / "private" / "ledger.journal").read_text().splitlines()]
    assert all(line["replayed"] for line in journal if "resume" in line)
    assert ledger == json.loads((tmp_path / "reference" / "private" / "ledger.json").read_text())
    assert ledger["releases"] == summary["rounds"]
    assert summary["epsilon_spent"] == reference["epsilon_spent"]
    assert not list(tmp_path.glob(".run.new-*")) and not list(out.rglob(".*.tmp"))
    assert len(list((out / "private" / "server").glob("checkpoint-*.pt"))) == 1


def test_a_locked_out_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    lock = run_folder.FolderLock.take(tmp_path / ".run.lock")
    _one_line_exit_2(
        capsys, ["train", "--devices", "2", "--epochs", "0.1", "--out", str(out)], "another privzv run"
    )
    assert not out.exists()
    lock.release()
    assert list(tmp_path.iterdir()) == []


def test_a_finished_or_refused_run_leaves_only_its_folder(private_run, tmp_path, capsys):
    """No .NAME.lock (nor anything else) beside the run folder: after a finished run, a run that
    failed after taking the lock, a refused resume (exit 2), and after a killed run's stale lock."""
    args = [
        "train",
        "--devices",
        "2",
        "--epochs",
        "0.1",
        "--batch-size",
        "64",
        "--no-transcripts",
        "--json",
        "--out",
    ]
    assert main([*args, str(tmp_path / "run")]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    copy = _copy(private_run, tmp_path / "resumed")
    saved = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**saved, "sigma": 2.0}))
    _one_line_exit_2(capsys, ["train", "--resume", str(copy)], "sigma")  # refused inside the lock
    assert [p.name for p in copy.parent.iterdir()] == ["copy"]
    shutil.rmtree(copy.parent)
    (tmp_path / ".again.lock").touch()  # left by a killed run: taken over, then removed
    assert main([*args, str(tmp_path / "again")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "run"]


def test_a_run_failing_inside_the_lock_leaves_nothing(tmp_path, capsys, monkeypatch):
    def refuse(*a, **kw):
        raise run_folder.PrivzvError("--x 1: refused")

    monkeypatch.setattr(run, "build", refuse)
    _one_line_exit_2(
        capsys, ["train", "--devices", "2", "--epochs", "0.1", "--out", str(tmp_path / "run")], "--x 1"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_lock_taken_on_a_removed_lock_file_is_not_held(tmp_path, monkeypatch):
    """A taker that opened the lock file just before its holder removed it (and a new run took the
    path) must not hold a lock beside the new run's: once locked, take checks that the path
    still names its file."""
    path = tmp_path / ".run.lock"
    path.touch()
    real_flock, newer = fcntl.flock, []

    def flock(fd, op):
        if not newer:  # between this taker's open and its flock
            newer.append(None)
            path.unlink()  # the holder finishes and removes the file
            newer[0] = run_folder.FolderLock.take(path)  # a new run takes the path
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    assert run_folder.FolderLock.take(path) is None
    assert newer[0] is not None and path.exists()
    newer[0].release()
    assert not path.exists()
    again = run_folder.FolderLock.take(path)
    assert again is not None and run_folder.FolderLock.take(path) is None
    again.release()


def test_same_out_twice_is_refused_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--devices", "2", "--epochs", "0.1", "--batch-size", "64", "--json", "--out", str(out)]
    assert main(args) == 0
    first = json.loads((out / "config.json").read_text())["run_id"]
    capsys.readouterr()
    _one_line_exit_2(capsys, args, "--resume", "--overwrite")
    assert json.loads((out / "config.json").read_text())["run_id"] == first
    assert main([*args, "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["run_id"] != first
    capsys.readouterr()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    _one_line_exit_2(capsys, [*args[:-1], str(other), "--overwrite"], "not empty")
    assert (other / "notes.txt").read_text() == "keep me"


def test_leftover_temporary_folders_are_cleaned(tmp_path, capsys):
    leftover = tmp_path / ".run.new-abc123"
    (leftover / "private").mkdir(parents=True)
    (leftover / "private" / "secrets.json").write_text('{"secret_seed": 1}')
    assert (
        main(
            [
                "train",
                "--devices",
                "2",
                "--epochs",
                "0.1",
                "--batch-size",
                "64",
                "--json",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    assert not leftover.exists()


def _format_1_folder(path):
    """A minimal run folder as privzv wrote it before streamed transcripts (format 1)."""
    config = {"dataset": "digits", "method": "dpzv", "devices": 2, "epochs": 0.1, "batch_size": 64, "seed": 1}
    (path / "transcripts").mkdir(parents=True)
    (path / "config.json").write_text(
        json.dumps(
            {
                "format": 1,
                "run_id": "0123456789abcdef",
                "config": config,
                "seed": 1,
                "sigma": 0.0,
                "rounds": 5,
                "checkpoint_every": 200,
            }
        )
    )
    for party in ("server", "device0", "device1"):
        (path / "transcripts" / f"{party}.json").write_text(
            json.dumps({"party": party, "meta": {}, "entries": []})
        )
        np.savez(path / "transcripts" / f"{party}.npz")
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--resume", "{run}"],
        ["train", "--resume", "{run}", "--extend", "--epochs", "1"],
        ["attack", "run", "--attack", "direct-label", "--run", "{run}"],
    ],
)
def test_a_format_1_folder_is_refused_naming_its_format(tmp_path, capsys, argv):
    run_dir = _format_1_folder(tmp_path / "old")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    _one_line_exit_2(capsys, [a.format(run=run_dir) for a in argv], "format 1", "reads format 3 only")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_format_1_transcripts_are_refused_naming_their_format(tmp_path):
    run_dir = _format_1_folder(tmp_path / "old")
    with pytest.raises(run_folder.PrivzvError, match="format 1 .device0.json"):
        transcript.load(run_dir, "device0")


# ------------------------------------------------------------------------------ resume integrity
def _edit_json(path, change):
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def _set(key, value):
    return lambda obj: obj.__setitem__(key, value)


def _zero_counts(obj):
    obj["counts"] = [[0] * len(row) for row in obj["counts"]]


def _set_config(key, value):
    return lambda obj: obj["config"].__setitem__(key, value)


@pytest.mark.parametrize(
    "name, path, change, words",
    [
        ("counts zeroed", "private/ledger.json", _zero_counts, ["ledger.json", "differs"]),
        ("budget raised", "private/ledger.json", _set("epsilon_budget", 1e6), ["ledger.json", "differs"]),
        ("releases not a number", "private/ledger.json", _set("releases", "x"), ["ledger.json", "corrupt"]),
        (
            "NaN token",
            "private/ledger.json",
            _set("epsilon_budget", float("nan")),
            ["ledger.json", "not JSON", "NaN"],
        ),  # the run folder reads strict JSON, as --config does
        ("sigma lowered", "config.json", _set("sigma", 0.001), ["sigma"]),
        ("sigma zero", "config.json", _set("sigma", 0.0), ["sigma"]),
        ("budget raised in config", "config.json", _set_config("epsilon", 1e6), ["epsilon"]),
        ("epochs cut in config", "config.json", _set_config("epochs", 0.1), ["epochs"]),
        ("clip changed in config", "config.json", _set_config("clip", 5.0), ["clip"]),
        ("foreign run id", "config.json", _set("run_id", "0123456789abcdef"), ["belong", "0123456789abcdef"]),
    ],
)
def test_tampered_files_are_refused(private_run, tmp_path, capsys, name, path, change, words):
    out = _copy(private_run, tmp_path)
    _edit_json(out / path, change)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], *words)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing written


@pytest.mark.parametrize(
    "name",
    [
        "private/ledger.json",
        "private/ledger.journal",
        "checkpoint.pt",
        "metrics.jsonl",
        "config.json",
        "private/device1/checkpoint-*.pt",
    ],
)
def test_corrupt_or_missing_files_are_refused(private_run, tmp_path, capsys, name):
    out = _copy(private_run, tmp_path)
    (path,) = out.glob(name)
    word = name.rsplit("/", 1)[-1].split("*")[0]
    path.write_bytes(b"\x00garbage{")
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], word)
    path.unlink()
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], word)


def test_missing_or_short_transcripts_are_refused(private_run, tmp_path, capsys):
    out = _copy(private_run, tmp_path)
    (out / "transcripts" / "device1.jsonl").unlink()
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], "transcripts/device1", "missing")
    shutil.rmtree(out / "transcripts")
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], "transcripts/")


def test_foreign_ledger_copied_in_is_refused(private_run, tmp_path, capsys):
    out = _copy(private_run, tmp_path)
    other = tmp_path / "other"
    run.train(dataclasses.replace(PRIVATE_RUN, seed=6), other)
    shutil.copy(other / "private" / "ledger.json", out / "private" / "ledger.json")
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], "ledger.json", "differs")
    shutil.copy(other / "private" / "ledger.journal", out / "private" / "ledger.journal")
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], "ledger.journal", "belongs to run")


def test_old_checkpoint_with_a_newer_ledger_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    run.train(PRIVATE_RUN, out)
    old = {
        p.relative_to(out): p.read_bytes()
        for p in [out / "checkpoint.pt", *(out / "private").glob("*/checkpoint-*")]
    }
    assert main(["train", "--resume", str(out), "--extend", "--epochs", "0.6", "--json"]) == 0
    capsys.readouterr()
    for name, data in old.items():
        (out / name).write_bytes(data)
    _one_line_exit_2(capsys, ["train", "--resume", str(out)], "checkpoint.pt", "older")


def test_epochs_change_needs_extend_and_extend_rechecks_the_budget(private_run, tmp_path, capsys):
    out = _copy(private_run, tmp_path)
    _one_line_exit_2(capsys, ["train", "--resume", str(out), "--epochs", "1"], "--extend")
    _one_line_exit_2(capsys, ["train", "--resume", str(out), "--extend", "--epochs", "0.1"], "more than")
    _one_line_exit_2(capsys, ["train", "--resume", str(out), "--seed", "3"], "--seed")
    calibrated = tmp_path / "calibrated"
    run.train(dataclasses.replace(PRIVATE_RUN, sigma=None, epsilon=2.0), calibrated)
    _one_line_exit_2(
        capsys,
        ["train", "--resume", str(calibrated), "--extend", "--epochs", "3"],
        "would spend epsilon",
        "budget 2",
    )
    config = json.loads((calibrated / "config.json").read_text())
    assert config["config"]["epochs"] == 0.3 and config["extensions"] == []


def test_extend_records_the_extension_and_the_ledger_continues(private_run, tmp_path, capsys):
    out = _copy(private_run, tmp_path)
    first = private_run[1]
    assert main(["train", "--resume", str(out), "--extend", "--epochs", "0.6", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["epochs"] == 0.6 and config["rounds"] == second["rounds"] > first["rounds"]
    assert config["extensions"][0]["round"] == first["rounds"] and config["extensions"][0]["epochs"] == 0.3
    assert json.loads((out / "private" / "ledger.json").read_text())["releases"] == second["rounds"]
    assert main(["train", "--resume", str(out), "--json"]) == 0  # and it resumes again


def test_secret_keep_decisions_stay_private_and_survive_resume(tmp_path):
    """Under secret-subsampling the server's keep masks go to private/transcripts/ (with their
    position) and a resumed run puts them back in place: same transcripts as a straight run."""
    cfg = dataclasses.replace(
        PRIVATE_RUN, threat="secret-subsampling", batch_size=16, super_batch=64, epochs=0.2
    )
    run.train(cfg, tmp_path / "half", secret_seed=4, checkpoint_every=3)
    run.train(dataclasses.replace(cfg, epochs=0.4), tmp_path / "half", resume=True, extend=True)
    run.train(dataclasses.replace(cfg, epochs=0.4), tmp_path / "straight", secret_seed=4)
    for out in (tmp_path / "half", tmp_path / "straight"):
        assert not transcript.load(out, "server").select("local", "keep")
    half, straight = (
        transcript.load(tmp_path / n / "private", "server").select("local", "keep")
        for n in ("half", "straight")
    )
    assert len(half) == len(straight) > 0
    assert all(
        np.array_equal(a.fields["mask"], b.fields["mask"])
        and a.round == b.round
        and a.fields["_position"] == b.fields["_position"]
        for a, b in zip(half, straight)
    )
    public = [(e.round, e.kind) for e in transcript.load(tmp_path / "half", "server").entries]
    assert public == [(e.round, e.kind) for e in transcript.load(tmp_path / "straight", "server").entries]


def test_rr_prior_keeps_its_labels_out_of_the_public_checkpoint(tmp_path):
    """rr-prior's server labels are raw for the half it has not privatised yet: a checkpoint
    taken in stage 1 keeps them in the private area only."""
    config = TrainConfig(
        dataset="digits", method="rr-prior", devices=2, epochs=1.0, epsilon=1.0, evals=2, transcripts=False
    )
    run.train(config, tmp_path / "run", secret_seed=3, checkpoint_every=5)
    ckpt = torch.load(tmp_path / "run" / run_folder.CHECKPOINT, weights_only=True)
    assert "labels" not in ckpt["state"]["method"]
    private = torch.load(
        tmp_path / "run" / "private" / "server" / f"checkpoint-{ckpt['id']}.pt", weights_only=True
    )
    assert ("method", "labels") in [path for path, _ in private["state"]]
