"""The small measurements quoted in docs/attacks.md for issue 11's fixes and new attacks.

1. Trained runs on digits (summing server, embed_dim 10, batch 32, 3 epochs, epsilon 1, delta
   1e-5, device threat, pld; seeds 0-2): DPZV (C = 0.3) and VAFL (C = 0.1), the study's clips.
   Per run: model completion from the device's clean bottom model and from its (VAFL: noised)
   uplinks; the server's feature reconstruction against its labels-only baseline; white-box
   inversion of inference-time embeddings; membership inference (loss threshold).
2. Probes on digits' labels (``privzv.attacks.probe``): the paper's per-sample protocol and DPZV's
   batch scalar, curious client, one query per record; plain, saturating and duplicate-id
   malicious probes (C = 10, B = 32, 100 probes, 100 targets) at the sigma that calibrates DPZV's
   release to epsilon 10 and 1 in the probe section's setting (T = 900, D = 1437, M = 4, delta
   1e-5, device threat, pld).
3. One-run bounds on 400 of 400 right guesses (delta 1e-5, 95%): Steinke et al. vs f-DP.

Prints one JSON object (means and 95% t-intervals over seeds where there are seeds).

    python benchmarks/bench_attack_checks.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

from privzv import accounting
from privzv.attacks import canary_audit, metrics, probe, registry
from privzv.release import Release, Schedule
from privzv.training import data
from privzv.training.config import TrainConfig
from privzv.training.run import train, versions
from privzv.training.run_folder import CHECKPOINT

CLIPS = {"dpzv": 0.3, "vafl": 0.1}
SEEDS = (0, 1, 2)


def run_attacks(method: str, seed: int) -> dict:
    cfg = TrainConfig(
        dataset="digits",
        method=method,
        epsilon=1.0,
        server_kind="sum",
        embed_dim=10,
        epochs=3,
        batch_size=32,
        clip=CLIPS[method],
        evals=1,
        seed=seed,
        secret_seed=10_000 + seed,
    )
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        summary = train(cfg, run)
        out = {"test_accuracy": summary["test_accuracy"], "sigma": summary["sigma"]}
        clean = registry.run_attack("model-completion", run, seed).metrics
        feat = registry.run_attack("feature-server", run, seed).metrics
        inv = registry.run_attack("feature-inversion", run, seed).metrics
        mia = registry.run_attack("membership", run, seed).metrics
        (run / CHECKPOINT).rename(run / "away.pt")  # the device's transcript alone
        uplink = registry.run_attack("model-completion", run, seed).metrics
    out.update(
        completion_bottom_model=clean["accuracy"],
        completion_uplink=uplink["accuracy"],
        completion_prior=clean["prior"],
        completion_raw_features=clean["raw_accuracy"],
        feature_server_r2=feat["r2"],
        labels_only_r2=feat["baseline_r2"],
        feature_server_gain=feat["r2"] - feat["baseline_r2"],
        inversion_mse=inv["mse"],
        inversion_r2=inv["r2"],
        labels_only_mse=inv["baseline_mse"],
        membership_auc=mia["auc"],
        membership_tpr_at_1e2=mia["tpr@fpr=0.01"],
    )
    return out


def probes() -> dict:
    y = load_digits().target
    out = {}
    for protocol in probe.PROTOCOLS:
        r = probe.label_inference(y, 10, variant="curious", protocol=protocol, batch_size=64, targets=len(y))
        out[f"curious-{protocol}"] = {"accuracy": r["accuracy"], "prior": r["prior"]}
    release = Release(clip=10.0, batch_size=32)
    schedule = Schedule(steps=900, dataset_size=len(data.load("digits", 4).y_train), devices=4)
    for eps in (10.0, 1.0):
        sigma = accounting.calibrate(eps, 1e-5, release, schedule).sigma
        for variant in ("malicious", "saturating", "duplicate-id"):
            r = probe.label_inference(
                y, 10, variant=variant, repeats=100, targets=100, sigma=sigma, clip=10.0, batch_size=32
            )
            out[f"{variant}-eps{eps:g}"] = {
                "sigma": sigma,
                "accuracy": r["accuracy"],
                "prior": r["prior"],
                "refused": r["refused"],
            }
    return out


def main() -> None:
    torch.set_num_threads(1)
    start = time.perf_counter()
    trained = {m: [run_attacks(m, s) for s in SEEDS] for m in CLIPS}
    one_run = canary_audit.eps_lower_bound(np.ones(400), np.ones(400, int), delta=1e-5)
    print(
        json.dumps(
            {
                "benchmark": "attack_checks",
                "versions": versions(),
                "seeds": list(SEEDS),
                "trained": {m: {**metrics.summarize(rows), "per_seed": rows} for m, rows in trained.items()},
                "probes": probes(),
                "one_run_400_of_400": {k: one_run[k] for k in ("eps_lb", "mu_lb", "fdp_eps_lb")},
                "wall_seconds": time.perf_counter() - start,
            },
            allow_nan=False,
        )
    )


if __name__ == "__main__":
    main()
