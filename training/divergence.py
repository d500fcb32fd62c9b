"""Divergence. A run that produced NaN/inf stops: non-finite test loss or parameters are a failure
(exit code 1), never a result written as accuracy 0.0 with NaN in the outputs (docs/cli.md, "Exit
codes"). A run that learned and then lost it (finite, :func:`collapse`) is reported in its summary
(``diverged``) and printed as a warning."""

from __future__ import annotations

import math

import torch

from privzv.cliutil import Failed


class Diverged(Failed):
    """Training produced NaN or infinite values."""


# What a diverged run is told to try: its learning rates (given, tuned or the method's) times
# RATE_CUT. Measured on breast-cancer at epsilon 2 (docs/training.md, the banner and divergence
# bullet): fo-vector and vafl diverge at their defaults and run to the end at a hundredth of
# their rates.
RATE_CUT = 0.01
RATES = ("lr_device", "lr_server")
# What a run whose test loss rose above the untrained model's (accuracy held) is told: a third of
# its rates. Measured on digits, dpzv, epsilon 1, seed 100 (docs/figures/evidence_digits.jsonl):
# the loss rose to 3.20 at the defaults; a third of the device rate ended at 1.52 (accuracy 0.386
# -> 0.533), 0.3 of the head's at 1.76: either rate can drive it, so both are named.
OVERCONFIDENT_CUT = 1 / 3
CUTS = {RATE_CUT: "a hundredth", OVERCONFIDENT_CUT: "a third"}


def advice(method, cut: float = RATE_CUT) -> str:
    """The flags and values to try after a divergence of a run of ``method`` (a built Method): its
    applied rates times ``cut`` (a key of CUTS)."""
    applied = {name: getattr(method.config, name) for name in RATES}
    applied = {
        name: method.default_rate(name)[0] if value is None else value for name, value in applied.items()
    }
    flags = " ".join(f"--{name.replace('_', '-')} {value * cut:.3g}" for name, value in applied.items())
    return f"lower the learning rates: try {flags} ({CUTS[cut]} of this run's)"


def advised(exc: Diverged, method) -> Diverged:
    """``exc`` with :func:`advice` appended, once."""
    tip = advice(method)
    return exc if tip in str(exc) else Diverged(f"{exc}; {tip}")


def check(sched, evaluation) -> None:
    """Raise :class:`Diverged` if ``evaluation``'s test loss or any model parameter of ``sched``
    (devices and server head) is NaN or infinite."""
    models = [(f"device{d.index}", d.model) for d in sched.devices] + [("server", sched.server.head)]
    bad = [
        name for name, model in models if not all(bool(torch.isfinite(p).all()) for p in model.parameters())
    ]
    if bad or not math.isfinite(evaluation.test_loss):
        what = f"non-finite parameters in {', '.join(bad)}" if bad else f"test loss {evaluation.test_loss}"
        raise Diverged(f"training diverged by round {sched.round} ({what}); {advice(sched.method)}, or --lam")


# A finite run "collapsed" when its last evaluation gave back much of what it had gained: its
# accuracy fell below best - max(DROP, DROP_SHARE * (best - chance)), or its test loss rose above
# the untrained model's (round 0) by more than LOSS_MARGIN of it, after having been below it.
# Reported in the summary, not an error. (Without the margin a run whose loss barely moved was
# told "test loss 2.31 is above the untrained model's 2.31".)
DROP = 0.10
DROP_SHARE = 0.5
LOSS_MARGIN = 0.01


def collapse(
    rows: list[dict],
    chance: float,
    tip: str = "lower --lr-device / --lr-server",
    overconfident: str = "lower --lr-device / --lr-server",
) -> dict | None:
    """``{"round", "best_round", "best_accuracy", "last_accuracy", "reason"}`` when the evaluations
    ``rows`` (metrics.jsonl: round, test_accuracy, test_loss; round 0 first) show a run that learned
    and then lost it (the thresholds above), else None. ``chance``: the majority-class accuracy;
    ``tip``: what to try (:func:`advice`); ``overconfident``: what to try when only the loss rose
    (:func:`advice` with OVERCONFIDENT_CUT)."""
    if len(rows) < 2:
        return None
    best = max(rows, key=lambda r: r["test_accuracy"])
    last, first = rows[-1], rows[0]
    floor = best["test_accuracy"] - max(DROP, DROP_SHARE * (best["test_accuracy"] - chance))
    learned = min(r["test_loss"] for r in rows) < first["test_loss"]
    reasons, hint = [], tip
    if last["test_accuracy"] < floor:
        reasons.append(
            f"test accuracy fell from {best['test_accuracy']:.3f} (round {best['round']}) "
            f"to {last['test_accuracy']:.3f} (chance {chance:.3f})"
        )
    risen = last["test_loss"] > first["test_loss"] * (1 + LOSS_MARGIN)
    if learned and last["round"] > first["round"] and risen:
        reasons.append(
            f"test loss {last['test_loss']:.3g} is above the untrained model's {first['test_loss']:.3g}"
        )
        if len(reasons) == 1:  # accuracy held: overconfident predictions (README's demo check)
            hint = f"predictions grew overconfident; {overconfident}"
    if not reasons:
        return None
    return {
        "round": last["round"],
        "best_round": best["round"],
        "best_accuracy": best["test_accuracy"],
        "last_accuracy": last["test_accuracy"],
        "reason": "training diverged: " + "; ".join(reasons) + f" ({hint})",
    }
