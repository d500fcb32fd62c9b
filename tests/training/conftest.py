"""Tiny inline parties for the training tests (no dataset files, a few hundred records), as
fixtures that return factories (the suite runs with --import-mode=importlib)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from privzv.training import run
from privzv.training.config import TrainConfig
from privzv.training.data import VerticalDataset


def _tiny_dataset(
    records: int = 96, devices: int = 2, features: int = 3, classes: int = 3, seed: int = 0
) -> VerticalDataset:
    """Gaussian features whose class shifts the mean; 'breast-cancer' builds the small MLPs."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (records,), generator=gen)
    xs = [torch.randn(records, features, generator=gen) + y[:, None].float() for _ in range(devices)]
    return VerticalDataset(
        "breast-cancer", xs, y, [x[:32] for x in xs], y[:32], classes, partition="inline test features"
    )


def _tiny_config(**changes) -> TrainConfig:
    base = TrainConfig(
        dataset="breast-cancer", devices=2, batch_size=8, epochs=1, embed_dim=4, seed=3, evals=1
    )
    return dataclasses.replace(base, **changes)


def _tiny_scheduler(
    dataset: VerticalDataset | None = None,
    sigma: float = 0.0,
    ledger=None,
    release=None,
    secret_seed: int = 11,
    **changes,
):
    dataset = dataset or _tiny_dataset(devices=changes.get("devices", 2))
    return run.build(
        _tiny_config(**changes), dataset, ledger=ledger, sigma=sigma, release=release, secret_seed=secret_seed
    )


@pytest.fixture
def tiny_dataset():
    """Factory: a tiny VerticalDataset (keyword arguments: records, devices, features, classes, seed)."""
    return _tiny_dataset


@pytest.fixture
def tiny_config():
    """Factory: a small TrainConfig with the given changes."""
    return _tiny_config


@pytest.fixture
def tiny_scheduler():
    """Factory: run.build of a tiny config on the tiny dataset (sigma, ledger, release, secret_seed,
    config changes)."""
    return _tiny_scheduler


@pytest.fixture(scope="module")
def no_plots():
    """No plots for the module (half of a small run's time, and not what its tests check)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run.plots, "write", lambda *args, **kwargs: None)
        yield


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def cli_process():
    """``cli_process(argv)``: ``privzv argv`` in a forked process (imports already done, so no
    interpreter start-up per run), its output to /dev/null; returns the child's pid, which exits
    with main's code."""
    from privzv.cli import main

    def start(argv) -> int:
        pid = os.fork()
        if pid == 0:  # the child: run, then leave without pytest's clean-up
            code = 1
            try:
                with open(os.devnull, "w") as null:
                    sys.stdout = sys.stderr = null
                    code = main(argv)
            finally:
                os._exit(code)
        return pid

    return start


class _Processes:
    """What the real-process Flower tests look at: the processes working inside a folder (a run's
    processes run in its work folder, also once it is deleted), command lines, bounded waits."""

    @staticmethod
    def inside(folder) -> list[int]:
        pids = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if os.readlink(proc / "cwd").startswith(str(folder)):
                    pids.append(int(proc.name))
            except OSError:
                continue
        return pids

    @staticmethod
    def cmdline(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return ""

    @staticmethod
    def until(predicate, seconds: float, what: str):
        """``predicate()``'s first true value, looked for every 0.1 s; AssertionError after ``seconds``."""
        deadline = time.monotonic() + seconds
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {seconds} s: {what}")
            time.sleep(0.1)
        return value


@pytest.fixture
def procs():
    """The helpers of :class:`_Processes` (processes inside a folder, command lines, waits)."""
    return _Processes


def _curve_after_resume(got: list[dict], ref: list[dict]) -> None:
    """A resumed run's evaluations against an unbroken run's: the same, but an evaluation between
    the checkpoint and the kill already counts the releases the killed run made after it
    (docs/training.md: they stay counted), so its epsilon spent may be more, never less."""
    for ours, theirs in zip(got, ref, strict=True):
        ours, theirs = dict(ours), dict(theirs)
        spent, spent_ref = ours.pop("epsilon_spent"), theirs.pop("epsilon_spent")
        assert ours == pytest.approx(theirs, rel=1e-6) and spent >= spent_ref * (1 - 1e-9)


@pytest.fixture
def curve_after_resume():
    """:func:`_curve_after_resume`: a resumed run's curve checked against an unbroken run's."""
    return _curve_after_resume
