"""The issue-20 sweep of the sampled head's rate and clip (docs/results.md "The head on a secret
sample of the table"): a head-only replay of the frozen-devices control on the tuning seed 100.

The control trains no device, so its head is DP-SGD on fixed features: the frozen devices'
embeddings of every training record (the table, filled at once: the run's table fills during its
first epoch), a Poisson sample at q_h = B/D each step, the clipped sum (``methods.head.
linear_clipped_sum``) over B plus N(0, (z_h 2 C_h / B)^2) per coordinate (replace-one), SGD with
momentum, T = the run's rounds; z_h is the run's calibrated value (``privacy.plan``, whole budget
on the head). Sample and noise come from torch's generator seeded 0, not the server's keyed
streams (the same distributions), so a line is about 5x cheaper than ``privzv train``. Settings:
``SETTINGS`` (mnist1d: 100,000 records, B 500, 20 epochs, and the same at B 2,000 and 8,000;
digits: B 32, 10 epochs).

    python benchmarks/sweep_sampled_head.py SETTING EPSILON '[{"clip": 1.0, "lr": 0.1, "mom": 0.9}, ...]' [KIND]

KIND: the head's ``--server-kind`` (default mlp; mlp-gain: its input times ``models.HEAD_GAIN``).
A dict may give ``noise_step`` instead of ``lr`` (lr = noise_step / (sigma_h sqrt(P))), and
``"plain": true`` for the no-noise head (the sample's mean loss, no clip, no noise: what the run
with ``--epsilon inf`` does on its round's batch). One JSON line per setting: the overrides, z_h,
T, (round, test accuracy, test loss) at four points and the weights' norms at the end.
``noise_step`` is lr sigma_h sqrt(P), the norm by which a step's noise moves the head
(``methods.head.NOISE_STEP`` is the default's).
"""

from __future__ import annotations

import json
import math
import sys

import torch

SEED = 100
SETTINGS = {
    "mnist1d": dict(dataset="mnist1d", records=100_000, batch_size=500, epochs=20),
    # the same budget over larger head batches: q_h and B x4 / x16, T / 4 / 16 (the rounds)
    "mnist1d-b2000": dict(dataset="mnist1d", records=100_000, batch_size=2000, epochs=20),
    "mnist1d-b8000": dict(dataset="mnist1d", records=100_000, batch_size=8000, epochs=20),
    "digits": dict(dataset="digits", batch_size=32, epochs=10),
}


def replay(setting: str, epsilon: float, settings: list[dict], kind: str = "mlp"):
    """Yield one result per dict of ``settings`` ({clip, lr or noise_step, mom, plain}), each from
    the same start, with the head ``kind``."""
    from privzv.training import data, methods, privacy, run
    from privzv.training.config import TrainConfig
    from privzv.training.methods.head import linear_clipped_sum

    s = SETTINGS[setting]
    config = TrainConfig(
        **s, devices=4, epsilon=epsilon, freeze="devices", transcripts=False, seed=SEED, server_kind=kind
    ).validate()
    ds = data.load(s["dataset"], 4, records=s.get("records"))
    d, b = len(ds.y_train), s["batch_size"]
    rounds = run.rounds_for(config, d)
    release = privacy.plan(config, methods.get(config.method), d, rounds).release
    z_h = release.head.sigma / release.head.sensitivity
    sched = run.build(config, ds, release=release, secret_seed=SEED)
    with torch.no_grad():
        train = [dev.model(dev.x) for dev in sched.devices]
        test = [dev.model(x) for dev, x in zip(sched.devices, ds.x_test)]
    module = sched.server.head
    start = {k: v.clone() for k, v in module.state_dict().items()}
    params = list(module.parameters())
    size = sum(p.numel() for p in params)
    for v in settings:
        module.load_state_dict(start)
        plain = v.get("plain", False)
        sigma = 0.0 if plain else z_h * 2 * v["clip"] / b
        lr = v["lr"] if "lr" in v else v["noise_step"] / (sigma * math.sqrt(size))
        opt = torch.optim.SGD(params, lr=lr, momentum=v["mom"])
        gen = torch.Generator().manual_seed(0)
        curve = []
        for r in range(1, rounds + 1):
            ids = torch.nonzero(torch.rand(d, generator=gen) < b / d).reshape(-1)
            rows = [x[ids] for x in train]
            if plain:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(module(rows), ds.y_train[ids]).backward()
                opt.step()
            else:
                flat = linear_clipped_sum(module, rows, ds.y_train[ids], v["clip"], torch.ones(len(ids))) / b
                flat = flat + sigma * torch.randn(flat.shape, generator=gen)
                for p, g in zip(params, flat.split([p.numel() for p in params])):
                    p.grad = g.view_as(p)
                opt.step()
            if r % (rounds // 4) == 0:
                with torch.no_grad():
                    logits = module(test)
                    curve.append(
                        (
                            r,
                            round(float((logits.argmax(1) == ds.y_test).float().mean()), 3),
                            round(float(torch.nn.functional.cross_entropy(logits, ds.y_test)), 2),
                        )
                    )
        yield {
            "setting": setting,
            "epsilon": epsilon,
            "seed": SEED,
            **v,
            "kind": kind,
            "lr": lr,
            "z_h": z_h,
            "T": rounds,
            "noise_step": lr * sigma * math.sqrt(size),
            "curve": curve,
            "weight_norms": [round(float(p.detach().norm()), 2) for p in params],
        }


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    for line in replay(argv[0], float(argv[1]), json.loads(argv[2]), *argv[3:4]):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
