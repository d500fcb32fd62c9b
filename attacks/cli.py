"""``privzv attack run|audit|canary-audit|study``: attack a finished run, audit a release or a
training run, run the scalar-vs-vector study."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from privzv.accountants import RIGOROUS
from privzv.attacks import study_settings
from privzv.cliutil import BadValue, Parser, add_secret_seed, emit, number
from privzv.commands import add_release_options
from privzv.errors import PrivzvError
from privzv.release import THREATS, covers

_DELTA = number("--delta", low=0, high=1, low_open=True, high_open=True)
# Caps against exhausting memory or time (docs/cli.md, "Caps").
MAX_TRIALS = 1_000_000
MAX_DIM = 4096
MAX_EPOCHS = 100.0  # canary-audit and study train real runs
MAX_SEEDS = 100
MAX_EPSILONS = 50
MAX_RELEASE_FLOATS = 10_000_000  # k * dim: one record's releases, held in memory
MAX_TRIAL_FLOATS = 2_000_000_000  # trials * k * dim (and k * (B-1) * dim): simulated noise
_SECRET_HELP = "seed of the parties' noise, for a reproducible study (default: the OS's entropy)"


def _choice(flag: str, allowed: Sequence[str]):
    """An argparse ``type`` accepting one of ``allowed``; the error names the flag and the list."""

    def parse(text: str) -> str:
        if text not in allowed:
            raise BadValue(f"{flag} {text!r}: allowed are {', '.join(allowed)}")
        return text

    return parse


def build_parser() -> Parser:
    parser = Parser(prog="privzv attack", description=__doc__)
    sub = parser.add_subparsers(dest="command")

    from privzv.attacks.registry import ATTACKS

    listing = "\n".join(
        f"  {a.name}: {a.description} [{a.party}; baseline: {a.baseline}]" for a in ATTACKS.values()
    )
    run = sub.add_parser(
        "run",
        help="attack a finished training run",
        description=f"attack a finished training run; attacks:\n{listing}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--attack",
        required=True,
        type=_choice("--attack", tuple(ATTACKS)),
        metavar="NAME",
        help="the attack (listed above)",
    )
    run.add_argument("--run", required=True, type=Path, help="training run folder")
    run.add_argument("--seed", type=number("--seed", low=0, integer=True), default=0)
    run.add_argument("--json", action="store_true")
    run.set_defaults(func=_run)

    aud = sub.add_parser("audit", help="optimal likelihood-ratio attacker on one record's releases")
    noise = aud.add_mutually_exclusive_group(required=True)
    noise.add_argument("--sigma", type=number("--sigma", low=0, low_open=True))
    noise.add_argument("--epsilon", type=number("--epsilon", low=0, low_open=True))
    noise.add_argument(
        "--run",
        type=Path,
        help="a training run folder: its release, delta, threat, "
        "accountant and claimed epsilon from its public config and summary",
    )
    add_release_options(aud, clip_default=10.0)
    aud.add_argument(
        "--noise",
        type=_choice("--noise", ("scalar", "vector")),
        default="scalar",
        help="scalar: DPZV's clipped batch mean; vector: per-sample vectors of --dim",
    )
    aud.add_argument("--dim", type=number("--dim", low=2, high=MAX_DIM, integer=True), default=16)
    _unset_release_defaults(aud)
    aud.add_argument(
        "--trials",
        type=number("--trials", low=100, high=MAX_TRIALS, integer=True),
        default=20000,
        help="trials per class (in and out)",
    )
    aud.add_argument(
        "--alpha", type=number("--alpha", low=0, high=1, low_open=True, high_open=True), default=0.05
    )
    aud.add_argument("--seed", type=number("--seed", low=0, integer=True), default=0)
    aud.add_argument("--json", action="store_true")
    aud.set_defaults(func=_audit)

    can = sub.add_parser("canary-audit", help="end-to-end audit: label canaries in a real run")
    can.add_argument("--method", type=_choice("--method", tuple(study_settings.METHODS)), default="fo-vector")
    can.add_argument("--dataset", type=_choice("--dataset", study_settings.DATASETS), default="digits")
    can.add_argument("--canaries", type=number("--canaries", low=2, integer=True), default=400)
    can.add_argument("--epsilon", type=number("--epsilon", low=0, low_open=True, allow_inf=True), default=1.0)
    can.add_argument("--delta", type=_DELTA, default=1e-5)
    can.add_argument("--epochs", type=number("--epochs", low=0, low_open=True, high=MAX_EPOCHS), default=3.0)
    can.add_argument("--seed", type=number("--seed", low=0, integer=True), default=0)
    can.add_argument(
        "--server-kind",
        type=_choice("--server-kind", ("sum", "mlp")),
        default="sum",
        help="sum: a summing server (no head); mlp: a DP-trained MLP head (the whole run, head included)",
    )
    can.add_argument(
        "--attacker",
        type=_choice("--attacker", study_settings.CANARY_ATTACKERS),
        default="transcript",
        help="transcript: device 0's messages; model: the trained models the run "
        "ends with (white-box, the head's updates included)",
    )
    add_secret_seed(can, _SECRET_HELP)
    can.add_argument("--json", action="store_true")
    can.set_defaults(func=_canary_audit)

    study = sub.add_parser("study", help="scalar vs vector noise at equal (epsilon, delta)")
    study.add_argument("--dataset", type=_choice("--dataset", study_settings.DATASETS), default="digits")
    study.add_argument("--out", required=True, type=Path, help="results folder (must be new)")
    study.add_argument("--seeds", type=number("--seeds", low=1, high=MAX_SEEDS, integer=True), default=3)
    study.add_argument(
        "--epsilons",
        nargs="+",
        default=list(study_settings.EPSILONS),
        type=number("--epsilons", low=0, low_open=True, allow_inf=True),
        help="target epsilons (inf: calibrated to no noise)",
    )
    study.add_argument("--delta", type=_DELTA, default=1e-5)
    study.add_argument("--threat", type=_choice("--threat", THREATS), default="device")
    study.add_argument("--accountant", type=_choice("--accountant", RIGOROUS), default="pld")  # it trains
    study.add_argument(
        "--epochs",
        type=number("--epochs", low=0, low_open=True, high=MAX_EPOCHS),
        default=None,
        help="training epochs per run (default: the study's per-dataset value)",
    )
    study.add_argument(
        "--methods",
        nargs="+",
        default=list(study_settings.METHODS),
        type=_choice("--methods", tuple(study_settings.METHODS)),
        help="noise kinds (default: all three)",
    )
    add_secret_seed(study, _SECRET_HELP)
    study.add_argument(
        "--keep-runs",
        action="store_true",
        help="keep each run's transcripts and checkpoint (for privzv attack run)",
    )
    study.add_argument("--json", action="store_true")
    study.set_defaults(func=_study)
    return parser


def _run(args) -> int:
    if not args.run.is_dir():
        raise PrivzvError(f"--run {str(args.run)!r}: no such run folder")
    from privzv.attacks import registry
    from privzv.attacks.report import run_text

    _check_run_config(args.run)
    attack = registry.get(args.attack)
    result = registry.run_attack(args.attack, args.run, args.seed)
    emit(result.to_dict(), args.json, lambda r: run_text(r, attack.description))
    return 0


def _check_run_config(run: Path) -> None:
    """Refuse a path inside a run's private area, or a run whose public config.json is missing,
    not strict JSON or not a valid config."""
    from privzv.training.config import TrainConfig
    from privzv.training.run_folder import public_config

    saved = public_config(run)
    try:
        TrainConfig.from_dict(saved["config"]).validate()
    except PrivzvError as exc:
        raise PrivzvError(f"--run {str(run / 'config.json')!r}: {exc}") from None


_RELEASE_FLAGS = (
    "delta",
    "steps",
    "dataset_size",
    "batch_size",
    "clip",
    "devices",
    "threat",
    "accountant",
    "neighbors",
    "noise",
    "dim",
)
REQUIRED = object()  # the default of a release flag that must be given (without --run)


def _unset_release_defaults(parser) -> None:
    """Make the release flags optional, None unless given (a run folder sets them with --run;
    --noise and --dim too);
    their declared defaults are kept in ``args.release_defaults`` (``REQUIRED`` for a required
    flag)."""
    defaults = {}
    for action in parser._actions:
        if action.dest in _RELEASE_FLAGS:
            defaults[action.dest] = REQUIRED if action.required else action.default
            action.required, action.default = False, None
    parser.set_defaults(release_defaults=defaults)


def _release_args(args, defaults: dict) -> None:
    """Fill the release flags not given from their defaults; with --run none may be given."""
    given = [d for d in _RELEASE_FLAGS if getattr(args, d) is not None]
    if args.run is not None and given:
        flag = "--" + given[0].replace("_", "-")
        raise PrivzvError(f"{flag}: not allowed with --run (the run's public config sets it)")
    if args.run is None:
        for dest, default in defaults.items():
            if getattr(args, dest) is None:
                if default is REQUIRED:
                    raise PrivzvError(f"--{dest.replace('_', '-')}: required (or give --run)")
                setattr(args, dest, default)


def _audit(args) -> int:
    from privzv import accounting
    from privzv.attacks.release_audit import audit_release, refutation
    from privzv.release import Release, Schedule

    _release_args(args, args.release_defaults)
    if args.run is not None:
        from privzv.attacks.run_audit import release_of_run

        release, schedule, target = release_of_run(args.run)
        args.delta, args.accountant, args.batch_size, args.epsilon = (
            target["delta"],
            target["accountant"],
            release.batch_size,
            target["epsilon"],
        )
        sigma = release.sigma
    else:
        vector = args.noise == "vector"
        release = Release(
            clip=args.clip,
            batch_size=args.batch_size,
            neighbors=args.neighbors,
            aggregate="per-sample" if vector else "mean",
            dim=args.dim if vector else 1,
        )
        schedule = Schedule(
            steps=args.steps, dataset_size=args.dataset_size, devices=args.devices, threat=args.threat
        )
        sigma = args.sigma
    _check_audit_size(args, release, schedule)
    if sigma is None:
        sigma = accounting.calibrate(args.epsilon, args.delta, release, schedule, args.accountant).sigma
    release = release.with_sigma(sigma)
    out = audit_release(
        release,
        schedule,
        args.delta,
        accountant=args.accountant,
        trials=args.trials,
        alpha=args.alpha,
        seed=args.seed,
    )
    out["target_epsilon"] = args.epsilon
    out["run"] = None if args.run is None else str(args.run)
    if out["upper"]["accountant"] != "pld":
        out["upper_pld"] = accounting.account(release, schedule, args.delta, "pld").to_dict()
    out.update(refutation(out["lower"], out["upper"], args.delta, out["threat"]))
    out["verdict"] = _audit_verdict(out)
    emit(out, args.json, _audit_text)
    return 0


def _audit_verdict(o: dict) -> str:
    """ "refuted" / "not refuted", naming the bounds that decided it."""
    lo, up = o["lower"], o["upper"]
    conf = f"confidence {o['decision_confidence']:.0%}"
    if o["refuted"]:
        return (
            f"refuted: {' and '.join(o['refuted_by'])} lower bound above the claim ({conf}): "
            "the claimed guarantee is false"
        )
    mu = (
        ""
        if o["claimed_mu"] is None
        else f", mu lower bound {lo['mu_lb']:.4g} <= claimed {o['claimed_mu']:.4g}"
    )
    return (
        f"not refuted: eps lower bound {lo['eps_lb']:.4g} <= claimed {up['epsilon']:.4g}"
        f"{mu} ({conf}; a lower bound below the claim does not prove it)"
    )


def _check_audit_size(args, release, schedule) -> None:
    """Refuse audits whose simulation would exhaust memory or time (the MAX_* caps)."""
    from privzv import accounting

    k = int(accounting.releases_per_record(release, schedule))
    floats = {
        "releases per record x dim": k * release.dim,
        "--trials x releases per record x dim": args.trials * k * release.dim,
    }
    if release.aggregate == "mean":
        floats["releases per record x (--batch-size - 1)"] = k * (args.batch_size - 1)
    for what, n in floats.items():
        cap = MAX_RELEASE_FLOATS if what.startswith("releases per record x dim") else MAX_TRIAL_FLOATS
        if n > cap:
            raise PrivzvError(
                f"--steps {args.steps} (k = {k} releases per record): {what} = {n:.3g} "
                f"floats, more than the cap {cap:.0e} (docs/cli.md)"
            )


def _audit_text(o: dict) -> str:
    lo, up = o["lower"], o["upper"]
    lines = [
        f"release: {o['noise']} ({o['aggregate']}, dim {o['dim']}), sigma {o['sigma']:.6g}, "
        f"sensitivity {o['sensitivity']:.6g}, {o['releases_per_record']} releases per record"
        + (
            ""
            if o["sampling_rate"] is None
            else f", each holding it with probability {o['sampling_rate']:.4g} ({o['threat']})"
        ),
        f"lower bound (LR attacker, {o['trials']} trials per class, confidence "
        f"{1 - lo['alpha']:.0%}, {lo['method']}): eps >= {lo['eps_lb']:.4g}, "
        f"mu >= {lo['mu_lb']:.4g}",
        f"upper bound ({up['accountant']}, threat {up['threat']}): eps <= {up['epsilon']:.4g}"
        + (f", mu <= {up['mu']:.4g}" if up.get("mu") is not None else "")
        + f" ({covers(o['protects'])})"
        + ("" if up.get("rigorous", True) else "   NOT RIGOROUS"),
    ]
    if "upper_pld" in o:
        lines.append(f"upper bound (pld, same sigma): eps <= {o['upper_pld']['epsilon']:.4g}")
    if o["mu_exact"] is not None:
        lines.append(f"exact mu of the simulated releases: {o['mu_exact']:.4g}")
    if up.get("mu") is None and o["claimed_mu"] is not None:
        lines.append(f"claimed guarantee as GDP: mu <= {o['claimed_mu']:.4g}")
    lines.append(f"verdict: {o['verdict']}")
    return "\n".join(lines)


def _canary_audit(args) -> int:
    import torch

    from privzv.attacks import canary_audit

    torch.set_num_threads(1)
    out = canary_audit.run(
        args.method,
        args.dataset,
        args.canaries,
        args.epsilon,
        args.delta,
        args.epochs,
        args.seed,
        args.secret_seed,
        args.server_kind,
        args.attacker,
    )
    emit(
        out,
        args.json,
        lambda o: (
            f"{o['method']} on {o['dataset']}, sigma {o['sigma']:.4g}: {o['canaries']} label canaries, "
            f"{o['correct']}/{o['guesses']} guesses right ({o['attacker']} attacker)\n"
            f"lower bound (one run, 95%, Steinke et al.): eps >= {o['eps_lb']:.4g}\n"
            f"lower bound (one run, 95%, f-DP, {o['fdp_correct']}/{o['fdp_guesses']} right): "
            f"mu >= {o['mu_lb']:.4g}, eps >= {o['fdp_eps_lb']:.4g}\n"
            f"upper bound ({o['accountant']}, {o['threat']} threat): eps <= {o['epsilon_upper']:.4g} "
            f"({covers(o['protects'])})"
        ),
    )
    return 0


def _study(args) -> int:
    from privzv.attacks import study

    if len(args.epsilons) > MAX_EPSILONS:
        raise PrivzvError(f"--epsilons: {len(args.epsilons)} values, at most {MAX_EPSILONS}")

    return study.main_from_args(args)


def main(argv: Sequence[str]) -> int:
    """Entry point for ``privzv attack ...`` (called by privzv.cli with errors already handled)."""
    parser = build_parser()
    argv = list(argv)
    if not argv:
        raise parser.one_line_usage()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        raise PrivzvError("attack: choose a subcommand: run, audit, canary-audit, study")
    return args.func(args)
