"""A party's private randomness: DP noise and secret sampling decisions come only from here.

``SeededNoise`` draws from a torch.Generator seeded from the run's secret seed (reproducible
given that seed, which stays server-side). Every DP noise value and every secret keep or Poisson
decision of a run goes through a :class:`NoiseSource`, so another source (a cryptographically
secure, floating-point-safe one) replaces it in one place.
"""
from __future__ import annotations

import torch

from privzv.training import seeds


class NoiseSource:
    """What a party draws its private randomness from."""

    def gaussian(self, shape, sigma: float) -> torch.Tensor:
        """N(0, sigma^2) noise of ``shape`` (float32 zeros, no draw, when sigma == 0)."""
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

    def gaussian(self, shape, sigma: float) -> torch.Tensor:
        if sigma == 0:
            return torch.zeros(shape)
        return sigma * torch.randn(shape, generator=self.gen)

    def bernoulli(self, n: int, p: float) -> torch.Tensor:
        return torch.rand(n, generator=self.gen) < p

    def seed(self) -> int:
        return int(torch.randint(0, 2**62, (1,), generator=self.gen))

    def state_dict(self) -> dict:
        return {"kind": "seeded", "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
