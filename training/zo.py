"""Zeroth-order building blocks: seeded in-place sphere perturbations and safe clipping.

As MeZO's ``zo_step``: the direction u is never stored. It is regenerated from its seed each
time it is needed, as one transient Gaussian draw g of all d parameters, and added in place;
only the seed and one scalar (||g||) are kept. u is uniform on the sphere of radius sqrt(d) over
*all* d parameters of a model (papers/000 Sec. IV, eq. (6)): u = sqrt(d) * g / ||g||,
g = ``torch.randn(d, generator=seed)`` laid over the parameters in ``parameters()`` order
(normalising per tensor would not be uniform on the whole sphere). u depends only on the seed
and d, not on how the parameters are stored: :func:`flatten_` puts a model's parameters into one
buffer so that a pass is one draw and one fused add.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

# a model, one flat buffer (a 1-D tensor), or a sequence of tensors
Params = torch.nn.Module | torch.Tensor | Sequence[torch.Tensor]


def flatten_(module: torch.nn.Module) -> torch.Tensor:
    """Put ``module``'s parameters into one contiguous 1-D buffer, in ``parameters()`` order, each
    parameter becoming a view of it (values, dtype and ``Parameter`` objects unchanged, so
    optimisers and ``load_state_dict`` keep working); return the buffer. All parameters must share
    one dtype and device (fp32 here)."""
    params = list(module.parameters())
    with torch.no_grad():
        flat = torch.cat([p.reshape(-1) for p in params]) if params else torch.zeros(0)
        offset = 0
        for p in params:
            p.data = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
    return flat


def _params(params: Params) -> list[torch.Tensor]:
    if isinstance(params, torch.nn.Module):
        return list(params.parameters())
    if isinstance(params, torch.Tensor):
        return [params]
    return list(params)


def _draw(params: list[torch.Tensor], seed: int) -> torch.Tensor:
    """g ~ N(0, I_d) from ``seed``, flat, d = the parameters' total size."""
    d = sum(p.numel() for p in params)
    return torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=params[0].dtype)


def _norm(g: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(g, dtype=torch.float64))


def gaussian_norm(params: Params, seed: int) -> float:
    """||g|| of the Gaussian draw g behind u(seed) (accumulated in float64)."""
    return _norm(_draw(_params(params), seed))


def perturb_(params: Params, seed: int, scale: float, norm: float | None = None) -> float:
    """In place: w <- w + scale * u(seed), one draw and one pass, nothing kept. ``norm`` is
    ||g|| (from :func:`gaussian_norm` or an earlier call); None computes it from this draw.
    Returns ||g|| (for the later passes of the same step)."""
    params = _params(params)
    g = _draw(params, seed)
    if norm is None:
        norm = _norm(g)
    factor = scale * math.sqrt(g.numel()) / norm
    with torch.no_grad():
        if len(params) == 1:
            params[0].add_(g.view_as(params[0]), alpha=factor)
        else:
            for p, part in zip(params, g.split([p.numel() for p in params])):
                p.add_(part.view_as(p), alpha=factor)
    return norm


def direction(params: Params, seed: int) -> torch.Tensor:
    """u(seed) flattened, for tests and analysis only (training never keeps u)."""
    g = _draw(_params(params), seed)
    return g * (math.sqrt(g.numel()) / _norm(g))


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
