"""rr-prior: label DP by randomised response with a prior (Ghazi et al. 2021, "Deep Learning with
Label Differential Privacy", NeurIPS; RRWithPrior, Alg. 2, and the two-stage LP-2ST of Sec. 3).

**Protects the labels only, for label neighbours** (two datasets that differ in one record's
label, features and record set fixed), with pure epsilon (delta = 0). Nothing protects the
devices' features, and the epsilon is not comparable with the record-level (replace-one)
epsilons of dpzv / fo-vector, which also cover which records are present.

The server privatises each training label exactly once, then trains plain first-order VFL
(fo-vector's protocol without noise) on the privatised labels: every later message is
post-processing of the privatised labels and the features, so the whole run is epsilon-label-DP.

* Stage 1 (rounds before T/2): the records of a public random half (from the public seed) get
  plain randomised response over all K classes (the uniform prior); training uses only them (the
  others' downlink gradients are zero, the head steps on stage-1 rows only).
* Stage 2 (at round T/2): the other half gets RRWithPrior, the prior of record i being the
  model's softmax on its current (stale) table embeddings, a function of features and stage-1
  outputs only, never of record i's label; then training uses every record.

RRTop-k (Ghazi et al., Alg. 1) with Y_k the k labels of highest prior, k* = argmax_k
e^eps / (e^eps + k - 1) * sum_{y in Y_k} p_y: a label y in Y_k is kept with probability
e^eps / (e^eps + k - 1) and turned into each other member of Y_k with 1 / (e^eps + k - 1); a label
outside Y_k becomes a uniform member of Y_k. Every output's probability ratio between two labels
is at most e^eps (their Lemma 2; ``tests/training/test_rr_prior.py`` checks it exactly).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from privzv.training import seeds
from privzv.training.messages import SERVER, device_index, device_name
from privzv.training.methods import common


def top_k_sets(prior: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(order [n, K]: classes by decreasing prior, ties by index; k* [n]) of RRWithPrior."""
    order = np.argsort(-prior, axis=1, kind="stable")
    mass = np.cumsum(np.take_along_axis(prior, order, axis=1), axis=1)
    k = np.arange(1, prior.shape[1] + 1)
    weight = mass * _keep(epsilon, k)
    return order, weight.argmax(axis=1) + 1


def _keep(epsilon: float, k):
    """e^eps / (e^eps + k - 1), written as 1 / (1 + (k - 1) e^-eps) (finite for any epsilon)."""
    return 1.0 / (1.0 + (np.asarray(k) - 1) * math.exp(-epsilon))


def output_distribution(prior: np.ndarray, labels: np.ndarray, epsilon: float) -> np.ndarray:
    """[n, K]: the probability of each output label for record i with true label ``labels[i]``
    and prior ``prior[i]`` under RRWithPrior at ``epsilon``."""
    n, classes = prior.shape
    order, k = top_k_sets(prior, epsilon)
    in_top = np.zeros((n, classes), dtype=bool)
    in_top[np.arange(n)[:, None], order] = np.arange(classes)[None, :] < k[:, None]
    keep = _keep(epsilon, k)
    other = (1.0 - keep) / np.maximum(k - 1, 1)          # = 1 / (e^eps + k - 1)
    truth_in = in_top[np.arange(n), labels]
    probs = np.where(in_top, np.where(truth_in, other, 1.0 / k)[:, None], 0.0)
    rows = np.flatnonzero(truth_in)
    probs[rows, labels[rows]] = keep[rows]
    return probs


def randomise(prior: np.ndarray, labels: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """One RRWithPrior draw per record (inverse CDF of :func:`output_distribution`)."""
    probs = output_distribution(prior, labels, epsilon)
    u = rng.random(len(labels))[:, None]
    return np.minimum((np.cumsum(probs, axis=1) < u).sum(axis=1), prior.shape[1] - 1)


class RRPrior(common.FirstOrderMethod):
    name = "rr-prior"
    LABEL_DP = True     # privacy by privatised labels, not by a release (privzv.training.run)

    @classmethod
    def release(cls, config):
        return None

    def setup(self, devices, server) -> None:
        from privzv.training import run

        super().setup(devices, server)
        self.server = server
        n = len(server.labels)
        perm = np.random.default_rng(seeds.derive(self.config.seed, "rr-stage")).permutation(n)
        self.stage_one = torch.zeros(n, dtype=torch.bool)
        self.stage_one[torch.as_tensor(perm[: n // 2])] = True
        self.switch = run.rounds_for(self.config, n) // 2
        self.true_labels = server.labels.clone()
        self.known = self.stage_one.clone()
        with torch.no_grad():   # K: the head's output size (not read from the labels)
            classes = server.head(server.table.gather(torch.arange(1))).shape[1]
        noisy = torch.zeros_like(server.labels)
        ones = self.stage_one.numpy()
        uniform = np.full((int(ones.sum()), classes), 1.0)
        noisy[self.stage_one] = torch.as_tensor(self._rr(uniform, ones))
        server.labels = noisy
        self.second = False

    def _rr(self, prior: np.ndarray, mask: np.ndarray) -> np.ndarray:
        labels = self.true_labels.numpy()[mask]
        if math.isinf(self.config.epsilon):
            return labels
        # each stage's draws from a fresh seed of the server's secret generator (its state is kept in
        # the run's private area; nothing that predicts the draws goes into the public checkpoint)
        rng = np.random.default_rng(self.server.noise.seed())
        return randomise(prior / prior.sum(axis=1, keepdims=True), labels, self.config.epsilon, rng)

    def second_stage(self, server) -> None:
        """RRWithPrior for the records not yet privatised, the prior from the current model."""
        rest = ~self.stage_one
        ids = torch.nonzero(rest).flatten()
        with torch.no_grad():
            prior = torch.softmax(server.head(server.table.gather(ids)), dim=1).double().numpy()
        labels = server.labels.clone()
        labels[rest] = torch.as_tensor(self._rr(prior, rest.numpy()))
        server.labels = labels
        self.known = torch.ones_like(self.known)
        self.second = True

    def device_send(self, device, ids):
        h = device.model(device.x[ids])
        device.scratch["h"] = h
        return self.message(device_name(device.index), SERVER, "embedding", ids=ids, h=h.detach())

    def server_reply(self, server, up):
        if not self.second and self.round >= self.switch:
            self.second_stage(server)
        m, ids, h = device_index(up.sender), up["ids"], up["h"]
        server.table.update(m, ids, h)
        known = self.known[ids]
        grads = common.embedding_gradients(server, self.head, m, ids, h, False) * known[:, None]
        if self.train_server and bool(known.any()):
            rows = common.with_row(server.table.gather(ids), m, h.detach())
            self.head.step([r[known] for r in rows], server.labels[ids][known])
        return self.message(SERVER, up.sender, "gradient", g=grads)

    def device_receive(self, device, down):
        self.backpropagate(device, down["g"] / len(down["g"]))

    def extra_state(self) -> dict:
        # the privatised labels are the mechanism's output (public under label DP)
        return {**super().extra_state(), "labels": self.server.labels, "second": self.second}

    def load_extra_state(self, state: dict) -> None:
        super().load_extra_state(state)
        self.server.labels = state["labels"]
        self.second = bool(state["second"])
        self.known = torch.ones_like(self.known) if self.second else self.stage_one.clone()


METHOD = RRPrior
