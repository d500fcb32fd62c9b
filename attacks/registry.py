"""The transcript attacks as registered objects: ``ATTACKS[name]`` is an :class:`Attack`.

``run_attack(name, run_dir, seed)`` attacks a finished run, ``attack_transcripts(name, load,
dataset, seed)`` transcripts given by ``load(party)``; both return an :class:`AttackResult`
(the metrics, and the verdict against the attack's trivial baseline, ``privzv.attacks.verdict``).
An attack is declared once (``privzv.attacks.catalog``, with :func:`register`): its name, what it
reads, which runs it applies to and its measure; the CLI's choices and ``--help`` and the list in
docs/attacks.md come from here.

An attack reads the attacker's transcript only (``privzv.training.transcript.load``) and the
run's public config (``privzv.training.run_folder.public_config``, which refuses a path inside
the run's private area: the secret seed and noise states stay unread). The run's
dataset is loaded beside it for two things the attacker is granted or the scorer needs, kept
apart: the attacker's own features and its auxiliary knowledge (a few labels per class, a few
victim records), and the ground truth that scores the attack (labels, victim features).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path

from privzv.attacks import verdict as verdicts
from privzv.errors import PrivzvError

DEFAULTS = {"attacker": 0, "victim": 1, "known_per_class": 10, "aux": 200, "regressor": "ridge"}
PARTIES = ("device", "server", "eavesdropper")
WHITE_BOX, OWN = "white-box", "own"  # models an attack reads: every party's, or its own


@dataclasses.dataclass
class Context:
    """What one attack is given: ``load(party)`` gives a party's transcript; ``dataset`` the
    attacker's knowledge and the ground truth; ``models`` the run's trained models as the attack
    may read them (``party_models.RunModels``, or None); ``public`` the run's public config."""

    load: Callable[[str], object]
    dataset: object
    seed: int
    options: dict
    models: object = None
    public: dict | None = None

    @property
    def attacker(self) -> int:
        return self.options["attacker"]

    @property
    def victim(self) -> int:
        return self.options["victim"]


@dataclasses.dataclass(frozen=True)
class AttackResult:
    """One attack on one run: its ``metrics``, the ``verdict`` against its baseline, and the
    run's setting (``setting``: run, method, dataset, server_kind, sigma, epsilon, threat)."""

    attack: str
    party: str
    seed: int
    options: dict
    metrics: dict
    nonfinite_values: int
    verdict: verdicts.Verdict
    setting: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        """Every number and the verdict, for ``--json``."""
        out = dataclasses.asdict(self)
        out["verdict"] = self.verdict.to_dict()
        return out


@dataclasses.dataclass(frozen=True)
class Attack:
    """A transcript attack, declared once.

    ``party``: the party it plays (``PARTIES``; a device attack plays device ``attacker``);
    ``reads``: what it reads, in words; ``transcript``: the directions of its party's transcript
    entries it reads (``sent``, ``received``), ``models``: None, ``OWN`` or ``WHITE_BOX`` (with
    ``needs_models``: refused without the run's checkpoint; otherwise the transcript stands in);
    ``methods`` / ``server_kinds``: the runs it applies to (None: all), ``why`` (said when a run
    is refused for them); ``binary``: two classes only; ``needs_public``: the run's config;
    ``measure``: its headline (``privzv.attacks.verdict.MEASURES``) and ``baseline`` in words;
    ``score(ctx)``: ``(metrics, nonfinite_values)``. The threats it applies to follow from
    ``transcript``: a run's secret entries (``run_folder.secret_entries``) are not read.
    """

    name: str
    description: str
    party: str
    reads: str
    baseline: str
    measure: str
    score: Callable[[Context], tuple[dict, int]]
    transcript: tuple[str, ...] = ()
    models: str | None = None
    needs_models: bool = False
    methods: tuple[str, ...] | None = None
    server_kinds: tuple[str, ...] | None = None
    binary: bool = False
    needs_public: bool = False
    why: str = ""

    def __post_init__(self):
        if self.party not in PARTIES:
            raise PrivzvError(f"attack {self.name!r}: party {self.party!r}: allowed are {', '.join(PARTIES)}")
        verdicts.measure(self.measure)

    def transcript_party(self, options: dict) -> str:
        """Whose transcript it reads: the attacking device's, or the server's (the wire)."""
        return f"device{options['attacker']}" if self.party == "device" else "server"

    def player(self, options: dict) -> str:
        """The party it plays, as its result names it (``device0``, ``server``, ``eavesdropper``)."""
        return self.transcript_party(options) if self.party == "device" else self.party

    def reads_transcript(self, has_models: bool) -> bool:
        """Whether it reads a transcript (not, where its models stand in for it)."""
        return bool(self.transcript) and not (self.models and has_models)

    def refusal(self, cfg: dict | None, dataset, options: dict, has_models: bool) -> str | None:
        """Why this attack does not apply to the run of public config ``cfg`` (None: it does)."""
        known = cfg or {}
        for field, allowed in (("method", self.methods), ("server_kind", self.server_kinds)):
            if allowed is not None and field in known and known[field] not in allowed:
                return (
                    f"applies to runs with {field} {', '.join(allowed)}; this run's is "
                    f"{known[field]!r}" + (f" ({self.why})" if self.why else "")
                )
        if self.binary and dataset.num_classes != 2:
            return (
                f"needs a binary task (e.g. breast-cancer); {dataset.name} has {dataset.num_classes} classes"
            )
        if self.needs_models and not has_models:
            return "needs the run's trained models (checkpoint.pt)"
        if self.needs_public and cfg is None:
            return "needs the run's public config (config.json)"
        threat = known.get("threat")
        if threat is not None and self.reads_transcript(has_models):
            secret = _secret_directions(threat, self.transcript_party(options), dataset.devices)
            hidden = [d for d in self.transcript if d in secret]
            if hidden:
                return (
                    f"reads {self.transcript_party(options)}'s {' and '.join(hidden)} messages, "
                    f"which {threat!r} runs keep in their private area (they reveal the server's "
                    "Poisson batches); attacks read public files only"
                )
        return None

    def run(self, ctx: Context) -> AttackResult:
        """Score the attack on ``ctx``: its metrics and its verdict against the baseline."""
        metrics, nonfinite = self.score(ctx)
        return AttackResult(
            self.name,
            self.player(ctx.options),
            ctx.seed,
            ctx.options,
            metrics,
            nonfinite,
            verdicts.judge(self.measure, metrics, self.baseline),
        )


ATTACKS: dict[str, Attack] = {}


def register(attack: Attack) -> Attack:
    """Add ``attack`` to ``ATTACKS`` (a name taken twice is refused)."""
    if attack.name in ATTACKS:
        raise PrivzvError(f"attack {attack.name!r}: already registered")
    ATTACKS[attack.name] = attack
    return attack


def get(name: str) -> Attack:
    if name not in ATTACKS:
        raise PrivzvError(f"--attack {name!r}: allowed are {', '.join(ATTACKS)}")
    return ATTACKS[name]


def run_attack(name: str, run_dir, seed: int = 0, **options) -> AttackResult:
    """Attack the finished training run in ``run_dir``.

    ``options`` (defaults in ``DEFAULTS``): ``attacker`` / ``victim`` device indices,
    ``known_per_class`` labels the attacker knows, ``aux`` auxiliary victim records, ``regressor``.
    ``nonfinite_values`` counts the NaN/inf/huge message values replaced before attacking
    (a diverged run; see ``privzv.attacks.transcript_view``). An attack that does not apply to
    the run (``Attack.refusal``) is a ``PrivzvError``.
    """
    attack = get(name)
    from privzv.attacks import party_models
    from privzv.training import run_folder, transcript

    run = Path(run_dir)
    saved = run_folder.public_config(run)
    cfg = saved["config"]
    dataset = _dataset(cfg, saved.get("data"), f"--run {str(run)!r}")
    opt = _options(options, dataset)
    reader = party_models.WHITE_BOX if attack.models == WHITE_BOX else f"device{opt['attacker']}"
    models = party_models.for_run(run, cfg, dataset, reader)
    result = _attack(
        attack, cfg, Context(lambda party: transcript.load(run, party), dataset, seed, opt, models, saved)
    )
    setting = dict(
        run=str(run),
        method=cfg["method"],
        dataset=cfg["dataset"],
        server_kind=cfg["server_kind"],
        sigma=saved.get("sigma"),
        epsilon=cfg.get("epsilon"),
        delta=cfg.get("delta"),
        threat=cfg.get("threat"),
    )
    return dataclasses.replace(result, setting=setting)


def attack_transcripts(
    name: str,
    load: Callable[[str], object],
    dataset,
    seed: int = 0,
    models=None,
    public: dict | None = None,
    **options,
) -> AttackResult:
    """Run attack ``name`` on transcripts given by ``load(party)`` (a Transcript per party name).

    ``dataset`` (a ``privzv.training.data.VerticalDataset``) supplies the attacker's own features and
    auxiliary knowledge and the ground truth for scoring; nothing else of the run is read.
    ``models``: the run's trained models (``party_models.RunModels``). ``public``: the run's
    public config (``config.json``: ``config`` and ``sigma``); where given, the attack is refused
    on a run it does not apply to.
    """
    attack = get(name)
    ctx = Context(load, dataset, seed, _options(options, dataset), models, public)
    return _attack(attack, None if public is None else public["config"], ctx)


def _attack(attack: Attack, cfg: dict | None, ctx: Context) -> AttackResult:
    why = attack.refusal(cfg, ctx.dataset, ctx.options, ctx.models is not None)
    if why is not None:
        raise PrivzvError(f"attack {attack.name!r}: {why}")
    return attack.run(ctx)


def _options(options: dict, dataset) -> dict:
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise PrivzvError(f"attack option {unknown[0]!r}: allowed are {', '.join(DEFAULTS)}")
    opt = {**DEFAULTS, **options}
    for role in ("attacker", "victim"):
        m = opt[role]
        if not (isinstance(m, int) and not isinstance(m, bool) and 0 <= m < dataset.devices):
            raise PrivzvError(f"{role} {m!r}: allowed are device indices 0..{dataset.devices - 1}")
    return opt


def _secret_directions(threat: str, party: str, devices: int) -> set:
    """The directions of ``party``'s transcript that are wholly secret on a ``threat`` run."""
    from privzv.training import run_folder
    from privzv.training.messages import SERVER, device_name

    parties = [SERVER] + [device_name(m) for m in range(devices)]
    return {d for p, d, k in run_folder.secret_entries(threat, parties) if p == party and k == run_folder.ANY}


def threats(attack: Attack) -> list[str]:
    """The threats whose runs keep what ``attack`` reads public (for its description)."""
    from privzv.training import sampling

    options = {**DEFAULTS}
    return [
        t
        for t in sampling.ASSUMED
        if not attack.reads_transcript(False)
        or not set(attack.transcript) & _secret_directions(t, attack.transcript_party(options), 2)
    ]


def markdown() -> str:
    """The attacks as docs/attacks.md lists them (a test keeps the two the same)."""
    rows = [
        "| `--attack` | party | reads | applies to | baseline | verdict on |",
        "|---|---|---|---|---|---|",
    ]
    for a in ATTACKS.values():
        runs = [
            f"methods {', '.join(a.methods)}" if a.methods else "every method",
            f"server {', '.join(a.server_kinds)}" if a.server_kinds else "any server",
            f"threats {', '.join(threats(a))}"
            + (" (any with checkpoint.pt)" if a.models and a.transcript else ""),
        ]
        if a.binary:
            runs.append("binary tasks")
        if a.needs_models:
            runs.append("needs checkpoint.pt")
        m = verdicts.measure(a.measure)
        rows.append(
            f"| `{a.name}` | {a.party} | {a.reads} | {'; '.join(runs)} | {a.baseline} | "
            f"{m.metric} ({m.method}) |"
        )
    return "\n".join(rows)


def _dataset(cfg, saved_shape: dict | None, where: str):
    """The run's dataset (``cfg``: its config, a dict or ``TrainConfig``), refused when it is not
    the shape the run saved (``privzv.training.data.check_same``)."""
    from privzv.training import data

    get = cfg.get if isinstance(cfg, dict) else lambda key: getattr(cfg, key, None)
    keys = ("dataset", "devices", "data_dir", "seed", "records", *data.OPTIONS)
    items = tuple((key, get(key)) for key in keys)
    dataset = _load(items, tuple(_stamp(get(key)) for key in ("data_file", "test_file", "data_dir")))
    data.check_same(dataset, saved_shape, where)
    return dataset


def _stamp(path) -> tuple | None:
    """A file's (or folder's) modification time and size: a changed file is loaded again."""
    try:
        stat = Path(path).stat()
    except (TypeError, OSError):
        return None
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=2)
def _load(items: tuple, stamps: tuple):
    """Loaded once for consecutive attacks on runs of the same, unchanged data (read only)."""
    from privzv.training import data

    return data.from_config(dict(items))


from privzv.attacks import catalog  # noqa: E402,F401  (registers the attacks)
