"""The run configuration: one dataclass, built from CLI flags and/or a JSON file, validated.

Every field is a JSON key of ``--config FILE`` and of the run folder's ``config.json``, which is
public: the secret seed of the parties' noise is not a field (``privzv.training.run_folder``).
Defaults: arXiv:2502.20565v2 App. G (lambda=1e-3, server momentum 0.9, delta=1e-5), arXiv:2502.20565v3 App. C
(ZO device momentum 0.9). Fields left ``None`` (C, the learning rates) are filled per run by
``privzv.training.defaults`` (tuned values where swept, else C=10 and a size-normalised ZO rate)
and saved in the run's config.json.

Each field is declared once, with ``privzv.training.schema.field`` (type, default, range, cap,
choices, flag, help): its checks, JSON type, flag and docs/cli.md's reference are made from that.
Rules that tie fields together are the named functions of ``RULES``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import numbers
from pathlib import Path

from privzv.cliutil import read_json
from privzv.errors import PrivzvError
from privzv.training import methods, schema
from privzv.training.schema import field

FREEZE = ("devices", "server")
CHECKPOINT_EVERY = 200  # default rounds between a run's checkpoints (not a config field)
SERVER_UPDATES = ("fo", "zo")
HEAD_SAMPLINGS = ("batch", "table")
CONFIG_BYTES = 1 << 20  # --config files larger than 1 MiB are refused


def _registry(module: str, attr: str):
    """A field's choices, read from a registry when asked (its module is imported then)."""

    def read():
        value = getattr(importlib.import_module(module), attr)
        return value() if callable(value) else value

    return read


@dataclasses.dataclass
class TrainConfig:
    """A training run's settings: each field declared once (``privzv.training.schema.field``),
    its type, default, range, cap, choices, CLI flag and help; docs/cli.md's reference is made
    from these declarations."""

    dataset: str = field(
        "digits", "the dataset (docs/data.md)", choices=_registry("privzv.training.data", "names")
    )
    data_dir: str | None = field(
        None,
        "folder with MNIST (IDX/npz), CIFAR-10 (python batches), an image folder, ModelNet40 views "
        "or Amazon Review Polarity (docs/data.md)",
    )
    data_file: str | None = field(None, "csv, parquet, text-csv: the table of records (docs/data.md)")
    test_file: str | None = field(
        None, "csv, parquet, text-csv: a test table of the same columns (default: a seeded 80/20 split)"
    )
    device_columns: str | None = field(
        None,
        "csv, parquet, text-csv: columns per device, 'a,b;c,d' (default: the features in M contiguous "
        "groups; text-csv: one group is split into M word spans)",
    )
    label_column: str | None = field(None, "csv, parquet, text-csv: the label column")
    labels: str | None = field(
        None,
        "csv, parquet, text-csv: the public label set 'a,b,...', sorted onto 0..K-1 (not read from data)",
    )
    ranges: str | None = field(
        None,
        "csv, parquet: public value ranges 'col=lo:hi,...' ('*=lo:hi': every column), clipped and "
        "mapped onto [-1, 1] (default: values as they are; never statistics of the data)",
    )
    channels: int | None = field(
        None, "image-folder, modelnet40: 1 (grayscale) or 3 (RGB); default 3, modelnet40 1", choices=(1, 3)
    )
    image_size: int | None = field(
        None,
        "image-folder, modelnet40: resize every image to SIZE x SIZE (default: as stored)",
        low=1,
        cap=4096,
    )
    tokenizer: str | None = field(
        None, "text-csv, amazon-polarity: 'hash' (default) or a local transformers tokenizer folder"
    )
    seq_len: int | None = field(
        None, "text-csv, amazon-polarity: tokens per device segment (default 64)", low=1, cap=65536
    )
    records: int | None = field(
        None,
        "mnist1d: signals to generate (a multiple of 10, split 80/20, cached; default its published "
        "5,000); amazon-polarity: a seeded subset of N training and N // 4 test records",
        low=10,
        cap=10_000_000,
    )
    method: str = field(
        methods.DEFAULT, 'the training method (docs/training.md, "Methods")', choices=lambda: methods.METHODS
    )
    devices: int = field(4, "M, the devices the features are split over", low=1, cap=1024)
    epochs: float = field(10.0, "device epochs", low=0, low_open=True, cap=100_000.0)
    batch_size: int = field(32, "B, records per round", low=1, cap=1_000_000)
    epsilon: float = field(
        math.inf,
        "privacy budget; inf for no noise (unless sigma is given)",
        low=0,
        low_open=True,
        allow_inf=True,
    )
    delta: float = field(1e-5, "the budget's delta", low=0, high=1, low_open=True, high_open=True)
    threat: str = field(
        "device",
        "the observer the epsilon is about (docs/accounting.md)",
        choices=_registry("privzv.release", "THREATS"),
    )
    accountant: str = field(
        "best",
        "best: the smaller rigorous bound of pld and rdp, as for calibrate and account; rigorous ones only",
        choices=_registry("privzv.accountants", "ACCOUNTANTS"),
    )
    neighbors: str = field(
        "replace-one",
        "neighbouring relation (replace-one only: a run reveals D)",
        choices=_registry("privzv.release", "NEIGHBORS"),
        flag=schema.NONE,
    )
    super_batch: int | None = field(
        None, "B' of threat secret-subsampling", low=1, cap=1_000_000, flag=schema.NONE
    )
    sigma: float | None = field(None, "noise std, instead of calibrating it", low=0, cap=1e6)
    clip: float | None = field(
        None,
        "C of the DP release; default: the tuned value (training/tuned.py), else the method's "
        "DEFAULT_CLIP (0.1 where it noises a per-record gradient vector, 1 where it releases scalar "
        "loss differences), else 10",
        low=0,
        low_open=True,
        cap=1e6,
    )
    head_clip: float | None = field(
        None,
        "C_h of the server head's DP update (private runs); "
        "default: the tuned value (training/tuned.py), else 0.1",
        low=0,
        low_open=True,
        cap=1e6,
    )
    head_share: float | None = field(
        None,
        "share of each round's privacy (1/z^2) on the head "
        "update; default 1 with --freeze devices (no downlink at all), "
        "else the method's share with --head-sampling table (0.99 unless it declares "
        "its own: docs/training.md) and 0.5 with batch",
        low=0,
        high=1,
        low_open=True,
    )
    head_window: int | None = field(
        None,
        "DP head: one step per q batches of each device, pooled "
        "(0: every round; default 4 under threat device with "
        "round-robin activation, else 0)",
        low=0,
        cap=1_000_000,
    )
    head_sampling: str | None = field(
        None,
        "DP head: table (default for a private run whose "
        "head trains): one step per round on a secret "
        "Poisson sample of the server's table at rate B/D, amplified "
        "against every party; batch: on the round's batch (pooled "
        "per --head-window), today's comparison",
        choices=HEAD_SAMPLINGS,
    )
    no_clip: bool = field(False, "ablation: no clipping (needs no noise)", flag=schema.NONE)
    lam: float = field(1e-3, "ZO smoothing lambda", low=0, low_open=True, cap=1.0)
    directions: int = field(
        1,
        "K perturbation directions per device step, for methods that "
        "implement them (each record's K loss differences clipped as one "
        "vector; same sensitivity)",
        low=1,
        cap=1024,
    )
    lr_device: float | None = field(
        None,
        "device learning rate; default: tuned, else the method's (a seeded ZO device step: 0.0125/sqrt(d))",
        low=0,
        cap=1e3,
    )
    lr_server: float | None = field(
        None, "server learning rate; default: tuned, else the method's", low=0, cap=1e3
    )
    momentum: float = field(
        0.9, "server (and first-order device) SGD momentum", low=0, high=1, high_open=True, flag=schema.NONE
    )
    device_momentum: float = field(
        0.9,
        "ZO device momentum, arXiv:2502.20565v3, App. C (a buffer of d_m floats)",
        low=0,
        high=1,
        high_open=True,
        flag=schema.NONE,
    )
    server_update: str = field(
        "fo",
        "first-order (fo) or zeroth-order (zo) server update, for methods that offer both",
        choices=SERVER_UPDATES,
        flag=schema.NONE,
    )
    embed_dim: int = field(16, "embedding size per device (the bottleneck)", low=1, cap=4096)
    device_model: str | None = field(
        None,
        "the devices' model (default: the dataset's own; docs/training.md, \"Your models\")",
        choices=_registry("privzv.training.models", "device_model_names"),
    )
    model_weights: str | None = field(
        None,
        "resnet18: a torchvision state_dict file; bert: a BertConfig JSON file or a local model directory",
    )
    server_kind: str = field(
        "mlp",
        "server head: mlp, mlp-gain (mlp on its input times 10), or sum (needs --embed-dim = classes)",
        choices=_registry("privzv.training.models", "SERVER_KINDS"),
    )
    activation: list[float] | None = field(
        None, "activation probabilities of the M devices (null: uniform)", flag=schema.NONE
    )
    max_delay: int = field(
        0, "bounded staleness of the server's table, in rounds", low=0, cap=1_000_000, flag=schema.NONE
    )
    freeze: str | None = field(None, "ablation: do not update these parties", choices=FREEZE)
    evals: int = field(10, "evaluations over the run", low=1, cap=10_000, flag=schema.NONE)
    transcripts: bool = field(True, "record every party's transcript", flag=schema.OFF)
    threads: int = field(
        1, "torch CPU threads (1 is fastest for the small models)", low=1, cap=256, flag=schema.NONE
    )
    device: str = field(
        "cpu",
        "where the models, head, table and labels live: cpu, cuda, or auto (cuda when available); "
        'the data stay where the dataset put them (docs/training.md, "Devices and accelerators")',
        choices=_registry("privzv.training.accelerator", "DEVICES"),
    )
    autocast: str = field(
        "none",
        "autocast of the devices' forwards (parameters stay fp32): none, bf16, or fp16 (CUDA only)",
        choices=_registry("privzv.training.accelerator", "AUTOCAST"),
    )
    seed: int = field(
        0, "public seed; the secret seed is not a config field (--secret-seed)", low=0, cap=2**63 - 1
    )
    secure_noise: bool = field(
        False,
        "draw DP noise and keep decisions from OpenDP / the OS "
        "CSPRNG (floating-point safe, not reproducible; needs "
        "privzv[secure]; docs/training.md)",
        flag=schema.ON,
    )

    def __post_init__(self) -> None:
        # numpy integer and floating scalars are numbers (privzv.checks' rule): kept as Python int
        # and float, the types of the config's JSON and of its checks (a numpy bool stays refused)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
                setattr(self, f.name, int(value))
            elif isinstance(value, numbers.Real) and not isinstance(value, (bool, int, float)):
                setattr(self, f.name, float(value))

    @property
    def private(self) -> bool:
        """True when the run adds DP noise (finite epsilon or a positive sigma)."""
        return math.isfinite(self.epsilon) or bool(self.sigma)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["epsilon"] = None if math.isinf(self.epsilon) else self.epsilon
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        if "secret_seed" in d:
            raise PrivzvError(
                "config key 'secret_seed': the secret seed is not part of the public "
                "config; pass --secret-seed (kept in the run's private area)"
            )
        unknown = sorted(set(d) - names)
        if unknown:
            raise PrivzvError(f"config key {unknown[0]!r}: allowed are {', '.join(sorted(names))}")
        d = dict(d)
        if d.get("epsilon", 0) is None:
            d["epsilon"] = math.inf
        schema.check_types(cls, d)
        return cls(**d)

    @classmethod
    def from_json(cls, path: str | Path) -> TrainConfig:
        d = read_json(path, f"--config {str(path)!r}", max_bytes=CONFIG_BYTES)
        if not isinstance(d, dict):
            raise PrivzvError(f"--config {str(path)!r}: must hold a JSON object")
        return cls.from_dict(d)

    def validate(self, own_data: bool = False) -> TrainConfig:
        """Check every field against its declaration, then the cross-field ``RULES``; raise
        PrivzvError naming the field. ``own_data``: the dataset is given from Python
        (``privzv.training.fit``), so ``dataset`` is its name, not a registered one. Returns self."""
        schema.check_fields(self, skip=("dataset",) if own_data else ())
        for rule in RULES:
            rule(self)
        return self


# Upper bounds on sizes that would otherwise exhaust memory or time (docs/cli.md, "Caps").
CAPS = {f.name: f.spec.cap for f in schema.fields(TrainConfig) if f.spec.cap is not None}


# --------------------------------------------------------------------------- cross-field rules
def rigorous_accountant(c: TrainConfig) -> None:
    from privzv.accountants import RIGOROUS

    if c.accountant not in RIGOROUS:
        raise PrivzvError(
            f"--accountant {c.accountant}: not a rigorous upper bound; training "
            f"and its ledger take {', '.join(RIGOROUS)} (compare with privzv account)"
        )


def records_where_generated(c: TrainConfig) -> None:
    from privzv.training import data

    makers = [name for name, d in data.REGISTRY.items() if d.records]
    if c.records is None:
        return
    if c.dataset not in makers:
        raise PrivzvError(f"--records {c.records}: only for --dataset {' or '.join(makers)}")
    multiple = data.REGISTRY[c.dataset].records_multiple
    if c.records % multiple:
        raise PrivzvError(f"--records {c.records}: --dataset {c.dataset} takes a multiple of {multiple}")


def dataset_options(c: TrainConfig) -> None:
    from privzv.training import data

    data.check_options(c.dataset, {key: getattr(c, key) for key in data.OPTIONS})


def whole_head_share_freezes_devices(c: TrainConfig) -> None:
    if c.head_share == 1 and c.freeze != "devices":
        raise PrivzvError(
            "--head-share 1: sends no downlink (the whole budget on the head), "
            "so the devices cannot train; only with --freeze devices"
        )


def replace_one_neighbours(c: TrainConfig) -> None:
    if c.neighbors != "replace-one":
        raise PrivzvError(
            f"neighbors {c.neighbors!r}: a training run reveals D (its "
            "transcripts state it, its epoch permutations depend on it), so "
            "neighbours that change D are not coherent; only replace-one "
            "(privzv account/calibrate still answer add-remove)"
        )


def super_batch_covers_batch(c: TrainConfig) -> None:
    if c.threat == "secret-subsampling" and (c.super_batch is None or c.super_batch < c.batch_size):
        raise PrivzvError(
            f"super_batch {c.super_batch!r}: threat secret-subsampling needs"
            f" super_batch >= --batch-size {c.batch_size} (set it in --config)"
        )


def directions_supported(c: TrainConfig) -> None:
    if c.directions > 1 and not methods.get(c.method).MULTI_DIRECTION:
        able = [name for name in methods.METHODS if methods.get(name).MULTI_DIRECTION]
        raise PrivzvError(
            f"--directions {c.directions}: more than one direction is "
            f"implemented for --method {' or '.join(able)} only, not {c.method}"
        )


def no_clip_without_noise(c: TrainConfig) -> None:
    if c.no_clip and c.private:
        raise PrivzvError(
            "no_clip: the no-clipping ablation has unbounded sensitivity; use it"
            " only without noise (--epsilon inf, no --sigma)"
        )


def activation_distribution(c: TrainConfig) -> None:
    probs = c.activation
    if probs is not None and (
        len(probs) != c.devices
        or any(p < 0 for p in probs)
        or not math.isclose(sum(probs), 1.0, rel_tol=1e-6)
    ):
        raise PrivzvError(f"activation {probs!r}: must be {c.devices} probabilities >= 0 summing to 1")


RULES = (
    rigorous_accountant,
    records_where_generated,
    dataset_options,
    whole_head_share_freezes_devices,
    replace_one_neighbours,
    super_batch_covers_batch,
    directions_supported,
    no_clip_without_noise,
    activation_distribution,
)
