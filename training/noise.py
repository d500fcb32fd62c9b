"""A party's private randomness: DP noise and secret sampling decisions come only from here.

Three sources (docs/training.md, "Noise sampling"):

* :class:`KeyedNoise` (default for every run): a ChaCha20 keystream (RFC 8439, the ``cryptography``
  package) under a 256-bit key derived from the run's secret seed by HMAC-SHA256
  (``seeds.key``); Gaussian noise floating-point safe (a discrete Gaussian on a 2^k lattice, sampled
  exactly: Canonne, Kamath and Steinke 2020). Reproducible given the secret seed (which stays
  server-side); each mechanism draws from its own keyed stream (:meth:`NoiseSource.stream`).
* :class:`SecureNoise` (``--secure-noise``): OpenDP's Gaussian mechanism and the operating system's
  CSPRNG (``secrets``): also floating-point safe, not reproducible from any seed.
* :class:`SeededNoise`: float32 ``sigma * torch.randn`` from a Mersenne Twister. NOT
  cryptographically secure and NOT floating-point safe (Mironov 2012, "On Significance of the
  Least Significant Bits for Differential Privacy"): for unit tests and attack simulations only,
  never a training run's source.

Every source draws on the CPU, whatever device the run computes on: ``add_gaussian`` takes the
value to the host, adds the noise there and hands the sum back on the value's device and dtype
(``bernoulli`` and ``uniform`` return CPU tensors for the caller to place).

Methods add noise with ``noise.add_gaussian(value, sigma)`` (the released value, so a source can
add the noise exactly) and draw keep decisions with ``noise.bernoulli(n, p)``, each mechanism on
its own stream: ``server.noise.stream("downlink")``, ``"head"``, ``"head-sampling"``, ``"sampling"``, ``"keep"``,
``"rr-prior"`` (a device's forward noise has its own key, ``seeds.key(secret, "device", m)``).
A party that collects every raw draw of one stream learns nothing about another's (ChaCha20 is a
PRF under independent keys).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import secrets
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

import numpy as np
import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from privzv.errors import PrivzvError
from privzv.training import seeds
from privzv.training.accelerator import CPU
from privzv.training.divergence import Diverged


class NoiseSource:
    """What a party draws its private randomness from."""

    def gaussian(self, shape, sigma: float) -> torch.Tensor:
        """N(0, sigma^2) noise of ``shape`` (float32 zeros, no draw, when sigma == 0)."""
        return self.add_gaussian(torch.zeros(shape), sigma)

    def add_gaussian(self, value: torch.Tensor, sigma: float) -> torch.Tensor:
        """``value`` + N(0, sigma^2) per coordinate, same shape and dtype (value when sigma == 0)."""
        raise NotImplementedError

    def bernoulli(self, n: int, p: float) -> torch.Tensor:
        """n independent keep decisions, each true with probability at most p (bool tensor)."""
        raise NotImplementedError

    def uniform(self, n: int) -> torch.Tensor:
        """n independent uniforms on the grid {k 2^-53 : 0 <= k < 2^53} (float64)."""
        raise NotImplementedError

    def seed(self) -> int:
        """A fresh 62-bit integer (e.g. the seed of a secret perturbation)."""
        raise NotImplementedError

    def stream(self, name: str) -> NoiseSource:
        """The source of mechanism ``name``: independent of this source's own draws and of every
        other name's."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned."""


class KeyedNoise(NoiseSource):
    """The ChaCha20 keystream of ``key`` (zero nonce: every key serves one stream only), read as
    little-endian 64-bit words; its state is the number of bytes read.

    Gaussian (:func:`discrete_gaussian`): the value is rounded to the lattice lambda Z, lambda =
    2^(floor(log2 sigma) - LATTICE_BITS), and lambda Y added, Y a discrete Gaussian of variance
    S = ceil((sigma / lambda)^2) sampled exactly; the float64 sum is exact (both on the lattice),
    and the cast to the value's dtype is post-processing. Its std sqrt(S) lambda >= sigma, and the
    discrete Gaussian is at least as private as the continuous one at the same variance, for
    lattice (integer) sensitivities, up to a term of order d e^(-pi^2 S) in d dimensions (Canonne,
    Kamath, Steinke 2020, "The Discrete Gaussian for Differential Privacy"). The rounding moves
    the L2 sensitivity by at most lambda sqrt(d) <= 2^-LATTICE_BITS sigma sqrt(d) (d coordinates),
    which the accountant does not charge (docs/training.md, "Noise sampling").
    Bernoulli(p): a word w is a keep iff w < floor(p 2^64), probability floor(p 2^64) / 2^64 <= p.
    """

    CHUNK = 1 << 14  # keystream bytes computed at once
    POOL = 1024  # discrete Gaussian draws made at once (a round's few cost one pass)

    def __init__(self, key: bytes):
        if len(key) != 32:
            raise PrivzvError(f"noise key of {len(key)} bytes: must be 32")
        self._key = key
        self._position = 0
        self._buffer, self._start = b"", 0
        self._streams: dict[str, KeyedNoise] = {}
        self._pool: dict | None = None  # draws of one variance made POOL at a time (state: where)

    def words(self, n: int) -> np.ndarray:
        """The stream's next n 64-bit words (uint64)."""
        end = self._position + 8 * n
        if self._position < self._start or end > self._start + len(self._buffer):
            start = self._position - self._position % 64
            length = max(self.CHUNK, -(-(end - start) // 64) * 64)
            if (start + length) // 64 > 2**32:
                raise PrivzvError("noise stream exhausted (2^38 bytes under one key)")
            nonce = (start // 64).to_bytes(4, "little") + bytes(12)  # block counter, then nonce
            cipher = Cipher(algorithms.ChaCha20(self._key, nonce), mode=None).encryptor()
            self._buffer, self._start = cipher.update(bytes(length)), start
        out = np.frombuffer(self._buffer, dtype="<u8", count=n, offset=self._position - self._start)
        self._position = end
        return out.astype(np.uint64)

    def add_gaussian(self, value: torch.Tensor, sigma: float) -> torch.Tensor:
        if sigma == 0:
            return value.clone()
        step, variance = lattice(sigma)
        flat = value.detach().to(CPU, torch.float64).reshape(-1)
        if not bool(torch.isfinite(flat).all()):
            raise Diverged("a value to be released is NaN or infinite (training diverged)")
        total = torch.round(flat / step).numpy().astype(np.int64) + self._discrete_gaussian(
            variance, flat.numel()
        )
        if flat.numel() and int(np.abs(total).max()) >= 2**53:
            raise PrivzvError(
                f"a released value {float(flat.abs().max()):g} is too large for noise "
                f"sigma {sigma:g} (beyond 2^{53 - LATTICE_BITS} sigma)"
            )
        noisy = torch.from_numpy(total.astype(np.float64) * step)
        return noisy.reshape(value.shape).to(value)

    def _discrete_gaussian(self, variance: int, n: int) -> np.ndarray:
        """n discrete Gaussian draws, from the pool (refilled, its rest dropped, when it is short
        or of another variance) or, for n > POOL, directly."""
        if n > self.POOL:
            return discrete_gaussian(self, variance, n)
        pool = self._pool
        if pool is None or pool["variance"] != variance or pool["used"] + n > self.POOL:
            pool = self._refill(variance)
        pool["used"] += n
        return pool["draws"][pool["used"] - n : pool["used"]]

    def _refill(self, variance: int) -> dict:
        self._pool = {
            "variance": variance,
            "start": self._position,
            "used": 0,
            "draws": discrete_gaussian(self, variance, self.POOL),
        }
        return self._pool

    def bernoulli(self, n: int, p: float) -> torch.Tensor:
        threshold = inclusion_threshold(p)
        if threshold == 2**64:
            return torch.ones(n, dtype=torch.bool)
        return torch.from_numpy(self.words(n) < np.uint64(threshold))

    def uniform(self, n: int) -> torch.Tensor:
        return torch.from_numpy((self.words(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53)

    def seed(self) -> int:
        return int(self.words(1)[0] >> np.uint64(2))

    def stream(self, name: str) -> KeyedNoise:
        if name not in self._streams:
            self._streams[name] = KeyedNoise(
                hmac.new(self._key, f"stream/{name}".encode(), hashlib.sha256).digest()
            )
        return self._streams[name]

    def state_dict(self) -> dict:
        pool = None if self._pool is None else {k: self._pool[k] for k in ("variance", "start", "used")}
        return {
            "kind": "keyed",
            "position": self._position,
            "pool": pool,
            "streams": {name: s.state_dict() for name, s in self._streams.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        _check_kind(state, "keyed")
        self._pool = None
        if state["pool"] is not None:  # redraw the pool from where it was drawn
            self._position = int(state["pool"]["start"])
            self._refill(int(state["pool"]["variance"]))["used"] = int(state["pool"]["used"])
        self._position = int(state["position"])
        for name, sub in state["streams"].items():
            self.stream(name).load_state_dict(sub)


LATTICE_BITS = 22  # KeyedNoise's lattice: sigma / lambda in [2^22, 2^23)


@functools.lru_cache(maxsize=64)
def lattice(sigma: float) -> tuple[float, int]:
    """(lambda, S) of KeyedNoise at noise std ``sigma``: lambda = 2^(floor(log2 sigma) -
    LATTICE_BITS), S = ceil((sigma / lambda)^2), so sqrt(S) lambda >= sigma (by < 2^-44 sigma)."""
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise PrivzvError(f"noise sigma {sigma!r}: must be a finite number >= 0")
    step = math.ldexp(1.0, math.frexp(sigma)[1] - 1 - LATTICE_BITS)
    return step, math.ceil(Fraction(sigma / step) ** 2)


_MARGIN = 2.0**-30  # relative slack of the float64 bounds on exp(-gamma) (their error < 2^-39)


def inclusion_threshold(p: float) -> int:
    """floor(p 2^64), exactly (p a float is the rational a / 2^e): a uniform 64-bit word below it
    has probability at most p, short of p by less than 2^-64."""
    if not (isinstance(p, (int, float)) and math.isfinite(p) and 0 <= p <= 1):
        raise PrivzvError(f"keep probability {p!r}: must be in [0, 1]")
    return math.floor(Fraction(p) * 2**64)


def discrete_gaussian(source: KeyedNoise, variance: int, n: int) -> np.ndarray:
    """n draws of the discrete Gaussian on Z with parameter sigma^2 = ``variance`` (an integer),
    P(y) proportional to exp(-y^2 / (2 sigma^2)), by Canonne, Kamath and Steinke 2020, "The
    Discrete Gaussian for Differential Privacy", Alg. 3: Y ~ discrete Laplace of scale t (any
    t > 0; here the power of two above floor(sigma)), kept with probability
    exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)). Exact: every decision is :func:`_bernoulli_exp`."""
    if variance <= 0:
        raise PrivzvError(f"discrete Gaussian variance {variance!r}: must be a positive integer")
    bits = math.isqrt(variance).bit_length()  # t = 2^bits > floor(sigma)
    t = 1 << bits
    kept: list[np.ndarray] = []
    missing = n
    while missing > 0:
        y = _discrete_laplace(source, bits, 2 * missing + 16)
        diff = np.abs(y) * t - variance  # |y| < 2^(62 - bits) (else never accepted, below)
        safe = np.abs(y) < 2 ** (61 - bits)
        diff_f = np.where(safe, diff, 0).astype(np.float64)
        gamma = np.where(safe, diff_f * diff_f / (2.0 * variance * t * t), np.inf)

        def exact(i: int) -> Fraction:
            d = abs(int(y[i])) * t - variance
            return Fraction(d * d, 2 * variance * t * t)

        take = y[_bernoulli_exp(source, gamma, exact)][:missing]
        kept.append(take)
        missing -= len(take)
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)


def _discrete_laplace(source: KeyedNoise, bits: int, n: int) -> np.ndarray:
    """n draws of the discrete Laplace of scale t = 2^bits, P(y) proportional to exp(-|y| / t)
    (Canonne, Kamath, Steinke 2020, Alg. 2; int64): U uniform below t kept with probability
    exp(-U / t), V with P(V >= k) = e^-k, a sign; -0 refused."""
    t = 1 << bits
    out: list[np.ndarray] = []
    missing = n
    while missing > 0:
        m = 2 * missing + 16  # candidates for one pass, most of the time
        u = (source.words(m) >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(m, np.int64)
        u = u[_bernoulli_exp(source, u / t, lambda i: Fraction(int(u[i]), t))]
        v = _geometric(source, len(u))
        negative = (source.words(len(u)) >> np.uint64(63)).astype(bool)
        ok = ~(negative & (u == 0) & (v == 0))
        y = np.where(negative, -(u + t * v), u + t * v)[ok]
        out.append(y[:missing])
        missing -= len(out[-1])
    return np.concatenate(out)


def _geometric(source: KeyedNoise, n: int) -> np.ndarray:
    """n draws of V with P(V >= k) = e^-k (int64): V = k where e^-(k+1) <= U < e^-k, U uniform
    (the number of successes of Bernoulli(e^-1) before the first failure, in one comparison)."""
    u = (source.words(n) >> np.uint64(1)).astype(np.int64)
    u_f = u.astype(np.float64)  # within 512 of u (below 2^63), so U lies in [low, high):
    low, high = (u_f - 2048) * 2.0**-63, (u_f + 2048) * 2.0**-63
    k = np.floor(-np.log((u_f + 0.5) * 2.0**-63)).astype(np.int64)
    below = high <= np.exp(-k.astype(np.float64)) * (1 - _MARGIN)  # U < e^-k
    above = low >= np.exp(-(k + 1.0)) * (1 + _MARGIN)  # U >= e^-(k+1)
    for i in np.flatnonzero(~(below & above)):
        draw, j = _Uniform(source, int(u[i])), max(int(k[i]), 0)
        while j > 0 and not draw.below(Fraction(j)):
            j -= 1
        while draw.below(Fraction(j + 1)):
            j += 1
        k[i] = j
    return k


def _bernoulli_exp(source: KeyedNoise, gamma: np.ndarray, exact: Callable[[int], Fraction]) -> np.ndarray:
    """Bernoulli(exp(-gamma_i)) for each i, exactly: U_i uniform on [0, 1) (its first 63 bits from
    one word) is compared with exp(-gamma_i). ``gamma`` (float64) is within a relative 2^-50 of
    the exact ``exact(i)``; where float64 bounds on exp(-gamma_i), widened by ``_MARGIN``, do not
    decide (probability < 2^-29), more bits of U_i are drawn and compared with exp(-exact(i))
    bounded by correctly rounded decimal arithmetic (:func:`_exp_bounds`)."""
    u = (source.words(len(gamma)) >> np.uint64(1)).astype(np.int64)
    p = np.exp(-np.minimum(gamma, 1e4))
    low = np.floor(np.where(gamma < 600, p * (1 - _MARGIN), 0.0) * 2.0**63)
    high = np.ceil(np.maximum(p * (1 + _MARGIN), 2.0**-70) * 2.0**63)
    cap = 2.0**63 - 1024
    accept = u < np.minimum(low, cap).astype(np.int64)
    reject = (high < 2.0**63) & (u >= np.minimum(high, cap).astype(np.int64))
    for i in np.flatnonzero(~(accept | reject)):
        accept[i] = _Uniform(source, int(u[i])).below(exact(int(i)))
    return accept


class _Uniform:
    """A uniform U on [0, 1) known to 63 bits (``prefix``), refined 64 bits at a time from
    ``source`` as comparisons need them."""

    def __init__(self, source: KeyedNoise, prefix: int):
        self.source, self.prefix, self.bits, self.digits = source, prefix, 63, 40

    def below(self, gamma: Fraction) -> bool:
        """Whether U < exp(-gamma) (decided with probability 1)."""
        while True:
            low, high = _exp_bounds(gamma, self.digits)
            if Fraction(self.prefix + 1, 1 << self.bits) <= low:
                return True
            if Fraction(self.prefix, 1 << self.bits) >= high:
                return False
            self.prefix = (self.prefix << 64) | int(self.source.words(1)[0])
            self.bits, self.digits = self.bits + 64, self.digits + 20


def _exp_bounds(gamma: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """Rationals low <= exp(-gamma) <= high: gamma rounded down and up at ``digits`` digits, and
    Decimal.exp (correctly rounded, Python's decimal module) moved one unit outwards."""
    with localcontext(prec=digits, rounding=ROUND_FLOOR):
        g_low = Decimal(gamma.numerator) / Decimal(gamma.denominator)
    with localcontext(prec=digits, rounding=ROUND_CEILING):
        g_high = Decimal(gamma.numerator) / Decimal(gamma.denominator)
    with localcontext(prec=digits) as ctx:
        return Fraction((-g_high).exp(ctx).next_minus(ctx)), Fraction((-g_low).exp(ctx).next_plus(ctx))


class SeededNoise(NoiseSource):
    """Draws from a torch.Generator seeded with ``seeds.derive(root, *names)`` (tests, attack
    simulations); ``stream(name)`` is the generator of ``(*names, name)``."""

    def __init__(self, root: int, *names: object):
        self.root, self.names = root, names
        self.gen = seeds.generator(root, *names)
        self._streams: dict[str, SeededNoise] = {}

    def add_gaussian(self, value: torch.Tensor, sigma: float) -> torch.Tensor:
        if sigma == 0:
            return value.clone()
        return value + (sigma * torch.randn(value.shape, generator=self.gen)).to(value.device)

    def bernoulli(self, n: int, p: float) -> torch.Tensor:
        """float64 uniforms on the 2^-53 grid below p rounded down to that grid: probability <= p."""
        threshold = inclusion_threshold(p) >> 11
        return (
            self.uniform(n) < threshold * 2.0**-53 if threshold < 2**53 else torch.ones(n, dtype=torch.bool)
        )

    def uniform(self, n: int) -> torch.Tensor:
        return torch.rand(n, dtype=torch.float64, generator=self.gen)

    def seed(self) -> int:
        return int(torch.randint(0, 2**62, (1,), generator=self.gen))

    def stream(self, name: str) -> SeededNoise:
        if name not in self._streams:
            self._streams[name] = SeededNoise(self.root, *self.names, name)
        return self._streams[name]

    def state_dict(self) -> dict:
        return {
            "kind": "seeded",
            "gen": self.gen.get_state(),
            "streams": {name: s.state_dict() for name, s in self._streams.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        _check_kind(state, "seeded")
        self.gen.set_state(state["gen"])
        for name, sub in state.get("streams", {}).items():
            self.stream(name).load_state_dict(sub)


class SecureNoise(NoiseSource):
    """Cryptographically secure, floating-point-safe draws (needs ``pip install 'privzv[secure]'``).

    Gaussian: OpenDP's ``make_gaussian`` on float64 vectors (Required feature ``contrib``). It
    rounds the input to the lattice 2^k, adds discrete Gaussian noise of scale sigma/2^k sampled
    exactly with OS randomness (Canonne, Kamath, Steinke 2020, "The Discrete Gaussian for
    Differential Privacy", Alg. 1), and rounds the sum to float64 once; the float32 release is a
    post-processing of it. Bernoulli(p): p is a float, hence exactly the rational a/2^e
    (``Fraction(p)``); ``secrets.randbelow(2^e) < a`` holds with probability exactly a/2^e, with
    no floating-point step. Seeds: ``secrets.randbits(62)``.
    """

    def __init__(self):
        self._dp = _opendp()
        self._mechanisms: dict[float, object] = {}

    def add_gaussian(self, value: torch.Tensor, sigma: float) -> torch.Tensor:
        if sigma == 0:
            return value.clone()
        flat = value.detach().to(torch.float64).reshape(-1)
        if not bool(torch.isfinite(flat).all()):
            raise Diverged("a value to be released is NaN or infinite (training diverged)")
        noisy = self._mechanism(float(sigma))(flat.tolist())
        return torch.tensor(noisy, dtype=torch.float64).reshape(value.shape).to(value)

    def _mechanism(self, sigma: float):
        if sigma not in self._mechanisms:
            dp = self._dp
            self._mechanisms[sigma] = dp.m.make_gaussian(
                dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float), scale=sigma
            )
        return self._mechanisms[sigma]

    def bernoulli(self, n: int, p: float) -> torch.Tensor:
        if not (math.isfinite(p) and 0 <= p <= 1):
            raise PrivzvError(f"keep probability {p!r}: must be in [0, 1]")
        exact = Fraction(p)
        keep = [secrets.randbelow(exact.denominator) < exact.numerator for _ in range(n)]
        return torch.tensor(keep, dtype=torch.bool)

    def uniform(self, n: int) -> torch.Tensor:
        return torch.tensor([secrets.randbits(53) * 2.0**-53 for _ in range(n)], dtype=torch.float64)

    def seed(self) -> int:
        return secrets.randbits(62)

    def stream(self, name: str) -> SecureNoise:
        return self  # every draw is fresh OS randomness: already independent of every other

    def state_dict(self) -> dict:
        return {"kind": "secure"}

    def load_state_dict(self, state: dict) -> None:
        _check_kind(state, "secure")


def source(config, root: int, *names: object) -> NoiseSource:
    """The NoiseSource a run's ``config`` asks for: SecureNoise under ``secure_noise``, else
    KeyedNoise under ``seeds.key(root, *names)``."""
    if getattr(config, "secure_noise", False):
        return SecureNoise()
    return KeyedNoise(seeds.key(root, *names))


def _opendp():
    try:
        import opendp.prelude as dp
    except ImportError:
        raise PrivzvError(
            "--secure-noise needs the optional package opendp: pip install 'privzv[secure]'"
        ) from None
    dp.enable_features("contrib")
    return dp


def _check_kind(state: dict, kind: str) -> None:
    if state.get("kind", kind) != kind:
        raise PrivzvError(
            f"noise state of kind {state.get('kind')!r}: this run draws {kind} noise "
            "(the noise source cannot change on resume)"
        )
