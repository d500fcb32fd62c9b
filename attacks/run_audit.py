"""The release a finished training run made, read from its public files only (``config.json``,
``summary.json``), for ``privzv attack audit --run``: the secret seed and noise states are not read."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from privzv.errors import PrivzvError


def release_of_run(run_dir) -> tuple:
    """``(release, schedule, claim)`` of the run in ``run_dir``: its release with the sigma it
    trained with (its summary's), its schedule (the rounds it planned over its records) and the
    claim it made (``epsilon``, ``delta``, ``threat``, ``accountant``)."""
    from privzv.attacks.registry import _dataset
    from privzv.cliutil import read_json
    from privzv.training import methods, privacy, run_folder
    from privzv.training.config import TrainConfig

    run = Path(run_dir)
    saved = run_folder.public_config(run)
    where = f"--run {str(run / run_folder.SUMMARY)!r}"
    if not (run / run_folder.SUMMARY).is_file():
        raise PrivzvError(f"{where}: missing (an unfinished run)")
    summary = read_json(run / run_folder.SUMMARY, where)
    if not isinstance(summary, dict):
        raise PrivzvError(f"{where}: not a run's summary")
    sigma, rounds = summary.get("sigma"), summary.get("rounds_planned")
    if not (
        isinstance(sigma, (int, float))
        and not isinstance(sigma, bool)
        and math.isfinite(sigma)
        and isinstance(rounds, int)
        and not isinstance(rounds, bool)
        and rounds >= 1
    ):
        raise PrivzvError(
            f"{where}: sigma {sigma!r} and rounds_planned {rounds!r}: need a finite "
            "number and an integer >= 1"
        )
    try:
        cfg = TrainConfig.from_dict(saved["config"]).validate()
    except PrivzvError as exc:
        raise PrivzvError(f"--run {str(run / run_folder.CONFIG)!r}: {exc}") from None
    if sigma <= 0 or not cfg.private:
        raise PrivzvError(f"--run {str(run)!r}: trained without noise (sigma {sigma:g}): no claim to audit")
    records = len(_dataset(cfg, saved.get("data"), f"--run {str(run)!r}").y_train)
    plan = privacy.plan(
        dataclasses.replace(cfg, sigma=float(sigma)), methods.get(cfg.method), records, rounds
    )
    claim = {"epsilon": cfg.epsilon, "delta": cfg.delta, "threat": cfg.threat, "accountant": cfg.accountant}
    return plan.release, plan.schedule, claim
