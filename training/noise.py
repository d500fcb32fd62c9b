"""A party's private randomness: DP noise and secret sampling decisions come only from here.

Two sources (docs/training.md, "Noise sampling"):

* :class:`SeededNoise` (default): float32 ``sigma * torch.randn`` from a Mersenne-Twister
  torch.Generator seeded from the run's secret seed. Reproducible given that seed (which stays
  server-side); NOT cryptographically secure and NOT floating-point safe (Mironov 2012).
* :class:`SecureNoise` (``--secure-noise``): OpenDP's Gaussian mechanism adds the noise to the
  value itself, exactly on a 2^k lattice, and rounds once (floating-point safe, Canonne, Kamath
  and Steinke 2020's discrete Gaussian under OpenDP's proof); keep decisions and seeds come from
  the operating system's CSPRNG (``secrets``). Not reproducible from any seed.

Methods add noise with ``noise.add_gaussian(value, sigma)`` (the released value, so a secure
source can add the noise exactly) and draw keep decisions with ``noise.bernoulli(n, p)``.
"""
from __future__ import annotations

import math
import secrets
from fractions import Fraction

import torch

from privzv.errors import PrivzvError
from privzv.training import seeds
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
        """n independent keep decisions with probability p (bool tensor)."""
        raise NotImplementedError

    def seed(self) -> int:
        """A fresh 62-bit integer (e.g. the seed of a secret perturbation)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned."""


class SeededNoise(NoiseSource):
    """Draws from a torch.Generator seeded with ``seeds.derive(root, *names)``."""

    def __init__(self, root: int, *names: object):
        self.gen = seeds.generator(root, *names)

    def add_gaussian(self, value: torch.Tensor, sigma: float) -> torch.Tensor:
        if sigma == 0:
            return value.clone()
        return value + sigma * torch.randn(value.shape, generator=self.gen)

    def bernoulli(self, n: int, p: float) -> torch.Tensor:
        return torch.rand(n, generator=self.gen) < p

    def seed(self) -> int:
        return int(torch.randint(0, 2**62, (1,), generator=self.gen))

    def state_dict(self) -> dict:
        return {"kind": "seeded", "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        _check_kind(state, "seeded")
        self.gen.set_state(state["gen"])


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
        return torch.tensor(noisy, dtype=torch.float64).reshape(value.shape).to(value.dtype)

    def _mechanism(self, sigma: float):
        if sigma not in self._mechanisms:
            dp = self._dp
            self._mechanisms[sigma] = dp.m.make_gaussian(
                dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float), scale=sigma)
        return self._mechanisms[sigma]

    def bernoulli(self, n: int, p: float) -> torch.Tensor:
        if not (math.isfinite(p) and 0 <= p <= 1):
            raise PrivzvError(f"keep probability {p!r}: must be in [0, 1]")
        exact = Fraction(p)
        keep = [secrets.randbelow(exact.denominator) < exact.numerator for _ in range(n)]
        return torch.tensor(keep, dtype=torch.bool)

    def seed(self) -> int:
        return secrets.randbits(62)

    def state_dict(self) -> dict:
        return {"kind": "secure"}

    def load_state_dict(self, state: dict) -> None:
        _check_kind(state, "secure")


def source(config, root: int, *names: object) -> NoiseSource:
    """The NoiseSource a run's ``config`` asks for: SecureNoise under ``secure_noise``, else
    SeededNoise(root, *names)."""
    if getattr(config, "secure_noise", False):
        return SecureNoise()
    return SeededNoise(root, *names)


def _opendp():
    try:
        import opendp.prelude as dp
    except ImportError:
        raise PrivzvError("--secure-noise needs the optional package opendp: "
                          "pip install 'privzv[secure]'") from None
    dp.enable_features("contrib")
    return dp


def _check_kind(state: dict, kind: str) -> None:
    if state.get("kind", kind) != kind:
        raise PrivzvError(f"noise state of kind {state.get('kind')!r}: this run draws {kind} noise "
                          "(secure_noise cannot change on resume)")
