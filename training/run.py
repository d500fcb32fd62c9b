"""One training run: build the parties, plan the privacy, run the scheduler, write the run folder.

Run folder (written atomically; ``--resume`` continues it):

``config.json``     the config (with ``secret_seed``), sigma, versions, the calibration result
``metrics.jsonl``   one JSON object per evaluation: round, epoch, test_accuracy, test_loss,
                    bytes_up, bytes_down, epsilon_spent (null when no noise), wall_seconds
``summary.json``    the ``--json`` summary
``ledger.json``     the privacy ledger (``PrivacyLedger.state_dict()``; private runs only)
``checkpoint.pt``   models, optimisers, generators, table, samplers (``Scheduler.state_dict``)
``traffic.npz``     bytes per round: ``log`` [rounds, 4] = (round, device, up, down); ``up``,
                    ``down`` per device (eq. (23) of papers/000 is ``log[:, 2:].sum()``)
``transcripts/``    per-party transcripts (``privzv.training.transcript``), unless switched off
``accuracy_vs_rounds.{png,svg}``, ``accuracy_vs_bytes.{png,svg}``
"""
from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

import privzv
from privzv.errors import PrivzvError
from privzv.training import data, methods, models, privacy, seeds
from privzv.training.config import TrainConfig
from privzv.training.noise import SeededNoise
from privzv.training.messages import SERVER, device_name
from privzv.training.parties import Device, EmbeddingTable, Server
from privzv.training.scheduler import Scheduler
from privzv.training.transcript import Recorder

CHECKPOINT = "checkpoint.pt"


def build(config: TrainConfig, dataset, *, ledger=None, sigma: float = 0.0, release=None) -> Scheduler:
    """The parties, the method and the scheduler of a run (models initialised from the seed).

    ``release``: the run's calibrated Release (``privacy.Plan.release`` of a private run); without
    it, ``sigma`` > 0 gives the method's release at that downlink sigma."""
    m_count, records = config.devices, len(dataset.y_train)
    method_cls = methods.get(config.method)
    devices = []
    for m in range(m_count):
        torch.manual_seed(seeds.derive(config.seed, "init", m))
        devices.append(Device(m, models.device_model(dataset, m, config.embed_dim), dataset.x_train[m],
                              seed=config.seed, noise=SeededNoise(config.secret_seed, "device", m)))
    torch.manual_seed(seeds.derive(config.seed, "init", "server"))
    head = models.server_model(m_count, config.embed_dim, dataset.num_classes, kind=config.server_kind)
    table = EmbeddingTable(m_count, records, config.embed_dim, config.max_delay,
                           np.random.default_rng(seeds.derive(config.seed, "delay")))
    server = Server(head, dataset.y_train, table, SeededNoise(config.secret_seed, "server"))
    parties = [SERVER] + [device_name(m) for m in range(m_count)]
    meta = {device_name(m): {"party": device_name(m), "dataset": dataset.name, "records": records,
                             "partition": dataset.partition, "features_shape": list(dataset.x_train[m].shape[1:])}
            for m in range(m_count)}
    meta[SERVER] = {"party": SERVER, "dataset": dataset.name, "records": records,
                    "num_classes": dataset.num_classes}
    recorder = Recorder(parties, meta, enabled=config.transcripts)
    method = method_cls(config, release=privacy.noised_release(config, method_cls, sigma, release))
    return Scheduler(method, devices, server, batch=method_cls.uplink_batch(config), seed=config.seed,
                     threat=config.threat, activation=config.activation, recorder=recorder, ledger=ledger)


def steps_per_epoch(config: TrainConfig, records: int) -> int:
    """Rounds of one device epoch: ceil(N / b) steps for each of the M devices."""
    return config.devices * math.ceil(records / methods.get(config.method).uplink_batch(config))


def rounds_for(config: TrainConfig, records: int) -> int:
    """Total rounds T: ``epochs`` device epochs."""
    return max(1, round(config.epochs * steps_per_epoch(config, records)))


def versions() -> dict:
    from importlib import metadata

    return {"privzv": privzv.__version__, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "dp-accounting": metadata.version("dp-accounting")}


def train(config: TrainConfig, out: Path, *, resume: bool = False,
          progress: Callable | None = None) -> dict:
    """Run ``config`` writing into the (work) folder ``out``; returns the summary dict.

    With ``resume``, ``out`` already holds a finished or stopped run of the same config: its
    checkpoint, ledger, transcripts and metrics are continued (the ledger is never reset).
    ``progress(total=...)`` makes a progress bar (``privzv.cliutil.progress``).
    """
    config.validate()
    torch.set_num_threads(config.threads)
    dataset = data.load(config.dataset, config.devices, config.data_dir, seed=config.seed)
    records = len(dataset.y_train)
    method_cls = methods.get(config.method)
    b = method_cls.uplink_batch(config)
    if b > records:
        flag = "super_batch" if b != config.batch_size else "--batch-size"
        raise PrivzvError(f"{flag} {b}: must be <= {records} (training records of {config.dataset})")
    rounds = rounds_for(config, records)
    if resume:
        saved = json.loads((out / "config.json").read_text())
        p = privacy.resumed(config, method_cls, float(saved["sigma"]), saved.get("calibration"))
        if p.private and not (out / "ledger.json").exists():
            raise PrivzvError(f"--resume {str(out)!r}: a private run (sigma {p.sigma:g}) without "
                              "ledger.json; its spent budget is unknown, so it cannot continue")
        ledger = privacy.restore_ledger(json.loads((out / "ledger.json").read_text())) if p.private else None
    else:
        p = privacy.plan(config, method_cls, records, rounds)
        ledger = privacy.ledger(config, p)
    sched = build(config, dataset, ledger=ledger, release=p.release if p.private else None)
    metrics_path = out / "metrics.jsonl"
    wall_before = 0.0
    if resume:
        sched.load_state_dict(torch.load(out / CHECKPOINT, weights_only=True))
        if config.transcripts:
            sched.recorder.extend_from(out / "transcripts")
        lines = _read_metrics(metrics_path)
        wall_before = lines[-1]["wall_seconds"] if lines else 0.0
    elif ledger is not None and ledger.would_exceed(0, np.arange(b)):
        raise PrivzvError(f"--epsilon {config.epsilon:g}: the budget is too small for even one release"
                          f" at sigma {p.sigma:.4g}")
    (out / "config.json").write_text(json.dumps(
        {"config": config.to_dict(), "seed": config.seed, "sigma": p.sigma, "rounds": rounds,
         "calibration": p.result, "release": _release_dict(p.release), "versions": versions()},
        indent=2, default=str))

    start = time.perf_counter()
    epoch_rounds = steps_per_epoch(config, records)
    evals = {max(1, round(k * rounds / config.evals)) for k in range(1, config.evals + 1)}

    def on_eval(r: int) -> None:
        ev = sched.evaluate(dataset.x_test, dataset.y_test)
        row = {"round": r, "epoch": r / epoch_rounds, "test_accuracy": ev.test_accuracy,
               "test_loss": ev.test_loss, "bytes_up": ev.bytes_up, "bytes_down": ev.bytes_down,
               "epsilon_spent": ledger.epsilon_spent() if ledger is not None else None,
               "wall_seconds": wall_before + time.perf_counter() - start}
        with open(metrics_path, "a") as fh:
            fh.write(json.dumps(row) + "\n")

    if not resume:
        on_eval(0)
    bar = progress(total=rounds) if progress else None
    if bar and sched.round:
        bar.update(sched.round)
    try:
        sched.run(rounds, lambda r: r in evals, on_eval, tick=(bar.update if bar else lambda: None))
    except KeyboardInterrupt:
        sched.stopped = "interrupted"
        on_eval(sched.round)
    finally:
        if bar:
            bar.close()
    _save(out, sched, ledger)
    rows = _read_metrics(metrics_path)
    summary = _summary(config, p, sched, ledger, rows[-1], rounds)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    from privzv.training import plots

    plots.write(out, rows, config)
    return summary


def _save(out: Path, sched: Scheduler, ledger) -> None:
    torch.save(sched.state_dict(), out / CHECKPOINT)
    t = sched.traffic.state_dict()
    np.savez(out / "traffic.npz", **t)
    if ledger is not None:
        (out / "ledger.json").write_text(json.dumps(ledger.state_dict()))
    if sched.recorder.enabled:
        sched.recorder.save(out / "transcripts")


def _read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _release_dict(release) -> dict | None:
    return None if release is None else dataclasses.asdict(release)


def _summary(config, p, sched, ledger, last: dict, rounds) -> dict:
    return {"dataset": config.dataset, "method": config.method, "devices": config.devices,
            "test_accuracy": last["test_accuracy"], "test_loss": last["test_loss"],
            "rounds": sched.round, "rounds_planned": rounds,
            "bytes_up": sched.traffic.total_up, "bytes_down": sched.traffic.total_down,
            "epsilon_spent": ledger.epsilon_spent() if ledger is not None else None,
            "epsilon_budget": config.epsilon if math.isfinite(config.epsilon) else None,
            "delta": config.delta, "threat": config.threat, "accountant": config.accountant,
            "sigma": p.sigma, "mechanisms": privacy.mechanisms(p, ledger),
            "stopped": sched.stopped, "wall_seconds": last["wall_seconds"],
            "seed": config.seed}
