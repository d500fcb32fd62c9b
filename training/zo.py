"""Zeroth-order building blocks: seeded in-place sphere perturbations and safe clipping.

As MeZO's ``zo_step``: the direction u is never stored. It is regenerated from its seed each
time it is needed, as a Gaussian draw g of all d parameters made and added in place ``CHUNK``
values at a time (so a pass needs 256 KiB of float32, and 512 KiB of float64 for ||g||, whatever
d); only the seed and one scalar (||g||) are kept. u is uniform on the sphere of radius sqrt(d)
over *all* d parameters of a model (arXiv:2502.20565v3, Sec. IV, eq. (6)): u = sqrt(d) * g / ||g||,
g = ``torch.randn(d, generator=seed)`` laid over the parameters in ``parameters()`` order
(normalising per tensor would not be uniform on the whole sphere; the chunks are exactly that
draw, see :func:`_sizes`). u depends only on the seed and d, not on how the parameters are
stored: :func:`flatten_` puts a model's parameters into one buffer so that a pass is one add per
chunk. A model of more than one chunk pays one extra pass of draws for ||g|| at a step's start.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch

CHUNK = 1 << 16  # values per transient draw (256 KiB of float32): the step's extra memory

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
            p.data = flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
    return flat


def _params(params: Params) -> list[torch.Tensor]:
    if isinstance(params, torch.nn.Module):
        return list(params.parameters())
    if isinstance(params, torch.Tensor):
        return [params]
    return list(params)


def _sizes(d: int) -> list[int]:
    """Chunk lengths covering d values: CHUNK each (a multiple of 16), a remainder under 16 joined
    to the last chunk. torch's CPU ``randn`` fills blocks of 16 from the generator's stream, so
    drawing these chunks in turn from one generator gives exactly ``randn(d)``."""
    sizes = [CHUNK] * (d // CHUNK)
    rest = d - CHUNK * len(sizes)
    if rest and rest < 16 and sizes:
        sizes[-1] += rest
    elif rest:
        sizes.append(rest)
    return sizes


def _draws(d: int, seeds: Sequence[int], dtype: torch.dtype) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """(start, [g_k[start:start + n] for each seed]): g_k ~ N(0, I_d) from seed k, chunk by chunk."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    start = 0
    for n in _sizes(d):
        yield start, [torch.randn(n, generator=g, dtype=dtype) for g in gens]
        start += n


def _chunk_norm(g: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(g, dtype=torch.float64))


def _combine(norms: list[float]) -> float:
    """||g|| from its chunks' norms (one chunk: that norm itself, bit for bit)."""
    return norms[0] if len(norms) == 1 else math.sqrt(math.fsum(n * n for n in norms))


def _size(params: list[torch.Tensor]) -> int:
    return sum(p.numel() for p in params)


def gaussian_norm(params: Params, seed: int) -> float:
    """||g|| of the Gaussian draw g behind u(seed) (accumulated in float64, chunk by chunk)."""
    params = _params(params)
    return _combine([_chunk_norm(g) for _, (g,) in _draws(_size(params), [seed], params[0].dtype)])


def _pieces(params: list[torch.Tensor], start: int, n: int) -> Iterator[tuple[torch.Tensor, slice]]:
    """(flat view of the parameters' values at positions [start, start + n), the matching slice
    of a chunk) for every parameter that overlaps them."""
    offset = 0
    for p in params:
        lo, hi = max(start, offset), min(start + n, offset + p.numel())
        if lo < hi:
            yield p.data.view(-1)[lo - offset : hi - offset], slice(lo - start, hi - start)
        offset += p.numel()


def perturb_(params: Params, seed: int, scale: float, norm: float | None = None) -> float:
    """In place: w <- w + scale * u(seed), one draw chunk by chunk, nothing kept. ``norm`` is
    ||g|| (from :func:`gaussian_norm` or an earlier call); None computes it (from this draw when
    it is one chunk, else by a first pass over the draw). Returns ||g||."""
    params = _params(params)
    d = _size(params)
    single = len(_sizes(d)) == 1
    if norm is None and not single:
        norm = gaussian_norm(params, seed)
    with torch.no_grad():
        for start, (g,) in _draws(d, [seed], params[0].dtype):
            if norm is None:
                norm = _chunk_norm(g)
            factor = scale * math.sqrt(d) / norm
            for view, part in _pieces(params, start, len(g)):
                view.add_(g[part], alpha=factor)
    return norm


def sphere_chunks(
    d: int, seeds: Sequence[int], norms: Sequence[float], dtype: torch.dtype = torch.float32
) -> Iterator[tuple[slice, list[torch.Tensor]]]:
    """(positions, [u_k at them]) chunk by chunk, u_k = u(seeds[k]) = sqrt(d) g_k / ||g_k|| with
    ||g_k|| = ``norms[k]``: for updates that combine several directions with other buffers
    (momentum) without a d-size draw."""
    for start, gs in _draws(d, seeds, dtype):
        yield slice(start, start + len(gs[0])), [g * (math.sqrt(d) / n) for g, n in zip(gs, norms)]


def direction(params: Params, seed: int) -> torch.Tensor:
    """u(seed) flattened, for tests and analysis only (training never keeps u)."""
    params = _params(params)
    g = torch.randn(_size(params), generator=torch.Generator().manual_seed(seed), dtype=params[0].dtype)
    return g * (math.sqrt(g.numel()) / gaussian_norm(params, seed))


def clip_scalars(values: torch.Tensor, clip: float | None) -> torch.Tensor:
    """Per-record scalars clipped symmetrically to [-C, C] (docs/training.md, "Methods": the paper's min{., C}
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
