"""The run configuration: one dataclass, built from CLI flags and/or a JSON file, validated.

Every field is a JSON key of ``--config FILE`` and of the run folder's ``config.json``, which is
public: the secret seed of the parties' noise is not a field (``privzv.training.run_folder``).
Defaults: arXiv:2502.20565v2 App. G (lambda=1e-3, server momentum 0.9, delta=1e-5), arXiv:2502.20565v3 App. C
(ZO device momentum 0.9). Fields left ``None`` (C, the learning rates) are filled per run by
``privzv.training.defaults`` (tuned values where swept, else C=10 and a size-normalised ZO rate)
and saved in the run's config.json.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from privzv.cliutil import read_json
from privzv.errors import PrivzvError

FREEZE = ("devices", "server")
CHECKPOINT_EVERY = 200   # default rounds between a run's checkpoints (not a config field)
SERVER_UPDATES = ("fo", "zo")
HEAD_SAMPLINGS = ("batch", "table")
# Upper bounds on sizes that would otherwise exhaust memory or time (docs/cli.md, "Caps").
CAPS = {"records": 10_000_000, "devices": 1024, "batch_size": 1_000_000, "embed_dim": 4096, "evals": 10_000,
        "threads": 256, "max_delay": 1_000_000, "super_batch": 1_000_000, "head_window": 1_000_000, "epochs": 100_000.0,
        "clip": 1e6, "head_clip": 1e6, "lam": 1.0, "sigma": 1e6, "lr_device": 1e3, "lr_server": 1e3,
        "seed": 2**63 - 1, "directions": 1024}
CONFIG_BYTES = 1 << 20   # --config files larger than 1 MiB are refused


@dataclasses.dataclass
class TrainConfig:
    dataset: str = "digits"
    data_dir: str | None = None
    records: int | None = None       # mnist1d: signals to generate (None: its published 5,000)
    method: str = "dpzv"
    devices: int = 4
    epochs: float = 10.0
    batch_size: int = 32
    epsilon: float = math.inf        # inf: no noise (unless sigma is given)
    delta: float = 1e-5
    threat: str = "device"
    accountant: str = "best"
    neighbors: str = "replace-one"
    super_batch: int | None = None   # B' of threat "secret-subsampling"
    sigma: float | None = None       # give the noise std directly instead of calibrating it
    clip: float | None = None        # C; None: training.defaults (tuned, else 10)
    head_clip: float | None = None   # C_h of the server head's DP update; None: training.defaults (tuned, else 0.1)
    head_share: float | None = None  # fraction of each round's 1/z^2 spent on the head update (None: methods.head.share)
    head_window: int | None = None   # DP head: one step per q batches of each device (0: every round; None: methods.head.window)
    head_sampling: str | None = None  # DP head on the round's "batch" or on a secret sample of the "table" (None: methods.head.sampling)
    no_clip: bool = False            # ablation (needs no noise)
    lam: float = 1e-3                # ZO smoothing lambda
    directions: int = 1              # dpzv: K perturbation directions per device step
    lr_device: float | None = None   # None: the method's default
    lr_server: float | None = None
    momentum: float = 0.9            # server (and first-order device) SGD momentum
    device_momentum: float = 0.9     # ZO device momentum, arXiv:2502.20565v3, App. C (a buffer of d_m floats)
    server_update: str = "fo"        # dpzv: first-order (fo) or zeroth-order (zo) server update
    embed_dim: int = 16
    server_kind: str = "mlp"
    activation: list[float] | None = None   # activation probabilities, uniform if None
    max_delay: int = 0               # bounded staleness of the server's table, in rounds
    freeze: str | None = None        # ablation: "devices" or "server"
    evals: int = 10                  # evaluations over the run
    transcripts: bool = True
    threads: int = 1                 # torch CPU threads (1 is fastest for the small models)
    seed: int = 0                    # public; the secret seed is not a config field (RunFolder)
    secure_noise: bool = False       # DP noise and keep decisions from OpenDP / the OS CSPRNG

    @property
    def private(self) -> bool:
        """True when the run adds DP noise (finite epsilon or a positive sigma)."""
        return math.isfinite(self.epsilon) or bool(self.sigma)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["epsilon"] = None if math.isinf(self.epsilon) else self.epsilon
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        if "secret_seed" in d:
            raise PrivzvError("config key 'secret_seed': the secret seed is not part of the public "
                              "config; pass --secret-seed (kept in the run's private area)")
        unknown = sorted(set(d) - names)
        if unknown:
            raise PrivzvError(f"config key {unknown[0]!r}: allowed are {', '.join(sorted(names))}")
        d = dict(d)
        if d.get("epsilon", 0) is None:
            d["epsilon"] = math.inf
        for name, value in d.items():
            kinds = _KINDS[name]
            if not (value is None and name in _OPTIONAL) and (
                    not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                allowed = " or ".join(k.__name__ for k in kinds) + (" or null" if name in _OPTIONAL else "")
                raise PrivzvError(f"config {name} {value!r}: must be {allowed}")
        return cls(**d)

    @classmethod
    def from_json(cls, path: str | Path) -> "TrainConfig":
        d = read_json(path, f"--config {str(path)!r}", max_bytes=CONFIG_BYTES)
        if not isinstance(d, dict):
            raise PrivzvError(f"--config {str(path)!r}: must hold a JSON object")
        return cls.from_dict(d)

    def validate(self) -> "TrainConfig":
        """Check names and ranges; raise PrivzvError naming the field. Returns self."""
        from privzv.accountants import ACCOUNTANTS, RIGOROUS
        from privzv.release import NEIGHBORS, THREATS
        from privzv.training import data, methods, models

        _choice("dataset", self.dataset, data.DATASETS)
        methods.get(self.method)
        _choice("threat", self.threat, THREATS)
        _choice("accountant", self.accountant, ACCOUNTANTS)
        if self.accountant not in RIGOROUS:
            raise PrivzvError(f"--accountant {self.accountant}: not a rigorous upper bound; training "
                              f"and its ledger take {', '.join(RIGOROUS)} (compare with privzv account)")
        _choice("neighbors", self.neighbors, NEIGHBORS)
        _choice("server_update", self.server_update, SERVER_UPDATES)
        _choice("server_kind", self.server_kind, models.SERVER_KINDS)
        if self.freeze is not None:
            _choice("freeze", self.freeze, FREEZE)
        for name in ("devices", "batch_size", "embed_dim", "evals", "threads", "directions"):
            _int_at_least(name, getattr(self, name), 1)
        _int_at_least("max_delay", self.max_delay, 0)
        _int_at_least("seed", self.seed, 0)
        if self.super_batch is not None:
            _int_at_least("super_batch", self.super_batch, 1)
        if self.head_window is not None:
            _int_at_least("head_window", self.head_window, 0)
        if self.records is not None:
            _int_at_least("records", self.records, 10)
            if self.dataset != "mnist1d" or self.records % 10:
                raise PrivzvError(f"--records {self.records}: only for --dataset mnist1d, a "
                                  "multiple of 10 (signals per class x 10 classes)")
        for name, cap in CAPS.items():
            value = getattr(self, name)
            if _finite(value) and value > cap:
                raise PrivzvError(f"--{name.replace('_', '-')} {value!r}: must be <= {cap:g}"
                                  " (cap against exhausting memory or time, docs/cli.md)")
        for name in ("epochs", "clip", "lam", "head_clip"):
            if getattr(self, name) is not None or name not in ("clip", "head_clip"):
                _positive(name, getattr(self, name))
        if self.head_sampling is not None:
            _choice("head_sampling", self.head_sampling, HEAD_SAMPLINGS)
        if self.head_share is not None and not (_finite(self.head_share) and 0 < self.head_share <= 1):
            raise PrivzvError(f"--head-share {self.head_share!r}: must be a number in (0, 1]")
        if self.head_share == 1 and self.freeze != "devices":
            raise PrivzvError("--head-share 1: sends no downlink (the whole budget on the head), "
                              "so the devices cannot train; only with --freeze devices")
        for name in ("lr_device", "lr_server", "sigma"):
            value = getattr(self, name)
            if value is not None and not (_finite(value) and value >= 0):
                raise PrivzvError(f"--{name.replace('_', '-')} {value!r}: must be a finite number >= 0")
        for name in ("momentum", "device_momentum"):
            value = getattr(self, name)
            if not (_finite(value) and 0 <= value < 1):
                raise PrivzvError(f"{name} {value!r}: must be in [0, 1)")
        if not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0):
            raise PrivzvError(f"--epsilon {self.epsilon!r}: must be > 0 (inf for no noise)")
        if not (_finite(self.delta) and 0 < self.delta < 1):
            raise PrivzvError(f"--delta {self.delta!r}: must be in (0, 1)")
        if self.neighbors != "replace-one":
            raise PrivzvError(f"neighbors {self.neighbors!r}: a training run reveals D (its "
                              "transcripts state it, its epoch permutations depend on it), so "
                              "neighbours that change D are not coherent; only replace-one "
                              "(privzv account/calibrate still answer add-remove)")
        if self.threat == "secret-subsampling":
            if self.super_batch is None or self.super_batch < self.batch_size:
                raise PrivzvError(f"super_batch {self.super_batch!r}: threat secret-subsampling needs"
                                  f" super_batch >= --batch-size {self.batch_size} (set it in --config)")
        if self.directions > 1 and self.method != "dpzv":
            raise PrivzvError(f"--directions {self.directions}: more than one direction is "
                              f"implemented for --method dpzv only, not {self.method}")
        if self.no_clip and self.private:
            raise PrivzvError("no_clip: the no-clipping ablation has unbounded sensitivity; use it"
                              " only without noise (--epsilon inf, no --sigma)")
        if self.activation is not None:
            probs = self.activation
            if (len(probs) != self.devices or any(not _finite(p) or p < 0 for p in probs)
                    or not math.isclose(sum(probs), 1.0, rel_tol=1e-6)):
                raise PrivzvError(f"activation {probs!r}: must be {self.devices} probabilities >= 0"
                                  " summing to 1")
        return self


_KINDS = {"dataset": (str,), "data_dir": (str,), "records": (int,), "method": (str,), "devices": (int,), "epochs": (int, float),
          "batch_size": (int,), "epsilon": (int, float), "delta": (int, float), "threat": (str,),
          "accountant": (str,), "neighbors": (str,), "super_batch": (int,), "sigma": (int, float),
          "clip": (int, float), "head_clip": (int, float), "head_share": (int, float), "head_window": (int,), "head_sampling": (str,), "no_clip": (bool,), "directions": (int,), "lam": (int, float), "lr_device": (int, float),
          "lr_server": (int, float), "momentum": (int, float), "device_momentum": (int, float),
          "server_update": (str,), "embed_dim": (int,), "server_kind": (str,), "activation": (list,),
          "max_delay": (int,), "freeze": (str,), "evals": (int,), "transcripts": (bool,), "threads": (int,),
          "seed": (int,), "secure_noise": (bool,)}
_OPTIONAL = {"data_dir", "records", "super_batch", "sigma", "clip", "head_clip", "head_share", "head_window", "head_sampling", "lr_device", "lr_server", "activation", "freeze"}


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise PrivzvError(f"--{name.replace('_', '-')} {value!r}: allowed are {', '.join(allowed)}")


def _int_at_least(name: str, value, low: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise PrivzvError(f"--{name.replace('_', '-')} {value!r}: must be an integer >= {low}")


def _positive(name: str, value) -> None:
    if not (_finite(value) and value > 0):
        raise PrivzvError(f"--{name.replace('_', '-')} {value!r}: must be a finite number > 0")
