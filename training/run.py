"""One training run: build the parties, plan the privacy, run the scheduler, keep the run folder.

The folder's files, its secrets boundary and its crash safety are ``privzv.training.run_folder``'s:
``config.json`` (public config, sigma, versions), ``metrics.jsonl``, ``summary.json``,
``checkpoint.pt`` (public state), ``traffic.npz`` (bytes per round: ``log`` [rounds, 4] = (round,
device, up, down); ``up``, ``down`` per device; eq. (23) of arXiv:2502.20565v3 is ``log[:, 2:].sum()``;
in ``private/`` under ``eavesdropper``, whose batch sizes are secret), ``transcripts/``, plots,
and ``private/`` (the secret seed, the ledger, and each party's own state).
"""

from __future__ import annotations

import dataclasses
import math
import platform
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import privzv
from privzv.cliutil import Failed
from privzv.errors import PrivzvError
from privzv.release import covers
from privzv.training import (
    accelerator,
    data,
    defaults,
    divergence,
    methods,
    models,
    noise,
    plots,
    privacy,
    seeds,
    stopping,
)
from privzv.training.config import CHECKPOINT_EVERY, TrainConfig
from privzv.training.messages import SERVER, device_name
from privzv.training.parties import Device, EmbeddingTable, Server
from privzv.training.run_folder import PYTHON, RunFolder, from_python, public_config, sizes_secret
from privzv.training.scheduler import Scheduler
from privzv.training.transcript import Recorder


def build(
    config: TrainConfig,
    dataset,
    *,
    ledger=None,
    sigma: float = 0.0,
    release=None,
    secret_seed: int | None = None,
    engine: Callable | None = None,
    given: models.Given | None = None,
) -> Scheduler:
    """The parties, the method and the scheduler of a run (models initialised from the seed).

    ``release``: the run's calibrated Release (``privacy.Plan.release`` of a private run); without
    it, ``sigma`` > 0 gives the method's release at that downlink sigma. ``secret_seed`` roots the
    parties' private noise (None: drawn from the OS, not reproducible). ``engine(config)`` makes
    the engine of devices that live elsewhere (``privzv.training.engines``): then no device is
    built here and the transcripts kept are the server's; None runs them in this process.
    Models, head, table and labels are made on the CPU (the same initial weights everywhere) and
    moved to ``config.device`` (``privzv.training.accelerator``); the features stay where the
    dataset put them. ``given``: models from Python (``privzv.training.fit``), else the config's
    named ones.
    """
    secret = new_secret_seed() if secret_seed is None else secret_seed
    config, _ = defaults.resolve(config, dataset, given)
    place = _place(config, engine)
    m_count, records = config.devices, len(dataset.y_train)
    method_cls = methods.get(config.method)
    devices = []
    for m in range(m_count if engine is None else 0):
        torch.manual_seed(seeds.derive(config.seed, "init", m))
        devices.append(
            Device(
                m,
                models.for_device(config, dataset, m, given).to(place),
                dataset.x_train[m],
                seed=config.seed,
                noise=noise.source(config, secret, "device", m),
                autocast=config.autocast,
            )
        )
    torch.manual_seed(seeds.derive(config.seed, "init", "server"))
    head = models.for_server(config, dataset, given)
    table = EmbeddingTable(
        m_count,
        records,
        config.embed_dim,
        config.max_delay,
        np.random.default_rng(seeds.derive(config.seed, "delay")),
        place=place,
    )
    server = Server(head.to(place), dataset.y_train.to(place), table, noise.source(config, secret, "server"))
    parties = [SERVER] + [device_name(m) for m in range(m_count if engine is None else 0)]
    raw = method_cls.RELEASED_BY == "server"  # else the uplink is the device's noised release
    meta = {
        device_name(m): {
            "party": device_name(m),
            "dataset": dataset.name,
            "records": records,
            "partition": dataset.partition,
            "features_shape": list(dataset.x_train[m].shape[1:]),
            "contains": {"raw_embeddings": [device_name(m)] if raw else []},
        }
        for m in range(m_count)
    }
    meta[SERVER] = {
        "party": SERVER,
        "dataset": dataset.name,
        "records": records,
        "num_classes": dataset.num_classes,
        "contains": {"raw_embeddings": [device_name(m) for m in range(m_count)] if raw else []},
    }
    recorder = Recorder(parties, meta, enabled=config.transcripts)
    method = method_cls(config, release=privacy.noised_release(config, method_cls, sigma, release, records))
    return Scheduler(
        method,
        devices,
        server,
        batch=method_cls.uplink_batch(config),
        seed=config.seed,
        threat=config.threat,
        activation=config.activation,
        recorder=recorder,
        ledger=ledger,
        engine=None if engine is None else engine(config),
    )


def _place(config: TrainConfig, engine: Callable | None) -> torch.device:
    """The torch device of ``config.device`` and ``config.autocast`` (PrivzvError where they cannot
    run here); another engine's devices compute on the CPU only."""
    place = accelerator.resolve(config.device)
    accelerator.check_autocast(config.autocast, place)
    if engine is not None and (place != accelerator.CPU or config.autocast != "none"):
        raise PrivzvError(
            f"--device {config.device} --autocast {config.autocast}: the Flower engines compute "
            "on the CPU in fp32 only (--device cpu --autocast none)"
        )
    return place


def steps_per_epoch(config: TrainConfig, records: int) -> int:
    """Rounds of one device epoch: ceil(N / b) steps for each of the M devices."""
    return config.devices * math.ceil(records / methods.get(config.method).uplink_batch(config))


def rounds_for(config: TrainConfig, records: int) -> int:
    """Total rounds T: ``epochs`` device epochs."""
    return max(1, round(config.epochs * steps_per_epoch(config, records)))


def versions() -> dict:
    from importlib import metadata

    return {
        "privzv": privzv.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "dp-accounting": metadata.version("dp-accounting"),
    }


def replay_platform() -> dict:
    """What the bits of a seeded release depend on besides the run's state and config: the
    software versions and the CPU kernels torch dispatches to. A resume counts a re-made release
    once only on the platform that made it (``privzv.ledger``, "Resume")."""
    return {**versions(), "machine": platform.machine(), "cpu": torch.backends.cpu.get_cpu_capability()}


def _platform(config: TrainConfig) -> dict:
    """:func:`replay_platform` with the accelerator the run computes on (nothing more on a CPU)."""
    return {**replay_platform(), **accelerator.platform(accelerator.resolve(config.device))}


def new_secret_seed() -> int:
    """A secret seed from the operating system's entropy (``secrets``)."""
    return secrets.randbits(63)


def saved_config(out, python: bool = False) -> TrainConfig:
    """The saved config of the run in ``out`` (e.g. to change its epochs for ``extend``);
    ``python``: the caller gives the run's modules or data again (``privzv.training.fit``)."""
    return TrainConfig.from_dict(public_config(out, flag="--resume", python=python)["config"])


def train(
    config: TrainConfig | None,
    out: Path,
    *,
    resume: bool = False,
    extend: bool = False,
    secret_seed: int | None = None,
    overwrite: bool = False,
    checkpoint_every: int | None = None,
    progress: Callable | None = None,
    engine: Callable | None = None,
    announce: Callable[[str], None] | None = None,
    dataset=None,
    given: models.Given | None = None,
) -> dict:
    """Run ``config`` in the run folder ``out``; returns the summary dict.

    A new run needs ``out`` absent, empty, or (``overwrite``) holding a run. ``secret_seed`` makes
    the parties' noise reproducible (kept in ``out/private/``); by default it comes from the OS.
    With ``resume``, ``out`` holds a stopped, killed or finished run: it continues from its last
    checkpoint with its saved config (``config`` None, or equal to it); ``extend`` with a larger
    ``epochs`` lengthens it (re-checking the budget). Every ``checkpoint_every`` rounds the run is
    checkpointed (default ``CHECKPOINT_EVERY``, or the resumed run's own; saved in config.json).
    ``progress(total=...)`` makes a progress bar (``privzv.cliutil.progress``). ``engine``: see
    :func:`build` (a new run only). Open C and rates are filled by ``privzv.training.defaults``
    (saved in config.json with their sources under ``"defaults"``; ``announce(line)`` is told
    them before training). SIGINT, SIGTERM and SIGHUP stop the run at the end of a round,
    checkpointed, with its summary (``stopped``: ``privzv.training.stopping.REASONS``). A run that
    diverges is finished with ``stopped`` "diverged" and raises ``divergence.Diverged``; a file it
    cannot write (a full disk) raises :class:`OutputFailed`, the folder kept at its last checkpoint.
    ``dataset`` (a ``VerticalDataset``) and ``given`` (``models.Given``) come from Python
    (``privzv.training.fit``): the run records them as such, and only Python resumes it.
    """
    with stopping.Signals() as signals:
        try:
            return _train(
                config,
                Path(out),
                resume,
                extend,
                secret_seed,
                overwrite,
                checkpoint_every,
                progress,
                engine,
                announce,
                signals,
                Python(dataset, given),
            )
        except OSError as exc:  # a write the run could not make: a full disk, an I/O error
            kept = (Path(out) / "config.json").is_file()
            raise OutputFailed(
                f"{exc.filename or out}: {exc.strerror or exc}; "
                + (
                    "the run folder keeps its last checkpoint (free space, then --resume it)"
                    if kept
                    else "no run folder was left"
                )
            ) from None


class OutputFailed(Failed):
    """A run folder's file could not be written (exit code 1, one line)."""


def _train(
    config,
    out: Path,
    resume,
    extend,
    secret_seed,
    overwrite,
    checkpoint_every,
    progress,
    engine,
    announce,
    signals: stopping.Signals,
    python: Python,
) -> dict:
    if checkpoint_every is not None and not (isinstance(checkpoint_every, int) and checkpoint_every >= 1):
        raise PrivzvError(f"--checkpoint-every {checkpoint_every!r}: must be an integer >= 1")
    if resume:
        if secret_seed is not None or overwrite:
            flag = "--secret-seed" if secret_seed is not None else "--overwrite"
            raise PrivzvError(f"{flag}: cannot be given with --resume (the run keeps its own)")
        with RunFolder.open(out) as folder:
            return _resume(folder, config, extend, checkpoint_every, progress, signals, python, engine)
    if extend:
        raise PrivzvError("--extend: only with --resume")
    if secret_seed is not None and not (isinstance(secret_seed, int) and 0 <= secret_seed < 2**63):
        raise PrivzvError(f"--secret-seed {secret_seed!r}: must be an integer in [0, 2^63)")
    config.validate(own_data=python.dataset is not None)
    torch.set_num_threads(config.threads)
    dataset, method_cls, rounds = _setup(config, engine, python.dataset)
    config, chosen = defaults.resolve(config, dataset, python.given)
    p = privacy.plan(_release_config(config), method_cls, len(dataset.y_train), rounds)
    ledger = privacy.ledger(config, p)
    if ledger is not None and ledger.would_exceed(0, np.arange(method_cls.uplink_batch(config))):
        raise PrivzvError(
            f"--epsilon {config.epsilon:g}: the budget is too small for even one release"
            f" at sigma {p.sigma:.4g}"
        )
    secret = secret_seed if secret_seed is not None else new_secret_seed()
    checkpoint_every = checkpoint_every or CHECKPOINT_EVERY
    with RunFolder.create(out, overwrite=overwrite) as folder:
        folder.write_secrets(secret, given=secret_seed is not None, data_sha256=data.digest(dataset))
        if ledger is not None:
            ledger = folder.start_ledger(ledger, _platform(config))
        sched = build(
            config,
            dataset,
            ledger=ledger,
            release=p.release if p.private else None,
            secret_seed=secret,
            engine=engine,
            given=python.given,
        )
        folder.write_config(
            {
                **_saved_config(config, p, rounds, checkpoint_every),
                "defaults": chosen,
                "data": data.public_shape(dataset),
                "models": python.architecture(sched),
                "engine": engine_name(engine),
            }
        )
        if announce:
            announce("values chosen for this run:\n" + defaults.describe(chosen, sched.method))
            if math.isfinite(config.epsilon):
                announce(
                    f"privacy: epsilon {config.epsilon:g} ({config.threat} threat) "
                    f"{covers(method_cls.PROTECTS)}"
                )
        try:
            return _Loop(folder, config, dataset, sched, p, rounds, checkpoint_every, signals=signals).run(
                progress, fresh=True
            )
        finally:
            sched.engine.close()


def _setup(config: TrainConfig, engine: Callable | None = None, dataset=None):
    """The dataset (``dataset``, else loaded from the config), the method class and the planned
    rounds T of ``config`` (its device checked first: nothing is written for a run that cannot
    compute here)."""
    _place(config, engine)
    if dataset is None:
        dataset = data.from_config(config)
    records = len(dataset.y_train)
    method_cls = methods.get(config.method)
    b = method_cls.uplink_batch(config)
    if b > records:
        flag = "super_batch" if b != config.batch_size else "--batch-size"
        raise PrivzvError(f"{flag} {b}: must be <= {records} (training records of {config.dataset})")
    return dataset, method_cls, rounds_for(config, records)


def label_dp(config: TrainConfig) -> bool:
    """True for a method whose privacy is privatised labels (``Method.LABEL_DP``), not a noised
    release."""
    return methods.get(config.method).LABEL_DP


def _release_config(config: TrainConfig) -> TrainConfig:
    """The config the release planning sees: a label-DP method's epsilon is spent on its labels
    (by the method itself), so it plans no noised release."""
    return dataclasses.replace(config, epsilon=math.inf) if label_dp(config) else config


def _saved_config(
    config: TrainConfig, p, rounds: int, checkpoint_every: int, extensions: list | None = None
) -> dict:
    return {
        "config": config.to_dict(),
        "seed": config.seed,
        "sigma": p.sigma,
        "rounds": rounds,
        "calibration": p.result,
        "release": _release_dict(p.release),
        "versions": versions(),
        "checkpoint_every": checkpoint_every,
        "extensions": extensions or [],
    }


# Config fields a resume may change: epochs, with ``extend``, and the device it computes on (a
# run made on CUDA resumes on a CPU; its replayed releases then count again, ``_platform``).
RESUME_MUTABLE = ("epochs", "device")


def resumed_config(
    saved: TrainConfig, given: TrainConfig | None, extend: bool, own_data: bool = False
) -> TrainConfig:
    if given is None:
        if extend:
            raise PrivzvError("--extend: give the new --epochs")
        return saved
    # values the new config leaves open keep the run's chosen ones (training.defaults)
    given = dataclasses.replace(
        given, **{name: getattr(saved, name) for name in defaults.FIELDS if getattr(given, name) is None}
    )
    changed = [
        f.name for f in dataclasses.fields(TrainConfig) if getattr(given, f.name) != getattr(saved, f.name)
    ]
    fixed = [name for name in changed if name not in RESUME_MUTABLE]
    if fixed:
        raise PrivzvError(
            f"{fixed[0]} {getattr(given, fixed[0])!r}: cannot change on --resume (the "
            f"run has {getattr(saved, fixed[0])!r}; only --epochs, with --extend, and --device)"
        )
    if "epochs" in changed and not extend:
        raise PrivzvError(
            f"--epochs {given.epochs:g}: the run has {saved.epochs:g}; lengthening it needs --extend"
        )
    if extend and not given.epochs > saved.epochs:
        raise PrivzvError(
            f"--epochs {given.epochs:g}: --extend needs more than the run's {saved.epochs:g} epochs"
        )
    return given.validate(own_data)


def _resume(
    folder: RunFolder,
    given: TrainConfig | None,
    extend: bool,
    every: int | None,
    progress,
    signals: stopping.Signals,
    python: Python,
    engine: Callable | None = None,
) -> dict:
    saved = folder.read_config()
    python.check_resumable(folder.path, saved)
    check_engine(folder.path, saved, engine_name(engine))
    folder.check_not_diverged("--resume")
    every = every or saved.get("checkpoint_every") or CHECKPOINT_EVERY
    own_data = python.dataset is not None
    saved_config = TrainConfig.from_dict(saved["config"]).validate(own_data)
    config = resumed_config(saved_config, given, extend, own_data)
    ckpt = folder.load_checkpoint()
    secret = folder.read_secrets()
    _check_checkpoint(ckpt, saved, saved_config)
    if not ckpt["state"].get("devices") and saved_config.devices:  # the Flower engine keeps none
        raise PrivzvError(
            f"--resume {folder.path}: this Flower run cannot be resumed (its checkpoint has no "
            "device state: it was written before Flower devices saved theirs)"
        )
    torch.set_num_threads(config.threads)
    dataset, method_cls, rounds = _setup(config, engine, python.dataset)
    data.check_same(dataset, saved.get("data"), f"--resume {str(folder.path)!r}")
    _check_same_values(dataset, secret.get("data_sha256"), folder.path)
    expected = rounds_for(saved_config, len(dataset.y_train))
    if saved["rounds"] != expected:
        raise PrivzvError(
            f"config.json: rounds {saved['rounds']} do not match its config "
            f"({expected} for {saved_config.epochs:g} epochs)"
        )
    p = privacy.resumed(
        config, method_cls, float(saved["sigma"]), saved.get("calibration"), len(dataset.y_train)
    )
    ledger = None
    if p.private:
        ledger = folder.load_ledger(_ledger_expected(config, p, len(dataset.y_train)), ckpt)
    elif (folder.private / "ledger.journal").exists():
        raise PrivzvError(f"config.json: sigma {p.sigma:g} (no noise), but the run has a ledger")
    sched = build(
        config,
        dataset,
        ledger=ledger,
        release=p.release if p.private else None,
        secret_seed=secret["secret_seed"],
        engine=engine,
        given=python.given,
    )
    python.check_architecture(saved, sched)
    try:
        sched.load_state_dict(ckpt["state"])
    except PrivzvError:  # the engine's own one line (a Flower device without its saved state)
        raise
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
        raise PrivzvError(f"checkpoint.pt: does not fit the run's config ({type(exc).__name__})") from None
    if config.transcripts:
        folder.load_transcripts(sched.recorder, ckpt)
    folder.load_metrics(ckpt)
    wall = folder.metrics[-1]["wall_seconds"] if folder.metrics else 0.0
    folder.metrics = [row for row in folder.metrics if "stopped" not in row]  # a signal's stop
    if extend:
        _extend(folder, saved, config, saved_config, p, method_cls, dataset, rounds, ckpt)
    folder.resumed(ckpt, seeded=not config.secure_noise, platform=_platform(config))
    return _Loop(folder, config, dataset, sched, p, rounds, every, wall, signals).run(progress)


INPROCESS, FLOWER = "inprocess", "flower"  # config.json's engine: where the devices lived
ENGINE_NAMES = {INPROCESS: "in-process", FLOWER: "Flower"}


def _check_same_values(dataset, saved: object, path: Path) -> None:
    """A resume continues on the very records the run was trained on: the same shape
    (``data.check_same``) and the same values (their digest in ``private/secrets.json``; a
    folder written before it was kept is not checked). Another file at a relative ``--data-file``
    path from another working directory is refused here."""
    if saved is not None and saved != data.digest(dataset):
        raise PrivzvError(
            f"--resume {str(path)!r}: the data loaded now has other values than the run was "
            "trained on (its digest in private/secrets.json); give the files it was trained on"
        )


def engine_name(engine: Callable | None) -> str:
    return INPROCESS if engine is None else FLOWER


def check_engine(path: Path, saved: dict, engine: str) -> None:
    """A run resumes on the engine it was trained on (a Flower run's devices keep their own
    state; an in-process run's devices are in its checkpoint)."""
    ran = saved.get("engine", INPROCESS)  # a run written before config.json named its engine
    if "engine" not in saved and engine != INPROCESS:
        raise PrivzvError(
            f"--resume {str(path)!r}: config.json names no engine (written before Flower runs "
            "could be resumed); an in-process run of then resumes without --engine"
        )
    if ran != engine:
        how = "with --engine flower" if ran == FLOWER else "without --engine"
        raise PrivzvError(f"--resume {str(path)!r}: a run of the {ENGINE_NAMES[ran]} engine; resume it {how}")


@dataclasses.dataclass(frozen=True)
class Python:
    """What a run was given from Python (``privzv.training.fit``): its ``dataset`` and models
    (``given``), each None when privzv loads or builds it. A run given either is "python" in its
    config.json's ``models``: only Python can resume it, with modules of the same architecture."""

    dataset: object = None
    given: models.Given | None = None

    @property
    def source(self) -> str:
        return "privzv" if self.dataset is None and self.given is None else PYTHON

    def architecture(self, sched: Scheduler) -> dict | None:
        """config.json's ``models`` (None for the Flower engine, whose devices live elsewhere)."""
        if not sched.devices:
            return None
        return models.architecture([d.model for d in sched.devices], sched.server.head, self.source)

    def check_resumable(self, path: Path, saved: dict) -> None:
        if from_python(saved) != (self.source == PYTHON):
            raise PrivzvError(
                f"--resume {str(path)!r}: the run was trained from Python with its own modules or "
                "data; resume it with privzv.training.fit(..., resume=True) giving them again"
                if from_python(saved)
                else f"--resume {str(path)!r}: the run built its own models; resume it without modules or data"
            )

    def check_architecture(self, saved: dict, sched: Scheduler) -> None:
        """The resumed models' fingerprints must be the run's (``models.fingerprint``)."""
        recorded, now = saved.get("models"), self.architecture(sched)
        if recorded is None or now is None:
            return
        parties = [(f"device {m}", a, b) for m, (a, b) in enumerate(zip(recorded["devices"], now["devices"]))]
        for party, theirs, mine in [*parties, ("the head", recorded["head"], now["head"])]:
            if theirs != mine:
                raise PrivzvError(
                    f"{party}'s module: its architecture (parameter names, shapes, dtypes) is not the "
                    f"run's (fingerprint {mine[:12]} vs {theirs[:12]} in config.json)"
                )


def _check_checkpoint(ckpt: dict, saved: dict, saved_config: TrainConfig) -> None:
    """The checkpoint's copy of the config and sigma must be config.json's (epochs may be extended)."""
    theirs = dict(ckpt.get("config") or {})
    mine = saved_config.to_dict()
    for name in sorted(set(theirs) | set(mine)):
        if name not in RESUME_MUTABLE and theirs.get(name) != mine.get(name):
            raise PrivzvError(
                f"config.json: {name} {mine.get(name)!r} differs from checkpoint.pt's {theirs.get(name)!r}"
            )
    if ckpt.get("sigma") != saved["sigma"]:
        raise PrivzvError(
            f"config.json: sigma {saved['sigma']!r} differs from checkpoint.pt's {ckpt.get('sigma')!r}"
        )
    if theirs.get("epochs") != mine["epochs"] and not any(
        e.get("epochs") == theirs.get("epochs") for e in saved.get("extensions", [])
    ):
        raise PrivzvError(
            f"config.json: epochs {mine['epochs']!r} differ from checkpoint.pt's "
            f"{theirs.get('epochs')!r} without an --extend"
        )
    if not (isinstance(ckpt.get("round"), int) and 0 <= ckpt["round"] <= saved["rounds"]):
        raise PrivzvError(
            f"checkpoint.pt: round {ckpt.get('round')!r} is not within the run's {saved['rounds']} rounds"
        )


def _extend(folder, saved, config, saved_config, p, method_cls, dataset, rounds, ckpt) -> None:
    """config.json for ``--extend``: the budget re-checked at the run's sigma for the new rounds."""
    planned = None
    if p.private:
        from privzv import accounting

        fixed = dataclasses.replace(config, sigma=p.sigma)
        plan = privacy.plan(fixed, method_cls, len(dataset.y_train), rounds)
        planned = accounting.account(
            plan.release, plan.schedule, config.delta, accountant=config.accountant
        ).epsilon
        if config.sigma is None and planned > config.epsilon * (1 + 1e-9):
            raise PrivzvError(
                f"--epochs {config.epochs:g}: sigma {p.sigma:.4g} was calibrated for "
                f"{saved_config.epochs:g} epochs; {config.epochs:g} would spend epsilon "
                f"{planned:.4g} > the budget {config.epsilon:g} (start a new run)"
            )
    extensions = [
        *saved.get("extensions", []),
        {
            "round": ckpt["round"],
            "epochs": saved_config.epochs,
            "rounds": saved["rounds"],
            "epsilon_planned": planned,
        },
    ]
    folder.write_config(
        {
            **_saved_config(config, p, rounds, saved.get("checkpoint_every"), extensions),
            "calibration": saved.get("calibration"),
            "defaults": saved.get("defaults"),
            "data": data.public_shape(dataset),
            "models": saved.get("models"),
            "engine": saved.get("engine", INPROCESS),
        }
    )


def _ledger_expected(config: TrainConfig, p, records: int) -> dict:
    """The ledger parameters the saved config makes (the journal's must equal them)."""
    return {
        "release": _release_dict(p.release),
        "delta": config.delta,
        "accountant": config.accountant,
        "epsilon_budget": config.epsilon if math.isfinite(config.epsilon) else None,
        "schedule": {
            "devices": config.devices,
            "dataset_size": records,
            "threat": config.threat,
            "super_batch": config.super_batch,
        },
    }


class _Loop:
    """The training loop of a run folder: evaluations, checkpoints, the finish."""

    def __init__(
        self,
        folder: RunFolder,
        config,
        dataset,
        sched: Scheduler,
        p,
        rounds: int,
        every: int,
        wall_before: float = 0.0,
        signals: stopping.Signals | None = None,
    ):
        self.signals = signals or stopping.Signals()
        self.folder, self.config, self.dataset, self.sched, self.p = folder, config, dataset, sched, p
        self.rounds, self.every, self.wall_before = rounds, every, wall_before
        self.epoch_rounds = steps_per_epoch(config, len(dataset.y_train))
        self.evals = {max(1, round(k * rounds / config.evals)) for k in range(1, config.evals + 1)}
        self.start = time.perf_counter()
        self.saved_at = None

    def evaluate(self, r: int, stopped: str | None = None) -> None:
        """A metrics row at round ``r``; ``stopped``: the evaluation of a stop signal's end,
        marked so, which a resume drops (the run's planned evaluations go on)."""
        ev = self.sched.evaluate(self.dataset.x_test, self.dataset.y_test)
        divergence.check(self.sched, ev)
        ledger = self.sched.ledger
        self.folder.append_metrics(
            {
                "round": r,
                "epoch": r / self.epoch_rounds,
                "test_accuracy": ev.test_accuracy,
                "test_loss": ev.test_loss,
                "bytes_up": _public_up(self.config, ev.bytes_up),
                "bytes_down": ev.bytes_down,
                "epsilon_spent": ledger.epsilon_spent() if ledger is not None else None,
                "wall_seconds": self.wall_before + time.perf_counter() - self.start,
                **({"stopped": stopped} if stopped else {}),
            }
        )

    def checkpoint(self) -> None:
        at = (self.sched.round, len(self.folder.metrics))
        if at == self.saved_at:
            return
        self.folder.save_checkpoint(
            self.sched.round,
            self.sched.state_dict(),
            self.sched.recorder,
            self.sched.traffic.state_dict(),
            {"config": self.config.to_dict(), "sigma": self.p.sigma, "rounds": self.rounds},
        )
        self.saved_at = at

    def _at(self, r: int) -> None:
        if r in self.evals or self.sched.stopped:
            self.evaluate(r)
        if r % self.every == 0 and not self.sched.stopped:
            self.checkpoint()

    def run(self, progress, fresh: bool = False) -> dict:
        """Train to the planned rounds; a stop signal ends it at a round's end (``stopping``)."""
        with self.signals.deferred():
            return self._run(progress, fresh)

    def _run(self, progress, fresh: bool) -> dict:
        sched = self.sched
        if fresh:
            self.evaluate(0)
            self.checkpoint()
            self.folder.commit()
        bar = progress(total=self.rounds) if progress else None
        if bar and sched.round:
            bar.update(sched.round)

        def tick() -> None:
            if bar:
                bar.update()
            self.signals.check()

        try:
            try:
                self.signals.check()
                sched.run(self.rounds, lambda r: r in self.evals or r % self.every == 0, self._at, tick=tick)
            except stopping.Stop as stop:
                sched.finish_started()
                sched.stopped = stop.reason
                self.evaluate(sched.round, None if sched.round in self.evals else stop.reason)
            finally:
                if bar:
                    bar.close()
        except divergence.Diverged as exc:  # at an evaluation, or a NaN about to be released
            # a complete folder that says so (its state up to the last checkpoint, no NaN saved);
            # --resume refuses it rather than diverge again
            advised = divergence.advised(exc, sched.method)
            sched.stopped = stopping.DIVERGED
            self._finish({"failure": str(advised)})
            raise advised from None
        self.checkpoint()
        return self._finish()

    def _finish(self, extra: dict | None = None) -> dict:
        """The summary (with ``extra``) and plots of the evaluations so far: the run is finished."""
        rows = self.folder.metrics
        summary = _summary(self.config, self.p, self.sched, self.sched.ledger, rows, self.rounds)
        guess = plots.chance(self.dataset.y_test) / 100.0
        method = self.sched.method
        summary["diverged"] = divergence.collapse(
            rows,
            guess,
            divergence.advice(method),
            divergence.advice(method, divergence.OVERCONFIDENT_CUT),
        )
        plots.write(self.folder.path, rows, self.config, chance=100.0 * guess)
        self.folder.finish({**summary, **(extra or {})})
        return summary


def _public_up(config: TrainConfig, up: int) -> int | None:
    """Bytes up as a public file may state them: None where they count secret batch sizes."""
    return None if sizes_secret(config.threat) else up


def _release_dict(release) -> dict | None:
    return None if release is None else dataclasses.asdict(release)


CURVE_KEYS = ("round", "epoch", "test_accuracy", "test_loss", "bytes_up", "bytes_down", "epsilon_spent")


def _summary(config, p, sched, ledger, rows: list[dict], rounds) -> dict:
    """The run's summary: the last evaluation, the best one (``best``: the highest test accuracy,
    chosen on the test split, so optimistic) and every evaluation (``curve``)."""
    last = rows[-1]
    best = max(rows, key=lambda r: r["test_accuracy"])
    spent = ledger.epsilon_spent() if ledger is not None else None
    if label_dp(config):
        spent = config.epsilon if math.isfinite(config.epsilon) else None
    return {
        "dataset": config.dataset,
        "method": config.method,
        "devices": config.devices,
        "test_accuracy": last["test_accuracy"],
        "test_loss": last["test_loss"],
        "rounds": sched.round,
        "rounds_planned": rounds,
        "bytes_up": _public_up(config, sched.traffic.total_up),
        "bytes_down": sched.traffic.total_down,
        "epsilon_spent": spent,
        "epsilon_budget": config.epsilon if math.isfinite(config.epsilon) else None,
        "delta": 0.0 if label_dp(config) else config.delta,
        "protects": methods.get(config.method).PROTECTS,
        "threat": config.threat,
        "accountant": config.accountant,
        "sigma": p.sigma,
        "mechanisms": privacy.mechanisms(p, ledger),
        "stopped": sched.stopped,
        "wall_seconds": last["wall_seconds"],
        "seed": config.seed,
        "best": {k: best[k] for k in CURVE_KEYS},
        "curve": [{k: r[k] for k in CURVE_KEYS} for r in rows],
    }
