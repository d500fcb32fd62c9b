"""The privacy subcommands of ``privzv``: convert, calibrate, account.

``build_parser()`` returns the parser; each subparser sets ``args.func(args) -> exit code``.
Bad input raises PrivzvError, which :func:`privzv.cliutil.run` prints as one line (exit code 2).
"""

from __future__ import annotations

import math

from privzv import checks, cliutil, registry
from privzv.defaults import DEFAULTS
from privzv.errors import PrivzvError
from privzv.release import NEIGHBORS, THREATS

_DELTA = cliutil.number("--delta", low=0, high=1, low_open=True, high_open=True)


def build_parser() -> cliutil.Parser:
    parser = cliutil.Parser(
        prog="privzv",
        description="Differential-privacy accounting for zeroth-order vertical federated learning (DPZV).",
    )
    parser.add_argument("--version", action="version", version=f"privzv {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=cliutil.Parser)
    _add_convert(sub)
    _add_release_command(sub, "calibrate", _calibrate, "the smallest sigma whose epsilon is at most a target")
    _add_release_command(sub, "account", _account, "the epsilon that a given sigma gives")
    return parser


# ----------------------------------------------------------------------------------- convert
def _add_convert(sub) -> None:
    p = sub.add_parser("convert", help="Gaussian DP: any two of mu, epsilon, delta give the third")
    p.add_argument("--mu", type=cliutil.number("--mu", low=0, low_open=True))
    p.add_argument("--epsilon", type=cliutil.number("--epsilon", low=0))
    p.add_argument("--delta", type=_DELTA)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_convert)


def _convert(args) -> int:
    from privzv import gdp

    given = [name for name in ("mu", "epsilon", "delta") if getattr(args, name) is not None]
    if len(given) != 2:
        raise PrivzvError(
            f"convert got {', '.join('--' + g for g in given) or 'no values'}: "
            "give exactly two of --mu, --epsilon, --delta"
        )
    mu, epsilon, delta = args.mu, args.epsilon, args.delta
    if mu is None:
        mu = gdp.mu_from_epsilon(epsilon, delta)
    elif epsilon is None:
        epsilon = gdp.epsilon_from_delta(mu, delta)
    else:
        delta = gdp.delta_from_epsilon(epsilon, mu)
    out = {"mu": mu, "epsilon": epsilon, "delta": delta}
    for name, value in out.items():
        if not math.isfinite(value):
            raise PrivzvError(
                f"convert: {name} exceeds the floating-point range for these inputs (no finite answer)"
            )
    cliutil.emit(
        out,
        args.json,
        lambda o: f"mu = {o['mu']:.6g}   epsilon = {o['epsilon']:.6g}   delta = {o['delta']:.6g}",
    )
    return 0


# ------------------------------------------------------------------- calibrate and account
def _add_release_command(sub, name: str, func, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    if name == "calibrate":
        p.add_argument(
            "--epsilon",
            required=True,
            help="target epsilon (> 0)",
            type=cliutil.number("--epsilon", low=0, low_open=True),
        )
    else:
        noise = p.add_mutually_exclusive_group(required=True)
        noise.add_argument(
            "--sigma",
            help="noise std of the downlink release (> 0; needs "
            "--clip); with --head-clip the head's std follows --head-share",
            type=cliutil.number("--sigma", low=0, low_open=True),
        )
        noise.add_argument(
            "--noise-multiplier",
            help="noise std / sensitivity (> 0; no --clip needed)",
            type=cliutil.number("--noise-multiplier", low=0, low_open=True),
        )
    add_release_options(p, clip_default=None, question=True)
    add_round_options(p)
    p.add_argument(
        "--super-batch",
        type=cliutil.number("--super-batch", low=1, integer=True),
        help="B': super-batch size for --threat secret-subsampling",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every threat x accountant side by side (secret-subsampling needs --super-batch)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=func)


def add_release_options(p, *, clip_default: float | None = None, question: bool = False) -> None:
    """--delta, the schedule (--steps, --dataset-size, --batch-size, --devices), --clip,
    --threat, --accountant and --neighbors, with the defaults of :mod:`privzv.defaults`; shared
    with ``privzv attack audit``. ``clip_default`` None makes --clip required, unless
    ``question`` (calibrate, account): then --clip is optional (a noise multiplier does not
    need it), --epochs may replace --steps and --sample-rate --dataset-size and --batch-size."""
    p.add_argument("--delta", required=True, type=_DELTA, help="target delta, 0 < delta < 1")
    p.add_argument(
        "--steps",
        required=not question,
        type=cliutil.number("--steps", low=1, integer=True),
        help="T: releases in total over the run",
    )
    p.add_argument(
        "--dataset-size",
        required=not question,
        help="D: records",
        type=cliutil.number("--dataset-size", low=1, integer=True),
    )
    p.add_argument(
        "--batch-size",
        required=not question,
        help="B: records per release",
        type=cliutil.number("--batch-size", low=1, integer=True),
    )
    if question:
        p.add_argument(
            "--epochs",
            type=cliutil.number("--epochs", low=0, low_open=True),
            help="instead of --steps: T = ceil(epochs / q), q = --sample-rate or B/D",
        )
        p.add_argument(
            "--sample-rate",
            type=cliutil.number("--sample-rate", low=0, high=1, low_open=True),
            help="q: Poisson sampling rate seen by an eavesdropper (Opacus's "
            "setting: with --threat eavesdropper --neighbors add-remove), "
            "instead of --dataset-size and --batch-size",
        )
    p.add_argument(
        "--clip",
        required=clip_default is None and not question,
        default=clip_default,
        type=cliutil.number("--clip", low=0, low_open=True),
        help="C: clipping bound of each record's contribution"
        + (" (sigma is printed only with it)" if question else ""),
    )
    p.add_argument(
        "--devices",
        default=1,
        help="M: devices the releases are spread over (default 1)",
        type=cliutil.number("--devices", low=1, integer=True, high=checks.MAX_DEVICES),
    )
    p.add_argument(
        "--threat",
        default=DEFAULTS["threat"],
        choices=THREATS,
        help=f"observer (default {DEFAULTS['threat']})",
    )
    p.add_argument(
        "--accountant",
        default=DEFAULTS["accountant"],
        choices=registry.names(),
        help=f"default {DEFAULTS['accountant']}; "
        + "; ".join(f"{a.name}: {a.summary}" for a in registry.REGISTRY.values()),
    )
    p.add_argument(
        "--neighbors",
        default=DEFAULTS["neighbors"],
        choices=NEIGHBORS,
        help=f"neighbouring relation (default {DEFAULTS['neighbors']}; replace-one: sensitivity 2C/B)",
    )


def add_round_options(p) -> None:
    """--head-clip, --head-share, --device-steps: the round as training makes it (a DP head
    update beside the downlink, and each device's number of rounds)."""
    p.add_argument(
        "--head-clip",
        type=cliutil.number("--head-clip", low=0, low_open=True),
        help="C_h: per-example clip of the server head's DP-SGD update made in the "
        "same round (batch size = --batch-size); omit for a frozen head",
    )
    p.add_argument(
        "--head-share",
        default=0.5,
        type=cliutil.number("--head-share", low=0, high=1, low_open=True, high_open=True),
        help="fraction of the round's 1/z^2 spent on the head (default 0.5: one noise "
        "multiplier for both mechanisms)",
    )
    p.add_argument(
        "--head-window",
        type=cliutil.number("--head-window", low=0, integer=True),
        default=0,
        help="q >= 1: one pooled head step per q batches of each device "
        "(divisor q M B; threat device, round-robin only; as privzv train's default "
        "4); 0 (default): a head step every round",
    )
    p.add_argument(
        "--head-sampling",
        choices=("batch", "table"),
        default="batch",
        help="batch (default): the head steps on the round's batch (or pooled "
        "windows); table: one step per round on a secret Poisson sample of the "
        "server's table at rate B/D (divisor B), composed with the downlink",
    )
    p.add_argument(
        "--device-steps",
        type=_device_steps,
        metavar="N0,N1,...",
        help="each device's number of rounds (summing to --steps, one per device); default round-robin",
    )


def _device_steps(text: str) -> tuple[int, ...]:
    try:
        steps = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise cliutil.BadValue(f"--device-steps {text!r}: must be comma-separated integers >= 0") from None
    if any(v < 0 for v in steps):
        raise cliutil.BadValue(f"--device-steps {text!r}: must be comma-separated integers >= 0")
    return steps


def _question(args):
    """(release, schedule, exposure) of a calibrate/account command line
    (:func:`privzv.api.describe`, the Python API's own), after the flag-level checks."""
    from privzv import api

    b, d, bp = args.batch_size, args.dataset_size, args.super_batch
    if args.sample_rate is not None and args.all:
        raise PrivzvError(
            "--all: needs --dataset-size and --batch-size (--sample-rate answers for an eavesdropper alone)"
        )
    if args.sample_rate is None and (b is None or d is None):
        raise PrivzvError("give --sample-rate, or --dataset-size and --batch-size")
    if (args.steps is None) == (args.epochs is None):
        raise PrivzvError("give --steps or --epochs (one of them)")
    if args.sample_rate is not None:
        if args.threat != "eavesdropper":
            raise PrivzvError(
                f"--sample-rate with --threat {args.threat}: Poisson sampling hides "
                "nothing from a device that chose its batch; add --threat "
                "eavesdropper (what Opacus assumes, with --neighbors add-remove), "
                "or give --dataset-size and --batch-size"
            )
    elif b > d:
        raise PrivzvError(f"--batch-size {b}: must be <= --dataset-size {d}")
    if bp is not None and not (b is not None and d is not None and b <= bp <= d):
        raise PrivzvError(f"--super-batch {bp}: must be >= --batch-size {b} and <= --dataset-size {d}")
    if bp is None and args.threat == "secret-subsampling":
        raise PrivzvError("--threat secret-subsampling: needs --super-batch B' (B <= B' <= D)")
    if bp is not None and args.threat != "secret-subsampling" and not args.all:
        raise PrivzvError(f"--super-batch {bp}: only used with --threat secret-subsampling or --all")
    n = args.device_steps
    if n is not None and not (len(n) == args.devices and sum(n) == args.steps):
        raise PrivzvError(
            f"--device-steps {','.join(map(str, n))}: must give --devices "
            f"{args.devices} counts summing to --steps {args.steps}"
        )
    table = args.head_sampling == "table"
    if table and args.head_window:
        raise PrivzvError(
            f"--head-window {args.head_window}: a head on a sample of the table "
            "(--head-sampling table) steps every round; omit --head-window"
        )
    if table and args.head_clip is None:
        raise PrivzvError("--head-sampling table: needs --head-clip (the head's DP update)")
    if getattr(args, "sigma", None) is not None and args.clip is None:
        raise PrivzvError(
            f"--sigma {args.sigma:g}: needs --clip (sigma / sensitivity is the "
            "noise multiplier; or give --noise-multiplier)"
        )
    return api.describe(
        steps=args.steps,
        epochs=args.epochs,
        sample_rate=args.sample_rate,
        threat=args.threat,
        neighbors=args.neighbors,
        dataset_size=d,
        batch_size=b,
        devices=args.devices,
        device_steps=n,
        super_batch=bp,
        clip=args.clip,
        head_clip=args.head_clip,
        head_share=args.head_share,
        head_window=args.head_window,
        head_sampling=args.head_sampling,
    )


def _calibrate(args) -> int:
    from privzv import accounting

    release, schedule, exp = _question(args)
    if args.all:
        results = accounting.calibrate_all(args.epsilon, args.delta, release, schedule)
    else:
        results = [
            accounting.calibrate_exposure(args.epsilon, args.delta, release, schedule, exp, args.accountant)
        ]
    return _emit(args, results, compare="noise_multiplier" if args.clip is None else "sigma")


def _account(args) -> int:
    from privzv import accounting

    release, schedule, exp = _question(args)
    release = (
        release.with_sigma(args.sigma)
        if args.sigma is not None
        else release.with_noise_multiplier(args.noise_multiplier)
    )
    if args.all:
        results = accounting.account_all(release, schedule, args.delta)
    else:
        results = [accounting.account_exposure(release, schedule, exp, args.delta, args.accountant)]
    return _emit(args, results, compare="epsilon")


def _emit(args, results, compare: str) -> int:
    """Print the answer(s). A single answer must be finite (strict JSON: no Infinity or NaN);
    under --all a row without a finite answer is already an Unanswered saying why."""
    rows = [r.to_dict() for r in results]
    for row in rows:
        if args.clip is None and "sigma" in row:  # sigma is z times 2C/B: no C, no sigma
            row["sigma"] = row["head_sigma"] = None
    if args.all:
        cliutil.emit({"results": rows}, args.json, lambda o: _table(o["results"], compare))
        return 0
    r = results[0]
    if not all(math.isfinite(v) for v in (r.sigma, r.noise_multiplier, r.epsilon)):
        raise PrivzvError(
            f"{r.accountant}: epsilon or sigma exceeds the floating-point "
            "range for these inputs (no finite answer); give more noise"
        )
    cliutil.emit(rows[0], args.json, _single)
    return 0


def _version() -> str:
    import privzv

    return privzv.__version__


def _single(r: dict) -> str:
    kind = "rigorous upper bound" if r["rigorous"] else "NOT RIGOROUS: not an upper bound"
    return "\n".join(
        [
            *(
                []
                if r["sigma"] is None
                else [
                    f"sigma             {r['sigma']:.6g}"
                    + ("" if r["head_sigma"] is None else "   (downlink)")
                ]
            ),
            *(
                []
                if r["head_sigma"] is None
                else [f"head sigma        {r['head_sigma']:.6g}   (server head's DP update)"]
            ),
            f"noise multiplier  {r['noise_multiplier']:.6g}   (sigma / sensitivity"
            + (")" if r["head_sigma"] is None else ", downlink and head combined)"),
            f"epsilon           {r['epsilon']:.6g}   at delta {r['delta']:.3g}"
            + ("" if r["rigorous"] else "   NOT RIGOROUS"),
            f"accountant        {r['accountant']} ({kind}), threat {r['threat']}, neighbors {r['neighbors']}",
            f"note              {r['note']}",
        ]
    )


# the --all table's last column divides by this accountant's row (the paper's formula)
_REFERENCE = "seed"


def _blind(name: str) -> bool:
    """Whether the accountant ``name`` ignores the threat (:attr:`privzv.registry.Accountant.threats`)."""
    return registry.get(name).threats is None


def _table(rows: list[dict], compare: str) -> str:
    """A small table; the last column is sigma (calibrate) or epsilon (account) over the seed's.
    With a DP head, a "head sigma" column follows the (downlink) sigma."""
    seed = next((r[compare] for r in rows if r["accountant"] == _REFERENCE), None)
    with_head = any(r.get("head_sigma") is not None for r in rows)
    head = (
        f"{'threat':<19}{'accountant':<11}{'guarantee':<13}{'sigma':>11}"
        + (f"{'head sigma':>11}" if with_head else "")
        + f"{'noise mult.':>12}{'epsilon':>11}{'k':>8}{'q':>10}{f'{compare} / seed':>16}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["accountant"] is None:  # an Unanswered row
            threat = "(any: ignored)" if _blind(r["requested"]) else r["threat"]
            lines.append(f"{threat:<19}{r['requested']:<11}{r['reason']}")
            continue
        guarantee = "upper bound" if r["rigorous"] else "NOT RIGOROUS"
        threat = "(any: ignored)" if _blind(r["requested"]) else r["threat"]
        name = (
            r["accountant"]
            if r["requested"] in (None, r["accountant"])
            else (f"{r['requested']}>{r['accountant']}")
        )  # a fallback: requested > answered
        q = "-" if r["sampling_rate"] is None else f"{r['sampling_rate']:.4g}"
        ratio = "-" if seed is None else f"{r[compare] / seed:.3g}x"
        sigma = "-" if r["sigma"] is None else f"{r['sigma']:.5g}"
        lines.append(
            f"{threat:<19}{name:<11}{guarantee:<13}{sigma:>11}"
            + (f"{r['head_sigma']:>11.5g}" if with_head else "")
            + f"{r['noise_multiplier']:>12.5g}{r['epsilon']:>11.5g}"
            f"{r['compositions']:>8}{q:>10}{ratio:>16}"
        )
    lines.append(
        f"delta {rows[0]['delta']:.3g}, neighbors {rows[0]['neighbors']}. The seed row is "
        "the DPZV paper's formula (Theorem VI.5), not a privacy guarantee; compare it "
        "with the rigorous rows. a>b: accountant a could not answer, b did."
    )
    return "\n".join(lines)
