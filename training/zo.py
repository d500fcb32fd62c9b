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
On the CPU each operation on a chunk (the add, ||g||'s float64 cast, a momentum update's pieces)
takes at most ``GRAIN`` values, so that none wakes torch's thread pool: the same values, without a
wait for a core per operation on a loaded machine (docs/training.md, "Memory and speed at scale").
Opt-in, :func:`kept_draws` keeps whole draws in memory so that a step draws each g once, not 3-4
times: the same values, at d more floats per direction.

The draws are made on the parameters' device (:data:`DRAWS`, one entry per device type): on the
CPU as above (bit for bit what privzv drew before devices existed); on CUDA from a
``torch.Generator(device="cuda")`` (Philox, counter based) seeded with the same per-(device, step,
k) seed, in at most ``CUDA_CHUNKS`` chunks (so the extra memory is at most 1/CUDA_CHUNKS of the
parameters'). Whatever the chunks, g is d independent N(0, 1) values and ||g|| is taken over the
same chunks the perturbation adds, so u stays uniform on the whole sphere; the CUDA bits differ
from the CPU's and are reproducible on the same hardware and torch.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence

import torch

from privzv.errors import PrivzvError

CHUNK = 1 << 16  # values per transient CPU draw (256 KiB of float32): the step's extra memory
# values per CPU operation on a chunk: torch runs an operation on at most at::internal::GRAIN_SIZE
# (32,768) values on the calling thread; on more it wakes its thread pool, which on a loaded machine
# waits for a core each time. Elementwise, so cutting a chunk's operations changes no value.
GRAIN = 1 << 15
CUDA_CHUNKS = 64  # a CUDA draw comes in at most this many chunks (few kernel launches per pass)
CUDA_MIN_CHUNK = 1 << 16  # values, at least, per CUDA chunk (256 KiB of float32)

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
    """CPU chunk lengths covering d values: CHUNK each (a multiple of 16), a remainder under 16
    joined to the last chunk. torch's CPU ``randn`` fills blocks of 16 from the generator's stream,
    so drawing these chunks in turn from one generator gives exactly ``randn(d)``."""
    sizes = [CHUNK] * (d // CHUNK)
    rest = d - CHUNK * len(sizes)
    if rest and rest < 16 and sizes:
        sizes[-1] += rest
    elif rest:
        sizes.append(rest)
    return sizes


def _cuda_sizes(d: int) -> list[int]:
    """CUDA chunk lengths covering d values: at most CUDA_CHUNKS chunks of CUDA_MIN_CHUNK or more."""
    n = max(CUDA_MIN_CHUNK, -(-d // CUDA_CHUNKS))
    return [n] * (d // n) + ([d % n] if d % n else [])


@dataclasses.dataclass(frozen=True)
class Draws:
    """How one device type draws g: the chunk lengths covering d values, a chunk's norm as a
    float64 scalar tensor on the device (summed over the chunks on the host, one transfer), and the
    most values one operation on a chunk takes where torch has more than one thread (None: the
    whole chunk)."""

    sizes: Callable[[int], list[int]]
    norm: Callable[[torch.Tensor], torch.Tensor]
    grain: int | None = None


def _grain(kind: Draws) -> int | None:
    """The most values per operation: ``kind.grain`` where torch has a thread pool to keep asleep."""
    return kind.grain if torch.get_num_threads() > 1 else None


def _cpu_norm(g: torch.Tensor, grain: int = GRAIN) -> torch.Tensor:
    """``vector_norm(g, dtype=float64)`` (torch casts g to float64, then reduces it in one pass on
    one thread), with the cast made ``grain`` values at a time on the calling thread when torch has
    more than one: the same bits either way."""
    if len(g) <= grain or torch.get_num_threads() == 1:
        return torch.linalg.vector_norm(g, dtype=torch.float64)
    wide = torch.empty(len(g), dtype=torch.float64)
    for at in range(0, len(g), grain):
        wide[at : at + grain].copy_(g[at : at + grain])
    return torch.linalg.vector_norm(wide)


# device type -> its draws. CPU: float64 accumulation (today's bits), operations of GRAIN values on
# the calling thread. CUDA: a float32 reduction (no float64 copy of the chunk), then float64 across
# the chunks; one kernel per chunk.
DRAWS: dict[str, Draws] = {
    "cpu": Draws(_sizes, _cpu_norm, GRAIN),
    "cuda": Draws(_cuda_sizes, lambda g: torch.linalg.vector_norm(g).double()),
}


def _kind(place: torch.device) -> Draws:
    if place.type not in DRAWS:
        raise PrivzvError(f"ZO directions on device {place.type!r}: allowed are {', '.join(DRAWS)}")
    return DRAWS[place.type]


class _Kept:
    """Whole draws kept by :func:`kept_draws`: key -> g's chunks, least recently used dropped
    first, at most ``budget`` bytes in all."""

    def __init__(self, budget: int):
        self.budget, self.draws = budget, collections.OrderedDict()

    def get(self, key: tuple) -> list[torch.Tensor] | None:
        if key in self.draws:
            self.draws.move_to_end(key)
        return self.draws.get(key)

    def put(self, key: tuple, chunks: list[torch.Tensor]) -> None:
        size = sum(c.numel() * c.element_size() for c in chunks)
        while self.draws and size + self.used() > self.budget:
            self.draws.popitem(last=False)
        if size <= self.budget:
            self.draws[key] = chunks

    def used(self) -> int:
        return sum(c.numel() * c.element_size() for chunks in self.draws.values() for c in chunks)


_KEPT: _Kept | None = None  # set inside kept_draws() only


@contextlib.contextmanager
def kept_draws(max_bytes: int) -> Iterator[None]:
    """Opt-in, inside the block (process-wide): each draw g, once made, is kept (up to ``max_bytes``
    in all, least recently used dropped first) and read again instead of drawn again. The same
    values: g depends only on its seed, d, dtype, device and chunking, which key it. A DPZV step then
    draws once per direction instead of 3-4 times, at d floats of memory per direction (4 bytes
    each, fp32), held until dropped: the step is no longer within 1.05x of inference memory."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise PrivzvError(f"kept_draws max_bytes {max_bytes!r}: allowed is an integer >= 0")
    global _KEPT
    outer, _KEPT = _KEPT, _Kept(max_bytes)
    try:
        yield
    finally:
        _KEPT = outer


def _stream(sizes: list[int], seed: int, dtype: torch.dtype, place: torch.device) -> Iterator[torch.Tensor]:
    """g(seed) chunk by chunk: kept chunks when :func:`kept_draws` holds them, else drawn (and
    offered to it once the whole draw is made)."""
    kept, key = _KEPT, (seed, tuple(sizes[:1]), sum(sizes), dtype, place)
    known = None if kept is None else kept.get(key)
    if known is not None:
        yield from known
        return
    gen = torch.Generator(device=place).manual_seed(seed)
    chunks = []  # only inside kept_draws: otherwise no chunk outlives its use
    for n in sizes:
        g = torch.randn(n, generator=gen, dtype=dtype, device=place)
        if kept is not None:
            chunks.append(g)
        yield g
    if kept is not None:
        kept.put(key, chunks)


def _draws(
    d: int, seeds: Sequence[int], dtype: torch.dtype, place: torch.device | None = None
) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """(start, [g_k[start:start + n] for each seed]): g_k ~ N(0, I_d) from seed k, chunk by chunk,
    drawn on ``place`` (default: the CPU) from a generator of that device."""
    place = torch.empty(0).device if place is None else place
    sizes = _kind(place).sizes(d)
    streams = [_stream(sizes, s, dtype, place) for s in seeds]
    start = 0
    for n in sizes:
        yield start, [next(s) for s in streams]
        start += n
    for s in streams:  # run each to its end (where a whole draw is offered to kept_draws)
        next(s, None)


def _combine(norms: list[torch.Tensor]) -> float:
    """||g|| from its chunks' norms (one chunk: that norm itself, bit for bit), one transfer."""
    values = torch.stack(norms).tolist() if norms else [0.0]
    return values[0] if len(values) == 1 else math.sqrt(math.fsum(n * n for n in values))


def _size(params: list[torch.Tensor]) -> int:
    return sum(p.numel() for p in params)


def gaussian_norm(params: Params, seed: int) -> float:
    """||g|| of the Gaussian draw g behind u(seed) (accumulated in float64, chunk by chunk)."""
    params = _params(params)
    kind = _kind(params[0].device)
    return _combine(
        [kind.norm(g) for _, (g,) in _draws(_size(params), [seed], params[0].dtype, params[0].device)]
    )


def _spans(
    params: list[torch.Tensor], sizes: list[int], grain: int | None
) -> Iterator[list[tuple[torch.Tensor, slice]]]:
    """Per chunk of ``sizes``, in order: [(a flat view of parameter values, the slice of the chunk
    that lands on them)], cut where a parameter ends and every ``grain`` values (None: no cut). One
    walk over the parameters and the chunks together."""
    views = [p.data.view(-1) for p in params if p.numel()]
    i = used = 0
    for n in sizes:
        spans, at = [], 0
        while at < n:
            take = min(n - at, len(views[i]) - used, grain or n)
            spans.append((views[i][used : used + take], slice(at, at + take)))
            at, used = at + take, used + take
            if used == len(views[i]):
                i, used = i + 1, 0
        yield spans


def perturb_(params: Params, seed: int, scale: float, norm: float | None = None) -> float:
    """In place: w <- w + scale * u(seed), one draw chunk by chunk, nothing kept. ``norm`` is
    ||g|| (from :func:`gaussian_norm` or an earlier call); None computes it (from this draw when
    it is one chunk, else by a first pass over the draw). Returns ||g||."""
    params = _params(params)
    d, place = _size(params), params[0].device
    kind = _kind(place)
    sizes = kind.sizes(d)
    if norm is None and len(sizes) > 1:
        norm = gaussian_norm(params, seed)
    with torch.no_grad():
        draws = _draws(d, [seed], params[0].dtype, place)
        for spans, (_, (g,)) in zip(_spans(params, sizes, _grain(kind)), draws):
            if norm is None:
                norm = _combine([kind.norm(g)])
            factor = scale * math.sqrt(d) / norm
            for view, part in spans:
                view.add_(g[part], alpha=factor)
    return norm


def sphere_chunks(
    d: int,
    seeds: Sequence[int],
    norms: Sequence[float],
    dtype: torch.dtype = torch.float32,
    place: torch.device | None = None,
) -> Iterator[tuple[slice, list[torch.Tensor]]]:
    """(positions, [u_k at them]) piece by piece (a draw's chunk cut as :func:`_grain` says),
    u_k = u(seeds[k]) = sqrt(d) g_k / ||g_k|| with ||g_k|| = ``norms[k]``, drawn on ``place``
    (default: the CPU): for updates that combine several directions with other buffers (momentum)
    without a d-size draw."""
    if not d:  # no parameters (a frozen device may have none): nothing to draw, no norms
        return
    place = torch.empty(0).device if place is None else place
    factors, grain = [math.sqrt(d) / n for n in norms], _grain(_kind(place))
    for start, gs in _draws(d, seeds, dtype, place):
        n = len(gs[0])
        step = grain or n
        for at in range(0, n, step):
            part = slice(at, min(at + step, n))
            yield slice(start + part.start, start + part.stop), [g[part] * f for g, f in zip(gs, factors)]


def direction(params: Params, seed: int) -> torch.Tensor:
    """u(seed) flattened, for tests and analysis only (training never keeps u)."""
    params = _params(params)
    draws = _draws(_size(params), [seed], params[0].dtype, params[0].device)
    g = torch.cat([chunk for _, (chunk,) in draws])
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
