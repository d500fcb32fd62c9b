"""The bridge to privzv: the release a run makes, its sigma (calibrated or given), its ledger."""

from __future__ import annotations

import dataclasses

from privzv.errors import PrivzvError
from privzv.release import Release, Schedule
from privzv.training import defaults
from privzv.training.methods import head


@dataclasses.dataclass(frozen=True)
class Plan:
    """A run's privacy: ``release`` (with its sigma; None for a method without DP), ``schedule``,
    ``sigma`` (0.0 without noise) and the calibration ``result`` (a dict) when privzv computed it."""

    release: Release | None
    schedule: Schedule | None
    sigma: float
    result: dict | None

    @property
    def private(self) -> bool:
        return self.release is not None and self.sigma > 0


def plan(config, method_cls, records: int, rounds: int) -> Plan:
    """Work out the release and sigma of a run with ``rounds`` rounds over ``records`` records.

    Sigma: ``config.sigma`` if given, else 0 for ``--epsilon inf``, else
    ``privzv.accounting.calibrate`` for (epsilon, delta, threat, accountant). The schedule carries
    each device's step count from the activation order the run will follow
    (``privzv.training.sampling.Activation``; None for round-robin, which a pooled DP head needs),
    so the count per record is exact. The release
    includes the head's DP update when the head trains (``methods.head``); its sigma follows.
    """
    config = defaults.with_clip(config)
    schedule = Schedule(
        steps=rounds,
        dataset_size=records,
        devices=config.devices,
        threat=config.threat,
        super_batch=config.super_batch,
        device_steps=None if config.activation is None else device_steps(config, rounds),
    )
    release = head.on_table(method_cls.release(config), config, records)
    if not config.private:
        return Plan(release, schedule, 0.0, None)
    if release is None:
        raise PrivzvError(f"--method {config.method}: has no DP option; use --epsilon inf")
    if config.sigma is not None:
        if config.sigma == 0:  # would run without noise and without a ledger, under an epsilon
            raise PrivzvError(
                f"--sigma 0: adds no noise, so it cannot meet --epsilon "
                f"{config.epsilon:g}; give --sigma > 0, or --epsilon inf for no noise"
            )
        return Plan(release.with_sigma(config.sigma), schedule, float(config.sigma), None)
    from privzv import accounting

    result = accounting.calibrate(
        config.epsilon, config.delta, release, schedule, accountant=config.accountant
    )
    return Plan(release.with_sigma(result.sigma), schedule, float(result.sigma), result.to_dict())


def device_steps(config, rounds: int) -> tuple[int, ...]:
    """n_m of the first ``rounds`` rounds of the run's fixed activation order."""
    from privzv.training.sampling import Activation

    return Activation(config.devices, config.activation, config.seed).steps(rounds)


def noised_release(config, method_cls, sigma: float, release: Release | None, records: int) -> Release | None:
    """The release a method draws its noise for: ``release`` (calibrated) if given, else the
    method's release at downlink std ``sigma`` (its head's std follows), None without noise."""
    if release is not None or not sigma:
        return release
    config = defaults.with_clip(config)
    base = head.on_table(method_cls.release(config), config, records)
    return None if base is None else base.with_sigma(sigma)


def resumed(config, method_cls, sigma: float, result: dict | None, records: int) -> Plan:
    """The plan of a resumed run: its saved sigma (never re-calibrated; the ledger continues)."""
    config = defaults.with_clip(config)
    release = head.on_table(method_cls.release(config), config, records)
    if release is not None and sigma > 0:
        release = release.with_sigma(sigma)
    return Plan(release, None, sigma, result)


def ledger(config, p: Plan):
    """A fresh PrivacyLedger for a private run (budget: --epsilon, inf when only sigma is given)."""
    if not p.private:
        return None
    from privzv.ledger import PrivacyLedger

    return PrivacyLedger(
        release=p.release,
        schedule=p.schedule,
        delta=config.delta,
        epsilon_budget=config.epsilon,
        accountant=config.accountant,
        dataset_size=p.schedule.dataset_size,
    )


def mechanisms(p: Plan, ledger) -> list[dict] | None:
    """Each DP mechanism of a private run's rounds: name, noise std, sensitivity, noise multiplier
    and ``count``, its releases that contain the worst record so far (the ledger's k; for a
    pooled head, its windows; ``privzv.ledger.PrivacyLedger.head_steps``)."""
    if not p.private or ledger is None:
        return None
    release = p.release
    rows = [
        {
            "mechanism": "downlink",
            "sigma": release.sigma,
            "sensitivity": release.sensitivity,
            "noise_multiplier": release.sigma / release.sensitivity,
            "count": 0 if release.withholds else ledger.rounds(),
        }
    ]
    if release.head is not None:
        head = release.head
        rows.append(
            {
                "mechanism": "head",
                "sigma": head.sigma,
                "sensitivity": head.sensitivity,
                "noise_multiplier": head.sigma / head.sensitivity,
                "count": ledger.head_steps(),
                "window": head.window,
                "clip": head.clip,
                "share": release.head_share,
                **({"sampling_rate": head.sampling_rate} if head.sampled else {}),
            }
        )
    return rows
