"""The study's grid and per-method settings (light: imported by the CLI to build its flags)."""
import math

DATASETS = ("digits", "breast-cancer", "mnist-5k")
EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, math.inf)
METHODS = {"dpzv": "DPZV scalar (downlink)", "vafl": "VAFL forward vector (uplink)",
           "fo-vector": "fo-vector backward vector (downlink)"}
# C = 10 (papers/001 App. H) for DPZV and VAFL; C = 1 for fo-vector: a softmax cross-entropy
# gradient with respect to the logits has norm <= sqrt 2, so C = 10 would only add noise.
CLIP = {"dpzv": 10.0, "vafl": 10.0, "fo-vector": 1.0}
EPOCHS = {"digits": 5.0, "breast-cancer": 10.0, "mnist-5k": 1.0}
