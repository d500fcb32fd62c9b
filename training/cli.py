"""``privzv train``: train DPZV or a baseline on vertically partitioned data.

Precedence: built-in defaults < ``--config FILE`` (JSON object of ``TrainConfig`` fields) <
explicit flags. ``--resume DIR`` continues the run in DIR from its last checkpoint with its saved
config (only ``--extend --epochs E``, ``--checkpoint-every`` and ``--json`` may be given with it).
Bad input: one stderr line, exit 2.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Sequence

from privzv import cliutil
from privzv.errors import PrivzvError
from privzv.release import covers
from privzv.training.config import CHECKPOINT_EVERY, FREEZE, TrainConfig

ENGINES = ("inprocess", "flower", "flower-sim")
FLAG_FIELDS = ("dataset", "data_dir", "records", "method", "devices", "epochs", "batch_size", "epsilon", "delta",
               "threat", "accountant", "seed", "sigma", "freeze", "lr_device", "lr_server", "clip", "lam",
               "head_clip", "head_share", "head_window", "head_sampling", "embed_dim", "server_kind", "directions")


def build_parser() -> cliutil.Parser:
    from privzv.accountants import RIGOROUS
    from privzv.release import THREATS
    from privzv.training import data, methods, models

    p = cliutil.Parser(prog="privzv train", description=__doc__.splitlines()[0])
    n = cliutil.number
    p.add_argument("--dataset", choices=data.DATASETS, help="default digits")
    p.add_argument("--data-dir", help="folder with MNIST (IDX/npz) or CIFAR-10 (python batches)")
    p.add_argument("--records", type=n("--records", low=10, integer=True),
                   help="mnist1d: signals to generate (a multiple of 10, split 80/20, cached; "
                        "default its published 5,000)")
    p.add_argument("--method", choices=methods.METHODS, help="default dpzv")
    p.add_argument("--devices", type=n("--devices", low=1, integer=True), help="M, default 4")
    p.add_argument("--epochs", type=n("--epochs", low=0, low_open=True), help="device epochs, default 10")
    p.add_argument("--batch-size", type=n("--batch-size", low=1, integer=True), help="B, default 32")
    p.add_argument("--epsilon", type=n("--epsilon", low=0, low_open=True, allow_inf=True),
                   help="privacy budget; inf (default) for no noise")
    p.add_argument("--delta", type=n("--delta", low=0, high=1, low_open=True, high_open=True),
                   help="default 1e-5")
    p.add_argument("--threat", choices=THREATS)
    p.add_argument("--accountant", choices=RIGOROUS, help="default best (the smaller rigorous "
                   "bound of pld and rdp, as for calibrate and account); rigorous ones only")
    p.add_argument("--sigma", type=n("--sigma", low=0), help="noise std, instead of calibrating it")
    p.add_argument("--clip", type=n("--clip", low=0, low_open=True), help="C of the DP release; default: the tuned value "
                   "(training/tuned.py), else 10")
    p.add_argument("--head-clip", type=n("--head-clip", low=0, low_open=True),
                   help="C_h of the server head's DP update (private runs); default: the tuned value (training/tuned.py), else 0.1")
    p.add_argument("--head-share", type=n("--head-share", low=0, high=1, low_open=True),
                   help="share of each round's privacy (1/z^2) on the head update; default 1 with "
                        "--freeze devices (no downlink at all), else 0.99 with --head-sampling "
                        "table and 0.5 with batch")
    p.add_argument("--head-window", type=n("--head-window", low=0, integer=True),
                   help="DP head: one step per q batches of each device, pooled (0: every round; "
                        "default 4 under threat device with round-robin activation, else 0)")
    p.add_argument("--head-sampling", choices=("batch", "table"),
                   help="DP head: table (default for a private run whose first-order head trains): "
                        "one step per round on a secret Poisson sample of the server's table at "
                        "rate B/D, amplified against every party; batch: on the round's batch "
                        "(pooled per --head-window), today's comparison")
    p.add_argument("--lam", type=n("--lam", low=0, low_open=True), help="ZO smoothing lambda, default 1e-3")
    p.add_argument("--embed-dim", type=n("--embed-dim", low=1, integer=True),
                   help="embedding size per device (the bottleneck), default 16")
    p.add_argument("--server-kind", choices=models.SERVER_KINDS,
                   help="server head: mlp (default) or sum (needs --embed-dim = classes)")
    p.add_argument("--directions", type=n("--directions", low=1, integer=True),
                   help="dpzv: K perturbation directions per device step (each record's K loss "
                        "differences clipped as one vector; same sensitivity), default 1")
    p.add_argument("--freeze", choices=FREEZE, help="ablation: do not update these parties")
    p.add_argument("--lr-device", type=n("--lr-device", low=0),
                   help="device learning rate; default: tuned, else the method's (DPZV: 0.0125/sqrt(d))")
    p.add_argument("--lr-server", type=n("--lr-server", low=0),
                   help="server learning rate; default: tuned, else the method's")
    p.add_argument("--seed", type=n("--seed", low=0, integer=True), help="default 0")
    p.add_argument("--config", help="JSON file of config fields (see docs/training.md)")
    p.add_argument("--no-transcripts", action="store_true", help="do not record transcripts")
    p.add_argument("--secure-noise", action="store_true",
                   help="draw DP noise and keep decisions from OpenDP / the OS CSPRNG (floating-point"
                        " safe, not reproducible; needs privzv[secure]; docs/training.md)")
    p.add_argument("--out", help="run folder (default runs/DATASET-METHOD-TIME)")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    p.add_argument("--secret-seed", type=n("--secret-seed", low=0, high=2**63 - 1, integer=True),
                   help="seed of the parties' private noise, for a reproducible study (kept in "
                        "OUT/private/; default: drawn from the OS)")
    p.add_argument("--checkpoint-every", type=n("--checkpoint-every", low=1, integer=True),
                   help=f"rounds between checkpoints (default {CHECKPOINT_EVERY})")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR (its ledger continues)")
    p.add_argument("--extend", action="store_true", help="with --resume and --epochs: lengthen the run")
    p.add_argument("--engine", choices=ENGINES, default="inprocess",
                   help="inprocess (default): every party in this process; flower: a local Flower "
                        "SuperLink and one SuperNode per device (privzv[flower]); flower-sim: Flower's "
                        "simulation runtime on Ray (privzv[flower-sim]); docs/training.md")
    p.add_argument("--flower-timeout", type=n("--flower-timeout", low=0, low_open=True),
                   default=600.0, help="seconds the whole --engine flower(-sim) run may take (default 600)")
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    return p


def config_from(args) -> TrainConfig:
    """Defaults, then --config, then the flags given."""
    config = TrainConfig.from_json(args.config) if args.config else TrainConfig()
    given = {f: getattr(args, f) for f in FLAG_FIELDS if getattr(args, f) is not None}
    if args.no_transcripts:
        given["transcripts"] = False
    if args.secure_noise:
        given["secure_noise"] = True
    return dataclasses.replace(config, **given)


def _check_resume_flags(args) -> None:
    others = [f.replace("_", "-") for f in FLAG_FIELDS if f != "epochs" and getattr(args, f) is not None]
    others += [name for name in ("config", "out", "no_transcripts", "overwrite", "secret_seed",
                                 "secure_noise") if getattr(args, name) not in (None, False)]
    if others:
        raise PrivzvError(f"--{others[0].replace('_', '-')}: cannot be given with --resume (only "
                          "--extend --epochs, --checkpoint-every and --json)")
    if args.epochs is not None and not args.extend:
        raise PrivzvError(f"--epochs {args.epochs:g}: changing a run's epochs needs --extend")
    if args.extend and args.epochs is None:
        raise PrivzvError("--extend: give the new --epochs")


def _human(s: dict) -> str:
    eps = "no noise" if s["epsilon_spent"] is None else (
        f"epsilon spent {s['epsilon_spent']:.4g} ({covers(s['protects'])})")
    stop = f" (stopped: {s['stopped']})" if s["stopped"] else ""
    best = s["best"]
    warn = f"\nWARNING: {s['diverged']['reason']}" if s.get("diverged") else ""
    return (f"{s['method']} on {s['dataset']}, {s['devices']} devices: test accuracy "
            f"{s['test_accuracy']:.4f} after {s['rounds']} rounds{stop} (best {best['test_accuracy']:.4f}"
            f" at round {best['round']}){warn}\n"
            f"bytes up {_up(s['bytes_up'])}, down {s['bytes_down']:,}; sigma {s['sigma']:.4g}, {eps}; "
            f"{s['wall_seconds']:.1f} s\nrun folder: {s['out']}" + _wire(s))


def _up(n: int | None) -> str:
    return "secret (they count the batch sizes)" if n is None else f"{n:,}"


def _wire(s: dict) -> str:
    w = s.get("wire_bytes")
    return "" if w is None else (f"\nFlower messages: {w['messages']}, serialised bytes up {w['up']:,}, "
                                 f"down {w['down']:,}, control {w['control']:,}")


def _main(argv: Sequence[str]) -> int:
    from privzv.training import run

    args = build_parser().parse_args(list(argv))
    bar = lambda **kw: cliutil.progress(desc="rounds", quiet=args.json, **kw)  # noqa: E731
    every = args.checkpoint_every
    if args.resume:
        if args.engine != "inprocess":
            raise PrivzvError(f"--engine {args.engine}: --resume continues in-process runs only")
        _check_resume_flags(args)
        out = Path(args.resume)
        config = None
        if args.extend:
            config = dataclasses.replace(run.saved_config(out), epochs=args.epochs)
        summary = run.train(config, out, resume=True, extend=args.extend, checkpoint_every=every,
                            progress=bar)
    else:
        if args.extend:
            raise PrivzvError("--extend: only with --resume")
        config = config_from(args).validate()
        if args.out is not None and not args.out.strip():
            raise PrivzvError(f"--out {args.out!r}: an empty path; give a run folder, or leave --out "
                              "out for runs/DATASET-METHOD-TIME")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path(args.out or f"runs/{config.dataset}-{config.method}-{stamp}")
        announce = None if args.json else (lambda line: print(line, file=sys.stderr))
        if args.engine != "inprocess":
            summary = _flower(args, config, out)
        else:
            summary = run.train(config, out, secret_seed=args.secret_seed, overwrite=args.overwrite,
                                checkpoint_every=every, progress=bar, announce=announce)
    summary["out"] = str(out)
    cliutil.emit(summary, args.json, _human)
    from privzv.training import stopping

    return stopping.EXIT_CODES.get(summary["stopped"], 0)


def _flower(args, config: TrainConfig, out: Path) -> dict:
    """The run on a local Flower deployment or simulation; its summary with the bytes Flower
    serialised."""
    from privzv.training import run
    from privzv.training.engines.flower import launcher

    secret = args.secret_seed if args.secret_seed is not None else run.new_secret_seed()
    result = launcher.run(config, out, secret_seed=secret, overwrite=args.overwrite,
                          checkpoint_every=args.checkpoint_every, timeout=args.flower_timeout,
                          mode="simulation" if args.engine == "flower-sim" else "deployment")
    return {**result["summary"], "engine": args.engine, "wire_bytes": result["wire"]}


def main(argv: Sequence[str]) -> int:
    """Entry point of ``privzv train`` (dispatched by ``privzv.cli``)."""
    return cliutil.run(_main, argv, prog="privzv train")
