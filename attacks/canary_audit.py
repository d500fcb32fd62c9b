"""End-to-end audit of a real training run: label canaries, the attacker device's transcript.

``canaries`` training records get a pair of candidate labels (a_i, b_i) and, by a fair coin,
one of them as their training label (replace-one neighbours: the record with label a_i or b_i).
The run is trained with training's own builder and scheduler; the attacker (device 0) sees only
its transcript and scores each canary by s_i = sum over its rows of g[b_i] - g[a_i], g the
per-sample gradient it can tell (``View.gradient_rows``: the gradient itself for first-order
methods, Delta * (h+ - h-) for DPZV). Under a summing server dL/dz is negative only at the true
label, so s_i > 0 points to a_i. The ``model`` attacker instead reads the run's output, the
trained models (every device's and the server head, as the checkpoint holds them): s_i =
logit_{a_i} - logit_{b_i} of the final model on the canary's features, white-box label
inference on what the run releases at its end. Under a DP head this is the attack on the
head's own updates that the transcript attacker cannot make behind an MLP; whole-run DP covers
it (the final models are post-processing of every release and head step).

All canaries share one training run, so they are not independent trials. The bound uses the
one-run audit of Steinke, Nasr & Jagielski (NeurIPS 2023, Thm. 5.2, as in jax_privacy
``auditing._one_run_p_value``): the attacker guesses the r canaries with the largest |s_i| and
abstains on the rest; under (eps, delta)-DP the number v of correct guesses satisfies
P[V >= v] <= P[B >= v] + 2 m delta max_{1<=i<=v} (P[B >= v - i] - P[B >= v]) / i with
B ~ Binomial(r, e^eps/(1+e^eps)); eps_lb is
the largest eps whose p-value is <= alpha. The r values in ``GUESS_FRACTIONS`` are fixed in
advance and Bonferroni-corrected.

Beside it, the f-DP one-run bound of Mahloujifar, Melis & Chaudhuri (2024, "Auditing f-Differential
Privacy in One Run", the recursive bound with a cap, Alg. "audit_rh_with_cap"; as in jax_privacy
``auditing._epsilon_one_run_fdp``): it tests the claim "the mechanism is mu-GDP" directly with the
trade-off function f(x) = Phi(Phi^-1(1 - x) - mu), which for Gaussian mechanisms is much tighter
than a bound through (eps, delta) alone. ``mu_lb`` is the largest mu rejected; the reported
``fdp_eps_lb`` is the (eps, delta) that mu_lb-GDP implies (``privzv.gdp.epsilon_from_delta``): every
(eps, delta)-DP claim whose GDP conversion (``privzv.gdp.mu_from_epsilon``) is below mu_lb is
rejected. Exact for Gaussian releases (the device threat); a subsampled mechanism is not exactly
GDP, so there it is a bound on the GDP claim, not on an arbitrary (eps, delta) claim.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats

from privzv import gdp
from privzv.errors import PrivzvError

GUESS_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0)


def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """p-value of >= v correct out of r guesses on m canaries under (eps, delta)-DP (Thm. 5.2)."""
    q = special.expit(eps)
    beta = stats.binom.sf(v - 1, r, q)
    if delta == 0 or v == 0:
        return float(beta)
    i = np.arange(1, v + 1)
    cum = stats.binom.sf(v - i - 1, r, q) - beta
    return float(min(1.0, beta + np.max(cum / i) * delta * 2 * m))


def one_run_epsilon(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """Largest eps rejected at level alpha (0 when even eps = 0 is not rejected)."""
    objective = lambda e: alpha - one_run_p_value(m, r, v, e, delta)  # noqa: E731
    if objective(0.0) <= 0:
        return 0.0
    hi = 1.0
    while objective(hi) > 0 and hi < 100:
        hi *= 2
    if objective(hi) > 0:
        return hi
    return float(optimize.brentq(objective, 0.0, hi, xtol=1e-6))


def fdp_rejects(m: int, r: int, v: int, mu: float, alpha: float) -> bool:
    """Does v correct of r guesses on m canaries reject "mu-GDP" at level alpha? (Mahloujifar et
    al. 2024, recursive bound with a cap.) Starting from alpha times the observed fractions of
    correct and wrong guesses, the recursion propagates what mu-GDP forces on the expected
    fractions; the claim is rejected when they must exceed the guessed fraction r / m."""

    def inverse_blow_up(x: float) -> float:  # the smallest wrong-guess mass allowing x right
        return float(special.ndtr(special.ndtri(x) - mu))

    right, wrong = alpha * v / m, alpha * (r - v) / m
    for i in range(v - 1, -1, -1):
        wrong_new = max(wrong, inverse_blow_up(right))
        if wrong_new == wrong:
            break
        right = min(right + i / (r - i) * (wrong_new - wrong), 1.0)
        wrong = wrong_new
    return right + wrong > r / m


def fdp_mu(m: int, r: int, v: int, alpha: float) -> float:
    """Largest mu whose "mu-GDP" claim the guesses reject at level alpha (0 if none)."""
    if v == 0 or not fdp_rejects(m, r, v, 1e-9, alpha):
        return 0.0
    hi = 1.0
    while fdp_rejects(m, r, v, hi, alpha):
        hi *= 2
        if hi > 1e3:
            return hi
    return float(optimize.brentq(lambda mu: 0.5 - fdp_rejects(m, r, v, mu, alpha), 1e-9, hi, xtol=1e-6))


def eps_lower_bound(scores: np.ndarray, truth: np.ndarray, delta: float, alpha: float = 0.05) -> dict:
    """One-run eps lower bound from canary scores (positive: guess bit 1) and their true bits."""
    s, t = np.asarray(scores, float), np.asarray(truth, int)
    m = s.size
    order = np.argsort(-np.abs(s), kind="stable")
    best = {"eps_lb": 0.0, "guesses": 0, "correct": 0}
    fdp = {"mu_lb": 0.0, "fdp_guesses": 0, "fdp_correct": 0}
    level = alpha / len(GUESS_FRACTIONS)
    for frac in GUESS_FRACTIONS:
        r = max(1, int(round(frac * m)))
        pick = order[:r]
        v = int(((s[pick] > 0).astype(int) == t[pick]).sum())
        eps = one_run_epsilon(m, r, v, delta, level)
        if eps > best["eps_lb"] or best["guesses"] == 0:
            best = {"eps_lb": eps, "guesses": r, "correct": v}
        mu = fdp_mu(m, r, v, level)
        if mu > fdp["mu_lb"] or fdp["fdp_guesses"] == 0:
            fdp = {"mu_lb": mu, "fdp_guesses": r, "fdp_correct": v}
    fdp_eps = 0.0  # None at delta = 0: mu-GDP (mu > 0) has no finite eps there
    if fdp["mu_lb"] > 0:
        fdp_eps = float(gdp.epsilon_from_delta(fdp["mu_lb"], delta)) if delta > 0 else None
    return {**best, **fdp, "fdp_eps_lb": fdp_eps, "canaries": m, "alpha": alpha, "delta": delta}


def run(
    method: str = "fo-vector",
    dataset: str = "digits",
    canaries: int = 400,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    epochs: float = 3.0,
    seed: int = 0,
    secret_seed: int | None = None,
    server_kind: str = "sum",
    attacker: str = "transcript",
) -> dict:
    """Train ``method`` with label canaries, attack device 0's transcript, bound eps from below.

    ``seed`` is public (data, canaries, model init); the parties' noise comes from ``secret_seed``
    (None: the OS's entropy; give one only for a reproducible study). ``server_kind`` "sum": a
    summing server (no head; the score's sign reads the label); "mlp": an MLP head that trains
    as a DP mechanism of its own (the whole run, head included; the same score, now without the
    summing server's alignment of embedding and class). ``epsilon_upper`` is the run's ledger's
    epsilon after the last round (every release, the head's included). ``attacker``:
    "transcript" (device 0's messages) or "model" (the trained models at the end).
    """
    import torch

    from privzv.attacks.study_settings import CANARY_ATTACKERS, CLIP
    from privzv.attacks.transcript_view import wire_view
    from privzv.training import data, methods, privacy
    from privzv.training import run as training_run
    from privzv.training.config import TrainConfig

    if attacker not in CANARY_ATTACKERS:
        raise PrivzvError(f"--attacker {attacker!r}: choose one of {', '.join(CANARY_ATTACKERS)}")
    ds = data.load(dataset, TrainConfig().devices, seed=seed)
    n, k = len(ds.y_train), ds.num_classes
    if not 2 <= canaries <= n:
        raise PrivzvError(f"--canaries {canaries}: must be in [2, {n}]")
    rng = np.random.default_rng(seed)
    ids = rng.choice(n, canaries, replace=False)
    a = rng.integers(0, k, canaries)
    b = (a + rng.integers(1, k, canaries)) % k  # b != a
    bit = rng.integers(0, 2, canaries)
    y = ds.y_train.clone()
    y[torch.as_tensor(ids)] = torch.as_tensor(np.where(bit == 1, a, b))
    ds.y_train = y
    cfg = TrainConfig(
        dataset=dataset,
        method=method,
        epsilon=epsilon,
        delta=delta,
        clip=CLIP.get(method, 10.0),
        epochs=epochs,
        embed_dim=k,
        evals=1,
        seed=seed,
        server_kind=server_kind,
    )
    cfg.validate()
    rounds = training_run.rounds_for(cfg, n)
    plan = privacy.plan(cfg, methods.get(method), n, rounds)
    ledger = privacy.ledger(cfg, plan)
    sched = training_run.build(
        cfg, ds, release=plan.release if plan.private else None, ledger=ledger, secret_seed=secret_seed
    )
    sched.run(rounds, lambda r: False, lambda r: None)
    if attacker == "model":
        logits = final_logits(sched, [x[torch.as_tensor(ids)] for x in ds.x_train])
        scores = logits[np.arange(canaries), a] - logits[np.arange(canaries), b]
    else:
        view = wire_view(sched.recorder.transcripts["device0"])
        g = view.gradient_rows()
        pos = {int(r): i for i, r in enumerate(ids)}
        scores = np.zeros(canaries)
        for row, rec in enumerate(view.records):
            i = pos.get(int(rec))
            if i is not None:
                scores[i] += g[row, b[i]] - g[row, a[i]]
    bound = eps_lower_bound(scores, bit, delta)
    upper = ledger.epsilon_spent() if ledger is not None else math.inf
    head = plan.release.head if plan.private else None
    return {
        "method": method,
        "dataset": dataset,
        "epsilon_target": epsilon,
        "delta": delta,
        "sigma": plan.sigma,
        "head_sigma": head and head.sigma,
        "head_window": head and head.window,
        "head_sampling_rate": head and head.sampling_rate,
        "server_kind": server_kind,
        "attacker": attacker,
        "rounds": sched.round,
        "epsilon_upper": upper,
        "protects": type(sched.method).PROTECTS,
        "accountant": cfg.accountant,
        "threat": cfg.threat,
        "epochs": epochs,
        "seed": seed,
        "accuracy_of_sign": float(((scores > 0).astype(int) == bit).mean()),
        **bound,
    }


def final_logits(sched, features) -> np.ndarray:
    """The trained models' logits (devices' outputs into the server head) on ``features`` (one
    tensor per device), in eval mode, as :meth:`Scheduler.evaluate` computes them."""
    with sched.evaluating():
        return sched.server.head(sched.engine.embeddings(features, slice(None))).double().numpy()
