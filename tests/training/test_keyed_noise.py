"""The default noise source (issue 19, item 8): per-mechanism ChaCha20 streams under HMAC keys of
the secret seed, an exact discrete Gaussian, inclusion tests that never exceed their rate, and no
party holding another's key. Every random check uses fixed keys, so none can fail by chance."""

from __future__ import annotations

import copy
import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy import stats

from privzv.training import noise, privacy, run, seeds
from privzv.training.noise import KeyedNoise, SeededNoise

STREAMS = ("downlink", "head", "head-sampling", "sampling", "keep", "rr-prior")


def _private(tiny_scheduler, tiny_config, **changes):
    config = tiny_config(epsilon=20.0, **changes)
    p = privacy.plan(config, run.methods.get(config.method), records=96, rounds=24)
    return tiny_scheduler(epsilon=20.0, ledger=privacy.ledger(config, p), release=p.release, **changes)


def test_chacha20_keystream_is_rfc_8439s():
    """The words are ChaCha20's keystream: RFC 8439 Sec. 2.4.2's key, nonce 0, block counter 1
    (our blocks count from 0, so the second 64 bytes) gives its test vector's first bytes."""
    source = KeyedNoise(bytes(range(32)))
    source.words(8)  # block 0
    block1 = source.words(8).tobytes()
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    ref = (
        Cipher(algorithms.ChaCha20(bytes(range(32)), (1).to_bytes(4, "little") + bytes(12)), mode=None)
        .encryptor()
        .update(bytes(64))
    )
    assert block1 == ref


def test_a_private_run_draws_every_party_from_keyed_streams(tiny_scheduler, tiny_config):
    """Default for private runs: the keyed CSPRNG source, for the server and every device (the old
    default was one Mersenne Twister per party)."""
    sched = _private(tiny_scheduler, tiny_config)
    assert all(isinstance(p.noise, KeyedNoise) for p in (sched.server, *sched.devices))
    for _ in range(10):  # past the first pooled head window (q M = 8 rounds)
        assert sched.step()
    state = sched.server.noise.state_dict()
    # each mechanism drew from its own stream; nothing from the server's root stream
    assert state["position"] == 0 and {"downlink", "head"} <= set(state["streams"])
    assert all(s["position"] > 0 for s in state["streams"].values())


def test_mechanisms_streams_are_different_streams_not_offsets_of_one(tiny_scheduler, tiny_config):
    """Collecting all raw downlink noise says nothing about the head's or the sampling: their
    keys differ (HMAC-SHA256 of distinct names) and no 64-bit word of one stream's first 32 KiB
    occurs anywhere in another's (a shared stream at any offset would repeat 4096 of them)."""
    root = KeyedNoise(seeds.key(11, "server"))
    words = {name: set(copy.deepcopy(root.stream(name)).words(4096).tolist()) for name in STREAMS}
    words["root"] = set(copy.deepcopy(root).words(4096).tolist())
    keys = {name: root.stream(name)._key for name in STREAMS} | {"root": root._key}
    assert len(set(keys.values())) == len(keys)
    names = list(words)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not words[a] & words[b], (a, b)


def test_no_device_side_object_holds_a_server_key(tiny_scheduler, tiny_config):
    """A device's objects (its party, model, noise source: every bytes object reachable) contain
    none of the server's keys, and the server's contain no device's."""
    sched = tiny_scheduler(method="vafl", sigma=0.5)  # vafl: the devices draw noise
    for _ in range(4):
        assert sched.step()
    sched.server.noise.stream("downlink").gaussian((3,), 1.0)
    server = sched.server.noise
    server_keys = [server._key, *(s._key for s in server._streams.values())]
    for device in sched.devices:
        held = _bytes_reachable(device)
        assert device.noise._key in held and device.noise._position > 0  # the walk sees keys
        assert not any(k in b for k in server_keys for b in held)
    held = _bytes_reachable(sched.server)
    assert server._key in held and not any(d.noise._key in b for d in sched.devices for b in held)


def _bytes_reachable(obj) -> list[bytes]:
    """Every bytes object reachable from ``obj`` through attributes, dicts, lists and tuples."""
    found, seen, todo = [], set(), [obj]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, (bytes, bytearray)):
            found.append(bytes(x))
        elif isinstance(x, dict):
            todo.extend(x.values())
        elif isinstance(x, (list, tuple, set)):
            todo.extend(x)
        elif hasattr(x, "__dict__"):
            todo.extend(vars(x).values())
    return found


def test_same_secret_seed_same_draws_and_a_resume_mid_pool_continues_them():
    a, b = KeyedNoise(seeds.key(5, "server")), KeyedNoise(seeds.key(5, "server"))
    c = KeyedNoise(seeds.key(6, "server"))
    draws = [s.stream("downlink").gaussian((7,), 0.3) for s in (a, b, c)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    a.stream("head").gaussian((3000,), 1.0)  # a draw beyond the pool, then pooled ones
    a.stream("sampling").bernoulli(50, 0.1)
    a.stream("downlink").gaussian((3,), 0.3)
    state = a.state_dict()
    resumed = KeyedNoise(seeds.key(5, "server"))
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    for s in (a, resumed):  # the rest of the pool, a pool of another sigma, a Bernoulli draw
        s.draws = [
            s.stream("downlink").gaussian((5,), 0.3),
            s.stream("downlink").gaussian((2000,), 0.3),
            s.stream("head").gaussian((4,), 2.0),
            s.stream("sampling").bernoulli(40, 0.3),
        ]
    assert all(torch.equal(x, y) for x, y in zip(a.draws, resumed.draws))
    assert resumed.state_dict() == a.state_dict()


def test_the_gaussian_has_the_right_distribution():
    """KS at a fixed key: N(0, sigma^2) accepted (p > 1e-3), a 5% wrong sigma rejected
    (p < 1e-6); the mean of 40000 draws within 4 standard errors."""
    sigma = 0.37
    x = KeyedNoise(seeds.key(1, "ks")).gaussian((40000,), sigma).double().numpy()
    assert stats.kstest(x, "norm", args=(0, sigma)).pvalue > 1e-3
    assert stats.kstest(x, "norm", args=(0, 1.05 * sigma)).pvalue < 1e-6
    assert abs(x.mean()) < 4 * sigma / math.sqrt(len(x))


def test_the_discrete_gaussian_has_its_exact_probabilities():
    """At variance 2 (so every branch of the sampler, and t = 2, is exercised) the frequencies
    of 200000 draws match P(y) proportional to exp(-y^2 / 4): chi-square p > 1e-3 (fixed key)."""
    y = noise.discrete_gaussian(KeyedNoise(seeds.key(2, "dg")), 2, 200000)
    support = np.arange(-7, 8)
    p = np.exp(-(support**2) / 4.0)
    p /= p.sum()
    counts = np.array([(y == k).sum() for k in support])
    assert counts.sum() == len(y)  # nothing beyond +-7 (mass < 1e-5)
    assert stats.chisquare(counts, p * len(y)).pvalue > 1e-3
    assert stats.chisquare(counts, p * len(y) * 0 + len(y) / len(support)).pvalue < 1e-6


def test_released_values_lie_on_one_lattice_whatever_the_value():
    """Floating-point safety: value + noise is exactly k * lambda for an integer k, for any value
    (the set of possible outputs does not depend on the value, Mironov 2012's attack needs that
    it does); the std of the lattice noise is at least sigma, by less than 2^-40 relatively."""
    sigma = 0.3
    step, variance = noise.lattice(sigma)
    assert math.sqrt(variance) * step >= sigma and math.sqrt(variance) * step < sigma * (1 + 2**-40)
    assert sigma / step >= 2**noise.LATTICE_BITS
    for value in (0.0, 1e-9, 0.123456789, -3.5):
        out = KeyedNoise(seeds.key(3, "l")).add_gaussian(
            torch.full((100,), value, dtype=torch.float64), sigma
        )
        k = out.numpy() / step
        assert np.array_equal(k, np.round(k))


@pytest.mark.parametrize("q", [32 / 1437, 1 / 3, 0.1, 1e-9, 0.5, 1.0, 0.0])
def test_inclusion_never_exceeds_the_rate_and_uses_the_exact_threshold(q):
    """Poisson inclusion: a word w is in iff w < floor(q 2^64), so the realised rate is
    floor(q 2^64) / 2^64 <= q exactly; the old float32 test torch.rand(n) < q had rate
    ceil(q 2^24) / 2^24 (32/1437: q(1 + 1.7e-6))."""
    threshold = noise.inclusion_threshold(q)
    assert threshold == math.floor(Fraction(q) * 2**64) and Fraction(threshold, 2**64) <= Fraction(q)
    source = KeyedNoise(seeds.key(4, "sampling"))
    words = copy.deepcopy(source).words(1000)
    want = np.ones(1000, bool) if threshold == 2**64 else words < np.uint64(threshold)
    assert np.array_equal(source.bernoulli(1000, q).numpy(), want)
    # the test-only seeded source: float64 uniforms below q rounded down to their 2^-53 grid
    seeded = SeededNoise(4, "s")
    u = torch.rand(1000, dtype=torch.float64, generator=seeds.generator(4, "s"))
    limit = math.floor(Fraction(q) * 2**53)
    assert Fraction(limit, 2**53) <= Fraction(q)
    want = torch.ones(1000, dtype=torch.bool) if limit == 2**53 else u < limit * 2.0**-53
    assert torch.equal(seeded.bernoulli(1000, q), want)


def test_poisson_batches_come_from_the_sampling_stream(tiny_scheduler, tiny_config):
    sched = _private(tiny_scheduler, tiny_config, threat="eavesdropper")
    replay = KeyedNoise(seeds.key(11, "server")).stream("sampling")
    for _ in range(3):
        ids = sched.sampler.draw(sched.devices[0], sched.server)
        assert torch.equal(ids, torch.nonzero(replay.bernoulli(96, 8 / 96)).reshape(-1))
