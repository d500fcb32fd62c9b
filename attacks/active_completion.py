"""Active model completion (Fu et al., USENIX Security 2022, Sec. 5.2), attacker = a device.

A malicious device runs a malicious local optimiser: it scales up its own bottom-model updates so
that the joint model comes to rely on its output, which then carries more label information; at
the end it completes its bottom model with the labels of a few records per class it knows
(``privzv.attacks.model_completion``). Every other party follows the protocol. Fu et al.'s
MaliciousSGD scales each parameter's step adaptively by a ratio in [1, 5]; here the ratio is
fixed at its bound (``BOOST`` = 5), the simplest optimiser of that family:

* first-order devices (``vafl``, ``fo-vector``): the attacker's SGD learning rate times BOOST;
* ZO devices (``dpzv``): the attacker's step w <- w + (lam - BOOST eta Delta) u, its own rate
  amplified on the scalar it receives (the ZO analogue: the same estimate, a larger step).

The attack changes training, so it cannot read a finished run's transcript: ``malicious_run``
trains the run's public config again (same public seed, sigma and rounds; the noise from a seed
of the attack's own, since the run's secret is not the attacker's) with the attacker's optimiser
swapped, and the result is compared with passive completion of the honest run.
"""

from __future__ import annotations

import dataclasses

from privzv.errors import PrivzvError

BOOST = 5.0  # Fu et al.'s MaliciousSGD: its per-parameter scale-up ratio is at most 5
METHODS = ("dpzv", "vafl", "fo-vector")


def amplify(method, attacker: int, boost: float = BOOST) -> None:
    """Make device ``attacker``'s own updates ``boost`` times larger in ``method`` (after setup);
    the other devices and the server are untouched."""
    if not boost >= 1.0:
        raise PrivzvError(f"boost {boost!r}: must be >= 1 (the attacker scales its updates up)")
    if method.name not in METHODS:
        raise PrivzvError(f"--method {method.name}: active completion applies to {', '.join(METHODS)}")
    if hasattr(method, "device_optimizers"):  # first-order devices: SGD learning rate
        for group in method.device_optimizers[attacker].param_groups:
            group["lr"] *= boost
        return
    honest = method.device_receive  # DPZV: eta in w + (lam - eta Delta) u

    def receive(device, down):
        if device.index != attacker:
            return honest(device, down)
        rate = method.lr_device
        method.lr_device = rate * boost
        try:
            return honest(device, down)
        finally:
            method.lr_device = rate

    method.device_receive = receive


def malicious_run(
    config, dataset, attacker: int, *, sigma: float = 0.0, boost: float = BOOST, secret_seed: int = 0
):
    """Train ``config`` (a TrainConfig) on ``dataset`` with device ``attacker``'s optimiser
    amplified; ``sigma`` the run's noise std (0: none). Returns (the attacker's bottom model,
    the joint model's test accuracy); raises ``Diverged`` when the malicious run diverged."""
    from privzv.training import divergence, methods, privacy, run

    cfg = dataclasses.replace(config, transcripts=False, sigma=float(sigma) if config.private else None)
    rounds = run.rounds_for(cfg, len(dataset.y_train))
    plan = privacy.plan(cfg, methods.get(cfg.method), len(dataset.y_train), rounds)
    sched = run.build(
        cfg,
        dataset,
        sigma=plan.sigma,
        release=plan.release if plan.private else None,
        secret_seed=secret_seed,
    )
    amplify(sched.method, attacker, boost)
    sched.run(rounds, eval_at=lambda r: False, on_eval=lambda r: None)
    evaluation = sched.evaluate(dataset.x_test, dataset.y_test)
    divergence.check(sched, evaluation)  # the scaled-up steps can diverge: Diverged, no result
    return sched.devices[attacker].model.eval(), evaluation.test_accuracy
