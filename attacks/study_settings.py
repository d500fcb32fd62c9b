"""The study's grid and per-method settings (light: imported by the CLI to build its flags)."""

import math

from privzv.training import tuned

DATASETS = ("digits", "breast-cancer", "mnist-5k")
EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, math.inf)
METHODS = {
    "dpzv": "DPZV scalar (downlink)",
    "vafl": "VAFL forward vector (uplink)",
    "fo-vector": "fo-vector backward vector (downlink)",
}
SERVER_KIND = "sum"  # Fu et al.'s direct label inference needs logits = sum of device outputs
# Where no sweep covers the summing server (tuned.HPARAMS_SUM): C = 10 (arXiv:2502.20565v2, App. G) for
# DPZV and VAFL, C = 1 for fo-vector (a softmax cross-entropy gradient with respect to the
# logits has norm <= sqrt 2), the methods' default learning rates.
# (Also attacks.canary_audit's clips.)
CLIP = {"dpzv": 10.0, "vafl": 10.0, "fo-vector": 1.0}
EPOCHS = {"digits": 5.0, "breast-cancer": 10.0, "mnist-5k": 1.0}
CANARY_ATTACKERS = ("transcript", "model")  # attacks.canary_audit: device 0's messages, final models


def hyperparameters(dataset: str, method: str) -> dict:
    """TrainConfig fields (clip, learning rates) and ``source``: which table they come from."""
    found = tuned.lookup(dataset, method, SERVER_KIND)
    if found is not None:
        return {**found, "source": f"privzv.training.tuned.HPARAMS_SUM (swept, server_kind={SERVER_KIND})"}
    return {
        "clip": CLIP[method],
        "source": "untuned: paper's C, method's default rates (no sweep"
        f" for {dataset} with server_kind={SERVER_KIND})",
    }
