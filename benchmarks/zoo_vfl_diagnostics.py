"""Why zoo-vfl's defaults stay near the majority class on mnist1d (issue 22 item 5): two probes at
initialisation, each far cheaper than a training run (docs/results.md, "Stable defaults").

``--loss-differences``: per dataset, the size of zoo-vfl's per-record loss differences
delta_i = (l_i(h) - l_i(h^)) / lam (lam 1e-3, u on the sqrt(d) sphere, 4 devices, embed_dim 16,
``--seed``; the other devices' true embeddings, 16 batches of B = 32, 4 directions per device) and,
for each C, the release's signal over its noise: the part of the clipped batch mean along the
unclipped one, over sigma = z 2C / B, z the noise multiplier of a default zoo-vfl run at
``--epsilon`` (seed 0).

``--head``: the zeroth-order head alone (``methods.head.ZerothOrderHead``, P = 4,810 parameters on
mnist1d) trained for the default run's rounds on the devices' frozen initial embeddings, at each
``--rates``, without noise and with the default run's head noise multiplier at each ``--epsilons``
for each ``--head-clips`` C_h (sigma_h = z_h 2 C_h / B); prints the test accuracy and loss at five
points.

``--head-derivatives``: per dataset, the |d_i| quantiles of the head's per-example directional
derivatives d_i = (l_i(theta + lam v) - l_i(theta - lam v)) / (2 lam) at initialisation (what
C_h clips).

    python benchmarks/zoo_vfl_diagnostics.py --loss-differences [--datasets ...]
    python benchmarks/zoo_vfl_diagnostics.py --head [--dataset mnist1d] [--rates 0.005 0.05] [--head-clips 0.1]
    python benchmarks/zoo_vfl_diagnostics.py --head-derivatives [--datasets ...]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from privzv.release import HeadUpdate
from privzv.training import data, defaults, methods, models, privacy, run, zo
from privzv.training.config import TrainConfig
from privzv.training.methods import head
from privzv.training.noise import SeededNoise

CLIPS = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
LAM, B, M, E = 1e-3, 32, 4, 16


def plan(dataset: str, epsilon: float):
    """(dataset, rounds, Plan) of a default zoo-vfl run at ``epsilon`` (seed 0)."""
    config = TrainConfig(dataset=dataset, method="zoo-vfl", epsilon=epsilon, seed=0, transcripts=False)
    ds = data.from_config(config)
    method_cls, rounds = methods.get("zoo-vfl"), run.rounds_for(config, len(ds.y_train))
    resolved, _ = defaults.resolve(config, ds)
    return ds, rounds, privacy.plan(resolved, method_cls, len(ds.y_train), rounds)


def models_at_init(ds, seed: int):
    torch.manual_seed(seed)
    return [models.device_model(ds, m, E) for m in range(M)], models.server_model(M, E, ds.num_classes)


def loss_differences(dataset: str, epsilon: float, seed: int) -> dict:
    """|delta_i| quantiles and the release's signal-to-noise ratio for each C in CLIPS."""
    ds, _, p = plan(dataset, epsilon)
    z = p.sigma / p.release.sensitivity
    devices, top = models_at_init(ds, seed)
    rows = []
    with torch.no_grad():
        for b in range(min(16, len(ds.y_train) // B)):
            ids = torch.arange(B * b, B * (b + 1))
            x = [ds.x_train[m][ids].float() for m in range(M)]
            h = [d(xm) for d, xm in zip(devices, x)]
            base = nn.functional.cross_entropy(top(h), ds.y_train[ids], reduction="none")
            for m, model in enumerate(devices):
                flat = nn.utils.parameters_to_vector(model.parameters())
                for k in range(4):
                    u = torch.randn(
                        flat.numel(), generator=torch.Generator().manual_seed(1000 * b + 100 * m + k)
                    )
                    nn.utils.vector_to_parameters(
                        flat - LAM * u * flat.numel() ** 0.5 / u.norm(), model.parameters()
                    )
                    moved = list(h)
                    moved[m] = model(x[m])
                    nn.utils.vector_to_parameters(flat, model.parameters())
                    after = nn.functional.cross_entropy(top(moved), ds.y_train[ids], reduction="none")
                    rows.append((base - after) / LAM)
    delta = torch.stack(rows)
    full = delta.mean(1)
    snr = {}
    for clip in CLIPS:
        mean = delta.clamp(-clip, clip).mean(1)
        along = ((mean - mean.mean()) * (full - full.mean())).mean() / full.std()
        snr[clip] = round(float(along / (z * 2 * clip / B)), 3)
    q = torch.quantile(delta.abs().flatten(), torch.tensor([0.5, 0.9, 0.99])).tolist()
    return {"dataset": dataset, "epsilon": epsilon, "z": round(z, 2), "abs_delta_median_p90_p99":
            [round(v, 3) for v in q], "snr_by_clip": snr}  # fmt: skip


def head_derivatives(dataset: str, seed: int) -> dict:
    """|d_i| quantiles of the ZO head's per-example directional derivatives at initialisation
    (d_i = (l_i(theta + lam v) - l_i(theta - lam v)) / (2 lam), v on the sqrt(P) sphere; the
    devices' initial embeddings, 16 batches of B = 32, 4 directions each)."""
    ds, _, _ = plan(dataset, 2.0)
    devices, top = models_at_init(ds, seed)
    params = list(top.parameters())
    rows = []
    with torch.no_grad():
        for b in range(min(16, len(ds.y_train) // B)):
            ids = torch.arange(B * b, B * (b + 1))
            h = [d(ds.x_train[m][ids].float()) for m, d in enumerate(devices)]
            for k in range(4):
                seed_k = 1000 * b + k
                norm = zo.perturb_(params, seed_k, LAM)
                plus = head.losses(top, h, ds.y_train[ids])
                zo.perturb_(params, seed_k, -2 * LAM, norm)
                minus = head.losses(top, h, ds.y_train[ids])
                zo.perturb_(params, seed_k, LAM, norm)
                rows.append((plus - minus) / (2 * LAM))
    q = torch.quantile(torch.stack(rows).abs().flatten(), torch.tensor([0.5, 0.9, 0.99])).tolist()
    return {"dataset": dataset, "parameters": sum(p.numel() for p in params),
            "head_abs_d_median_p90_p99": [round(v, 3) for v in q]}  # fmt: skip


def zo_head(dataset: str, rates: list[float], epsilons: list[float], seed: int, clips: list[float]):
    """The ZO head alone on frozen initial embeddings: one row per (sigma_h, C_h, rate)."""
    ds, rounds, _ = plan(dataset, epsilons[0])
    devices, _ = models_at_init(ds, seed)
    with torch.no_grad():
        train = [d(ds.x_train[m].float()) for m, d in enumerate(devices)]
        test = [d(ds.x_test[m].float()) for m, d in enumerate(devices)]
    heads = {e: plan(dataset, e)[2].release.head for e in epsilons}
    z_h = {e: u.sigma / u.sensitivity for e, u in heads.items()}  # sigma_h at C_h: z_h 2 C_h / B
    noises = [("none", 0.0, None)]
    noises += [(f"epsilon {e:g}", z * 2 * c / B, c) for e, z in z_h.items() for c in clips]
    for label, sigma_h, clip in noises:
        for rate in rates:
            torch.manual_seed(seed + 1)
            top = models.server_model(M, E, ds.num_classes)
            dp = HeadUpdate(clip=clip, batch_size=B, sigma=sigma_h) if sigma_h else None
            step = head.ZerothOrderHead(top, rate, LAM, SeededNoise(seed, "head"), dp)
            batches = torch.Generator().manual_seed(seed)
            curve = []
            for t in range(rounds):
                ids = torch.randint(0, len(ds.y_train), (B,), generator=batches)
                step.step([h[ids] for h in train], ds.y_train[ids])
                if (t + 1) % (rounds // 5) == 0:
                    with torch.no_grad():
                        logits = top(test)
                    accuracy = float((logits.argmax(1) == ds.y_test).float().mean())
                    loss = float(nn.functional.cross_entropy(logits, ds.y_test))
                    curve.append([t + 1, round(accuracy, 3), round(loss, 3)])
            yield {"dataset": dataset, "noise": label, "head_clip": clip, "sigma_h": round(sigma_h, 4), "rate": rate,
                   "parameters": sum(q.numel() for q in top.parameters()), "round_accuracy_loss": curve}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--loss-differences", action="store_true")
    what.add_argument("--head", action="store_true")
    what.add_argument("--head-derivatives", action="store_true")
    parser.add_argument("--datasets", nargs="+", default=["digits", "breast-cancer", "mnist-5k", "mnist1d"])
    parser.add_argument("--dataset", default="mnist1d")
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--rates", type=float, nargs="+", default=[0.005, 0.05])
    parser.add_argument("--head-clips", type=float, nargs="+", default=[0.1])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.loss_differences:
        rows = (loss_differences(d, args.epsilon, args.seed) for d in args.datasets)
    elif args.head_derivatives:
        rows = (head_derivatives(d, args.seed) for d in args.datasets)
    else:
        rows = zo_head(args.dataset, args.rates, args.epsilons, args.seed, args.head_clips)
    for row in rows:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
