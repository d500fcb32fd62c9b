"""``privzv train``: train DPZV or a baseline on vertically partitioned data.

Precedence: built-in defaults < ``--config FILE`` (JSON object of ``TrainConfig`` fields) <
explicit flags. ``--resume DIR`` continues the run in DIR from its last checkpoint with its saved
config (only ``--extend --epochs E``, ``--device``, ``--checkpoint-every`` and ``--json`` may be given
with it; a Flower run resumes with ``--engine flower``, and ``--flower-timeout``, ``--party-users``).
Bad input: one stderr line, exit 2.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from privzv import cliutil
from privzv.errors import PrivzvError
from privzv.release import covers
from privzv.training import schema
from privzv.training.config import CHECKPOINT_EVERY, TrainConfig

ENGINES = ("inprocess", "flower", "flower-sim")


def build_parser() -> cliutil.Parser:
    p = cliutil.Parser(prog="privzv train", description=__doc__.splitlines()[0])
    n = cliutil.number
    schema.add_flags(p, TrainConfig)
    p.add_argument("--config", help="JSON file of config fields (see docs/training.md)")
    p.add_argument("--out", help="run folder (default runs/DATASET-METHOD-TIME)")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    cliutil.add_secret_seed(
        p,
        "seed of the parties' private noise, for a reproducible study (kept in "
        "OUT/private/; default: drawn from the OS)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=n("--checkpoint-every", low=1, integer=True),
        help=f"rounds between checkpoints (default {CHECKPOINT_EVERY})",
    )
    p.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in DIR (its ledger continues; a Flower run: with --engine flower)",
    )
    p.add_argument("--extend", action="store_true", help="with --resume and --epochs: lengthen the run")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="inprocess",
        help="inprocess (default): every party in this process; flower: a local Flower "
        "SuperLink and one SuperNode per device (privzv[flower]); flower-sim: Flower's "
        "simulation runtime on Ray (privzv[flower-sim]); docs/training.md",
    )
    p.add_argument(
        "--flower-timeout",
        type=n("--flower-timeout", low=0, low_open=True),
        default=600.0,
        help="seconds the whole --engine flower(-sim) run may take (default 600)",
    )
    p.add_argument(
        "--party-users",
        metavar="off|auto|UID_BASE",
        default="off",
        help="--engine flower run as root: each device's processes under an OS user of its own "
        "(auto: fresh ids per run; UID_BASE: the run's gid, device m uid and gid UID_BASE+1+m), "
        "so no device reads the server's files or environment (default off; docs/training.md)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    return p


def config_from(args) -> TrainConfig:
    """Defaults, then --config, then the flags given."""
    config = TrainConfig.from_json(args.config) if args.config else TrainConfig()
    return dataclasses.replace(config, **schema.given(args, TrainConfig))


def _check_resume_flags(args) -> None:
    given = schema.given(args, TrainConfig)
    others = [
        f.label for f in schema.fields(TrainConfig) if f.name in given and f.name not in ("epochs", "device")
    ]
    others += [
        f"--{name.replace('_', '-')}"
        for name in ("config", "out", "overwrite", "secret_seed")
        if getattr(args, name) not in (None, False)
    ]
    if others:
        raise PrivzvError(
            f"{others[0]}: cannot be given with --resume (only "
            "--extend --epochs, --device, --checkpoint-every, --json and --engine)"
        )
    if args.epochs is not None and not args.extend:
        raise PrivzvError(f"--epochs {args.epochs:g}: changing a run's epochs needs --extend")
    if args.extend and args.epochs is None:
        raise PrivzvError("--extend: give the new --epochs")


def _human(s: dict) -> str:
    eps = (
        "no noise"
        if s["epsilon_spent"] is None
        else (f"epsilon spent {s['epsilon_spent']:.4g} ({covers(s['protects'])})")
    )
    stop = f" (stopped: {s['stopped']})" if s["stopped"] else ""
    best = s["best"]
    warn = f"\nWARNING: {s['diverged']['reason']}" if s.get("diverged") else ""
    return (
        f"{s['method']} on {s['dataset']}, {s['devices']} devices: test accuracy "
        f"{s['test_accuracy']:.4f} after {s['rounds']} rounds{stop} (best {best['test_accuracy']:.4f}"
        f" at round {best['round']}){warn}\n"
        f"bytes up {_up(s['bytes_up'])}, down {s['bytes_down']:,}; sigma {s['sigma']:.4g}, {eps}; "
        f"{s['wall_seconds']:.1f} s\nrun folder: {s['out']}" + _wire(s)
    )


def _up(n: int | None) -> str:
    return "secret (they count the batch sizes)" if n is None else f"{n:,}"


def _wire(s: dict) -> str:
    w = s.get("wire_bytes")
    return (
        ""
        if w is None
        else (
            f"\nFlower messages: {w['messages']}, serialised bytes up {w['up']:,}, "
            f"down {w['down']:,}, control {w['control']:,}"
        )
    )


def _main(argv: Sequence[str]) -> int:
    from privzv.training import run

    args = build_parser().parse_args(list(argv))
    if args.party_users != "off" and args.engine != "flower":
        raise PrivzvError(f"--party-users {args.party_users}: only with --engine flower")
    bar = lambda **kw: cliutil.progress(desc="rounds", quiet=args.json, **kw)  # noqa: E731
    every = args.checkpoint_every
    if args.resume:
        if args.engine == "flower-sim":
            raise PrivzvError(
                "--engine flower-sim: --resume continues in-process and --engine flower runs only"
            )
        _check_resume_flags(args)
        out = Path(args.resume)
        if args.engine == "flower" and args.extend:
            raise PrivzvError("--extend: not with --engine flower (lengthen an in-process run)")
        config = None
        if args.extend or args.device is not None:
            changes = {"epochs": args.epochs} if args.extend else {}
            if args.device is not None:
                changes["device"] = args.device
            config = dataclasses.replace(run.saved_config(out), **changes)
        if args.engine == "flower":
            summary = _flower(args, config, out, resume=True)
        else:
            summary = run.train(
                config, out, resume=True, extend=args.extend, checkpoint_every=every, progress=bar
            )
    else:
        if args.extend:
            raise PrivzvError("--extend: only with --resume")
        config = config_from(args).validate()
        if args.out is not None and not args.out.strip():
            raise PrivzvError(
                f"--out {args.out!r}: an empty path; give a run folder, or leave --out "
                "out for runs/DATASET-METHOD-TIME"
            )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path(args.out or f"runs/{config.dataset}-{config.method}-{stamp}")
        announce = None if args.json else (lambda line: print(line, file=sys.stderr))
        if args.engine != "inprocess":
            summary = _flower(args, config, out)
        else:
            summary = run.train(
                config,
                out,
                secret_seed=args.secret_seed,
                overwrite=args.overwrite,
                checkpoint_every=every,
                progress=bar,
                announce=announce,
            )
    summary["out"] = str(out)
    cliutil.emit(summary, args.json, _human)
    from privzv.training import stopping

    return stopping.EXIT_CODES.get(summary["stopped"], 0)


def _flower(args, config: TrainConfig | None, out: Path, resume: bool = False) -> dict:
    """The run on a local Flower deployment or simulation (``resume``: continued from its last
    checkpoint); its summary with the bytes Flower serialised."""
    from privzv.training import run
    from privzv.training.engines.flower import launcher

    secret = args.secret_seed if args.secret_seed is not None or resume else run.new_secret_seed()
    result = launcher.run(
        config,
        out,
        secret_seed=secret,
        resume=resume,
        overwrite=args.overwrite,
        checkpoint_every=args.checkpoint_every,
        timeout=args.flower_timeout,
        mode="simulation" if args.engine == "flower-sim" else "deployment",
        party_users=args.party_users,
    )
    return {**result["summary"], "engine": args.engine, "wire_bytes": result["wire"]}


def main(argv: Sequence[str]) -> int:
    """Entry point of ``privzv train`` (dispatched by ``privzv.cli``)."""
    return cliutil.run(_main, argv, prog="privzv train")
