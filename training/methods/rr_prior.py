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
e^eps / (e^eps + k - 1) * sum_{y in Y_k} p_y: a label y in Y_k is output with weight 1 and each
other member of Y_k with weight p >= e^-eps (:func:`other_weight`; p = e^-eps is the paper's
e^eps / (e^eps + k - 1) and 1 / (e^eps + k - 1)); a label outside Y_k becomes a uniform member of
Y_k. Every output's probability ratio between two labels is at most 1 / p <= e^eps (their Lemma 2;
``tests/training/test_rr_prior.py`` checks it exactly). The draws are exact, from the server's
secret "rr-prior" stream (:func:`randomise`: uniform integers and Bernoulli(p), no inverse CDF).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from privzv.training import accelerator, seeds
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
    """The keep probability 1 / (1 + (k - 1) p) at p = :func:`other_weight`: at most
    e^eps / (e^eps + k - 1), so every ratio of Lemma 2 stays <= e^eps."""
    return 1.0 / (1.0 + (np.asarray(k) - 1) * other_weight(epsilon))


def other_weight(epsilon: float) -> float:
    """p >= e^-eps (with room for the sources' rounding of Bernoulli(p) down: by < 2^-53) and
    within a relative 2^-40 of it: an output other than the true label is weighted p, the true
    label 1."""
    return min(1.0, math.exp(-epsilon) * (1 + 2.0**-40) + 2.0**-50)


def output_distribution(prior: np.ndarray, labels: np.ndarray, epsilon: float) -> np.ndarray:
    """[n, K]: the probability of each output label for record i with true label ``labels[i]``
    and prior ``prior[i]`` under RRWithPrior at ``epsilon``."""
    n, classes = prior.shape
    order, k = top_k_sets(prior, epsilon)
    in_top = np.zeros((n, classes), dtype=bool)
    in_top[np.arange(n)[:, None], order] = np.arange(classes)[None, :] < k[:, None]
    keep = _keep(epsilon, k)
    other = (1.0 - keep) / np.maximum(k - 1, 1)  # = 1 / (e^eps + k - 1)
    truth_in = in_top[np.arange(n), labels]
    probs = np.where(in_top, np.where(truth_in, other, 1.0 / k)[:, None], 0.0)
    rows = np.flatnonzero(truth_in)
    probs[rows, labels[rows]] = keep[rows]
    return probs


def randomise(prior: np.ndarray, labels: np.ndarray, epsilon: float, source) -> np.ndarray:
    """One RRWithPrior draw per record from the NoiseSource ``source``, by rejection sampling: a
    label outside Y_k becomes a uniform member of Y_k; otherwise a uniform member of Y_k is
    proposed and taken if it is the true label, else with probability p = :func:`other_weight`
    (outputs weighted 1 and p). That is :func:`output_distribution` at the source's Bernoulli(p)
    probability (p rounded down by less than 2^-53, still >= e^-eps)."""
    order, k = top_k_sets(prior, epsilon)
    n = len(labels)
    rows = np.arange(n)
    truth_in = (order == labels[:, None]).cumsum(axis=1)[rows, k - 1] > 0
    out = order[rows, _uniform_below(source, k)]
    pending = np.flatnonzero(truth_in)
    p = other_weight(epsilon)
    while len(pending):
        proposal = order[pending, _uniform_below(source, k[pending])]
        take = (proposal == labels[pending]) | source.bernoulli(len(pending), p).numpy()
        out[pending[take]] = proposal[take]
        pending = pending[~take]
    return out


def _uniform_below(source, bound: np.ndarray) -> np.ndarray:
    """One uniform integer in [0, bound_i) per entry, exactly: 53-bit uniforms from ``source``,
    redrawn at or above the largest multiple of bound_i below 2^53."""
    out = np.zeros(len(bound), dtype=np.int64)
    pending = np.arange(len(bound))
    while len(pending):
        m = (source.uniform(len(pending)).numpy() * 2.0**53).astype(np.int64)
        ok = m < (2**53 // bound[pending]) * bound[pending]
        out[pending[ok]] = m[ok] % bound[pending[ok]]
        pending = pending[~ok]
    return out


class RRPrior(common.FirstOrderMethod):
    name = "rr-prior"
    LABEL_DP = True  # privacy by privatised labels, not by a release (privzv.training.run)
    # the server's labels: raw for the half not yet privatised (stage 1)
    SECRET_STATE = common.FirstOrderMethod.SECRET_STATE + ((("labels",), SERVER),)

    @classmethod
    def release(cls, config):
        return None

    def setup(self, devices, server) -> None:
        from privzv.training import run

        super().setup(devices, server)
        self.server = server
        n, place = len(server.labels), server.labels.device
        perm = np.random.default_rng(seeds.derive(self.config.seed, "rr-stage")).permutation(n)
        self.stage_one = torch.zeros(n, dtype=torch.bool, device=place)
        self.stage_one[torch.as_tensor(perm[: n // 2])] = True
        self.switch = run.rounds_for(self.config, n) // 2
        self.true_labels = server.labels.clone()
        self.known = self.stage_one.clone()
        with torch.no_grad():  # K: the head's output size (not read from the labels)
            classes = server.head(server.table.gather(torch.arange(1))).shape[1]
        noisy = torch.zeros_like(server.labels)
        ones = accelerator.numpy(self.stage_one)
        uniform = np.full((int(ones.sum()), classes), 1.0)
        noisy[self.stage_one] = torch.as_tensor(self._rr(uniform, ones), device=place)
        server.labels = noisy
        self.second = False

    def _rr(self, prior: np.ndarray, mask: np.ndarray) -> np.ndarray:
        labels = accelerator.numpy(self.true_labels)[mask]
        if math.isinf(self.config.epsilon):
            return labels
        # the server's secret "rr-prior" stream (its state is kept in the run's private area)
        return randomise(
            prior / prior.sum(axis=1, keepdims=True),
            labels,
            self.config.epsilon,
            self.server.noise.stream("rr-prior"),
        )

    def second_stage(self, server) -> None:
        """RRWithPrior for the records not yet privatised, the prior from the current model."""
        rest = ~self.stage_one
        ids = torch.nonzero(rest).flatten()
        with torch.no_grad():
            prior = accelerator.numpy(torch.softmax(server.head(server.table.gather(ids)), dim=1).double())
        labels = server.labels.clone()
        labels[rest] = torch.as_tensor(self._rr(prior, accelerator.numpy(rest)), device=labels.device)
        server.labels = labels
        self.known = torch.ones_like(self.known)
        self.second = True

    def device_send(self, device, ids):
        h = device.embed(ids)
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
        self.server.labels = state["labels"].to(self.server.labels.device)
        self.second = bool(state["second"])
        self.known = torch.ones_like(self.known) if self.second else self.stage_one.clone()


METHOD = RRPrior
