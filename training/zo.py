"""Zeroth-order building blocks: seeded in-place sphere perturbations and safe clipping.

As MeZO's ``zo_step``: the direction u is never stored. It is regenerated from its seed each
time it is needed, parameter by parameter, and added in place; only the seed and one scalar
(the norm of the Gaussian draw) are kept. u is uniform on the sphere of radius sqrt(d) over *all*
d parameters of a model (papers/000 Sec. IV, eq. (6)): u = sqrt(d) * g / ||g||, g ~ N(0, I_d)
(normalising per tensor would not be uniform on the whole sphere).
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch


def _params(model_or_params) -> list[torch.Tensor]:
    if isinstance(model_or_params, torch.nn.Module):
        return [p for p in model_or_params.parameters()]
    return list(model_or_params)


def _draws(params: Sequence[torch.Tensor], seed: int) -> Iterable[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        yield torch.randn(p.shape, generator=gen, dtype=p.dtype)


def gaussian_norm(model_or_params, seed: int) -> float:
    """||g|| of the Gaussian draw g behind u(seed) (accumulated in float64)."""
    params = _params(model_or_params)
    return math.sqrt(sum(float(g.double().square().sum()) for g in _draws(params, seed)))


def perturb_(model_or_params, seed: int, scale: float, norm: float) -> None:
    """In place: w <- w + scale * u(seed), one pass over the parameters, nothing kept."""
    params = _params(model_or_params)
    d = sum(p.numel() for p in params)
    factor = scale * math.sqrt(d) / norm
    with torch.no_grad():
        for p, g in zip(params, _draws(params, seed)):
            p.add_(g, alpha=factor)


def direction(model_or_params, seed: int) -> torch.Tensor:
    """u(seed) flattened, for tests and analysis only (training never materialises u)."""
    params = _params(model_or_params)
    g = torch.cat([x.reshape(-1) for x in _draws(params, seed)])
    return g * (math.sqrt(g.numel()) / gaussian_norm(params, seed))


def clip_scalars(values: torch.Tensor, clip: float | None) -> torch.Tensor:
    """Per-record scalars clipped symmetrically to [-C, C] (DESIGN.md: the paper's min{., C}
    is one-sided). Non-finite values first: NaN -> 0, +inf -> +C, -inf -> -C, so every output
    lies in [-C, C] and the clipped batch mean keeps sensitivity 2C/B (replace-one) whatever the
    losses. ``clip=None`` (the no-clipping ablation, never with noise): NaN/inf -> 0."""
    if clip is None:
        return torch.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)
    return torch.nan_to_num(values, nan=0.0, posinf=clip, neginf=-clip).clamp(-clip, clip)


def clip_rows(rows: torch.Tensor, clip: float) -> torch.Tensor:
    """Each row (one record's vector) scaled to L2 norm <= C: x * min(1, C / ||x||) (DP-SGD).
    Non-finite entries are zeroed first so the bound holds; differentiable."""
    rows = torch.nan_to_num(rows, nan=0.0, posinf=0.0, neginf=0.0)
    flat = rows.reshape(len(rows), -1)
    scale = (clip / flat.norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
    return (flat * scale[:, None]).reshape(rows.shape)


def gaussian(shape, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """N(0, sigma^2) noise of ``shape`` from ``gen`` (zeros, no draw, when sigma == 0)."""
    if sigma == 0:
        return torch.zeros(shape)
    return sigma * torch.randn(shape, generator=gen)
