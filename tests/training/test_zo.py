"""The ZO estimator, the sphere direction, restore-and-update, and the clipping bound."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from privzv.errors import PrivzvError
from privzv.training import zo
from privzv.training.messages import SERVER, Message
from privzv.training.methods import dpzv


def test_direction_is_on_the_sqrt_d_sphere_over_all_parameters():
    params = [torch.zeros(3), torch.zeros(40)]  # very different sizes
    shares = []
    for seed in range(400):
        u = zo.direction(params, seed)
        assert u.numel() == 43
        assert float(u.norm()) == pytest.approx(math.sqrt(43), rel=1e-5)
        shares.append(float(u[:3].square().sum()) / 43)
    # uniform on the whole sphere: the first tensor's share of ||u||^2 is Beta(3/2, 40/2), mean 3/43,
    # and varies; per-tensor normalisation would make it 0.5 every time.
    shares = np.array(shares)
    assert shares.mean() == pytest.approx(3 / 43, abs=4 * shares.std() / math.sqrt(len(shares)))
    assert shares.std() > 0.01


@pytest.mark.parametrize("d", [5, 33, 64, 100, 161])
def test_chunked_draws_are_the_whole_draw_and_keep_the_sphere(monkeypatch, d):
    """With chunks of 32 values (so several per model, a remainder < 16 joined to the last), the
    chunks are exactly randn(d) from the seed, and w + s u(seed) matches the one-draw formula."""
    monkeypatch.setattr(zo, "CHUNK", 32)
    params = [torch.zeros(3), torch.zeros(d - 3)]
    g = torch.randn(d, generator=torch.Generator().manual_seed(9))
    assert torch.equal(torch.cat([c for _, (c,) in zo._draws(d, [9], torch.float32)]), g)
    norm = float(torch.linalg.vector_norm(g, dtype=torch.float64))
    assert zo.gaussian_norm(params, 9) == pytest.approx(norm, rel=1e-13)
    assert zo.perturb_(params, 9, 0.5) == pytest.approx(norm, rel=1e-13)
    assert torch.allclose(torch.cat(params), 0.5 * math.sqrt(d) * g / norm, rtol=1e-6, atol=0)
    w = torch.zeros(d)
    for at, (u,) in zo.sphere_chunks(d, [9], [norm]):
        w[at] = u
    assert torch.allclose(w, torch.cat(params) / 0.5, rtol=1e-6, atol=0)
    assert float(w.norm()) == pytest.approx(math.sqrt(d), rel=1e-5)


@pytest.mark.parametrize("kept", [None, 1 << 20])
def test_chunked_direction_is_uniform_on_the_whole_sphere(monkeypatch, kept):
    """Several chunks over two tensors of different sizes: u is still on the sqrt(d) sphere, and the
    first tensor's share of ||u||^2 is Beta(3/2, (d-3)/2) (per-chunk normalisation would not be);
    the same inside zo.kept_draws (each g drawn once, then read back for the pass)."""
    monkeypatch.setattr(zo, "CHUNK", 16)
    d, shares = 67, []
    for seed in range(400):
        params = [torch.zeros(3), torch.zeros(d - 3)]
        with zo.kept_draws(kept) if kept else contextlib.nullcontext():
            zo.perturb_(params, seed, 1.0)
        u = torch.cat(params)
        assert float(u.norm()) == pytest.approx(math.sqrt(d), rel=1e-5)
        shares.append(float(u[:3].square().sum()) / d)
    shares = np.array(shares)
    assert shares.mean() == pytest.approx(3 / d, abs=4 * shares.std() / math.sqrt(len(shares)))


def _whole_draw_replay(sizes: list[int], seed: int, scales: list[float]) -> list[torch.Tensor]:
    """The documented formula with whole-tensor operations: g = randn(d), ||g|| from its CPU
    chunks' float64 norms (math.fsum of their squares), then w_i += s sqrt(d) g_i / ||g|| per tensor."""
    gen = torch.Generator().manual_seed(100 + seed)
    w = [torch.randn(n, generator=gen) for n in sizes]
    d = sum(sizes)
    g = torch.randn(d, generator=torch.Generator().manual_seed(seed))
    norms = [float(torch.linalg.vector_norm(c, dtype=torch.float64)) for c in g.split(zo._sizes(d))]
    norm = norms[0] if len(norms) == 1 else math.sqrt(math.fsum(n * n for n in norms))
    for scale in scales:
        for p, part in zip(w, g.split(sizes)):
            p.add_(part, alpha=scale * math.sqrt(d) / norm)
    return w


@contextlib.contextmanager
def _torch_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    """torch on one thread, or with a thread pool (where CPU passes cut their operations)."""
    with _torch_threads(request.param):
        yield request.param


@pytest.mark.parametrize("sizes", [[1000], [256 * 3 + 7], [5, 0, 300, 1, 700], [40, 40]])
def test_cpu_passes_in_grains_are_the_whole_draw_formula_bit_for_bit(monkeypatch, threads, sizes):
    """Today's bits: with chunks of 256 values and (2 threads) operations cut every 64, so a pass
    has many chunks, each cut in several operations, across tensor boundaries and an empty tensor,
    a step's three passes leave exactly what whole-tensor operations on randn(d) leave; the momentum
    path's pieces (sphere_chunks) put together are exactly sqrt(d) g / ||g||."""
    monkeypatch.setattr(zo, "CHUNK", 256)
    monkeypatch.setitem(zo.DRAWS, "cpu", dataclasses.replace(zo.DRAWS["cpu"], grain=64))
    scales = [1e-3, -2e-3, 1e-3 - 0.05 * 0.37]
    want = _whole_draw_replay(sizes, 5, scales)
    got = _whole_draw_replay(sizes, 5, [])
    norm = None
    for scale in scales:
        norm = zo.perturb_(got, 5, scale, norm)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    d = sum(sizes)
    u = torch.empty(d)
    pieces = list(zo.sphere_chunks(d, [5], [norm]))
    for at, (part,) in pieces:
        assert at.stop - at.start <= (64 if threads > 1 else 256 + 15)
        u[at] = part
    g = torch.randn(d, generator=torch.Generator().manual_seed(5))
    assert torch.equal(u, g * (math.sqrt(d) / norm))
    assert sum(at.stop - at.start for at, _ in pieces) == d


@pytest.mark.parametrize("n", [16, 100, 1 << 15, (1 << 16) + 9, 200_003])
def test_the_cpu_chunk_norm_is_torchs_float64_norm_bit_for_bit(threads, n):
    g = torch.randn(n, generator=torch.Generator().manual_seed(n))
    want = torch.linalg.vector_norm(g, dtype=torch.float64)
    for grain in (zo.GRAIN, 48, 1000):
        assert torch.equal(zo._cpu_norm(g, grain), want)


class _Touches(TorchDispatchMode):
    """Records, per ATen operation, the most values any of its tensors held."""

    def __init__(self):
        super().__init__()
        self.most: dict[tuple[str, frozenset], int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        key = (str(func), frozenset(t.dtype for t in tensors))
        self.most[key] = max([self.most.get(key, 0)] + [t.numel() for t in tensors])
        return out


def test_cpu_passes_compute_on_at_most_a_grain_per_operation():
    """No operation of a CPU pass wakes torch's thread pool (on a loaded machine each wake-up waits
    for a core; measured in docs/training.md): every operation that computes on more than GRAIN
    values is the draw itself (the generator runs on one thread) or the float64 norm (one row,
    reduced on one thread). Views and allocations compute nothing. (One thread: no pool, no cuts.)"""
    flat = torch.zeros(3 * zo.CHUNK + 5)
    with _torch_threads(2), _Touches() as seen:
        norm = zo.perturb_(flat, 1, 0.5)
        for at, (u,) in zo.sphere_chunks(len(flat), [1], [norm]):
            flat[at].add_(u)
    views = {"aten.slice.Tensor", "aten.view.default", "aten.detach.default", "aten.empty.memory_format"}
    serial = {
        ("aten.randn.generator", frozenset({torch.float32})),
        ("aten.linalg_vector_norm.default", frozenset({torch.float64})),
    }
    big = {key for key, most in seen.most.items() if most > zo.GRAIN and key[0] not in views}
    assert big == serial
    assert ("aten.add_.Tensor", frozenset({torch.float32})) in seen.most


def test_flatten_makes_the_parameters_views_of_one_buffer_and_keeps_u():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    before = [p.detach().clone() for p in model.parameters()]
    ids = [id(p) for p in model.parameters()]
    x = torch.randn(4, 3)
    out = model(x).detach()
    u_before = zo.direction(model, 7)
    flat = zo.flatten_(model)
    assert flat.shape == (sum(p.numel() for p in before),) and flat.is_contiguous()
    assert [id(p) for p in model.parameters()] == ids  # same Parameter objects
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(model(x), out)
    assert torch.equal(flat, torch.cat([b.reshape(-1) for b in before]))
    flat[0] = 42.0  # a view, not a copy
    assert float(next(model.parameters()).detach().reshape(-1)[0]) == 42.0
    flat[0] = before[0].reshape(-1)[0]
    # u depends on the seed and d only: the same for the model, its parameter list and the buffer
    assert torch.equal(zo.direction(flat, 7), u_before)
    assert torch.equal(zo.direction(list(model.parameters()), 7), u_before)
    # a pass over the buffer moves the parameters as a pass over the separate tensors would
    twin = [b.clone() for b in before]
    norm = zo.perturb_(flat, 7, 0.5)
    assert norm == zo.gaussian_norm(twin, 7)
    assert zo.perturb_(twin, 7, 0.5, norm) == norm
    assert all(torch.equal(a, b) for a, b in zip(twin, model.parameters()))
    # optimisers and load_state_dict still act on the buffer
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).sum().backward()
    opt.step()
    assert torch.equal(flat, torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    model.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert not flat.any()


def test_zo_estimator_mean_is_twice_the_smoothed_gradient_on_a_quadratic():
    """eq. (7): delta = (f(w + lam u) - f(w - lam u)) / lam; for f(w) = w'Aw/2 + b'w the smoothed
    gradient is the gradient, and E[delta u] = 2 grad f (E[u u'] = I on the sqrt(d) sphere)."""
    d, lam, n = 6, 1e-2, 6000
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(d, d, generator=gen, dtype=torch.float64)
    a = a @ a.T / d + torch.eye(d, dtype=torch.float64)
    b = torch.randn(d, generator=gen, dtype=torch.float64)
    w = torch.randn(d, generator=gen, dtype=torch.float64)
    grad = a @ w + b
    f = lambda v: 0.5 * v @ a @ v + b @ v  # noqa: E731
    param = w.clone()
    samples = []
    for seed in range(n):
        norm = zo.gaussian_norm([param], seed)
        zo.perturb_([param], seed, lam, norm)
        plus = f(param)
        zo.perturb_([param], seed, -2 * lam, norm)
        minus = f(param)
        zo.perturb_([param], seed, lam, norm)
        samples.append(float((plus - minus) / lam) * zo.direction([param], seed).double())
    samples = torch.stack(samples)
    mean, se = samples.mean(0), samples.std(0) / math.sqrt(n)
    assert torch.allclose(param, w, atol=1e-12)  # perturbations cancel
    assert ((mean - 2 * grad).abs() <= 5 * se).all()  # matches within 5 s.e.
    assert ((mean - grad).abs() > 5 * se).any()  # and the test can tell 1x from 2x


def test_restore_and_update_leaves_w_minus_eta_delta_u(tiny_scheduler):
    sched = tiny_scheduler(lr_device=0.1, device_momentum=0.0)
    device, method = sched.devices[0], sched.method
    w0 = [p.detach().clone() for p in device.model.parameters()]
    up = method.device_send(device, torch.arange(8))
    (seed,), (norm,) = device.scratch["seeds"], device.scratch["norms"]
    delta = 0.37
    method.device_receive(device, Message(0, SERVER, "device0", "delta", {"delta": torch.tensor([delta])}))
    u = zo.direction(w0, seed)
    expected = torch.cat([p.reshape(-1) for p in w0]).double() - 0.1 * delta * u.double()
    got = torch.cat([p.detach().reshape(-1) for p in device.model.parameters()])
    assert torch.allclose(got.double(), expected, rtol=0, atol=1e-6)
    # bitwise: exactly the three in-place float32 passes +lam u, -2 lam u, (lam - eta Delta) u, each
    # one draw g = randn(d) of all the parameters (in parameters() order) added to the flat buffer
    d = sum(p.numel() for p in w0)
    lam = method.lam
    replay = torch.cat([p.reshape(-1) for p in w0])
    for scale in (lam, -2 * lam, lam - 0.1 * delta):
        g = torch.randn(d, generator=torch.Generator().manual_seed(seed))
        replay.add_(g, alpha=scale * math.sqrt(d) / norm)
    assert torch.equal(replay, got)
    assert norm == zo.gaussian_norm(w0, seed)
    # neither u nor a copy of the parameters is kept: the seed and ||g|| only
    assert set(device.scratch) == {"seeds", "norms"}
    assert up.kind == "embeddings"


def test_frozen_devices_are_restored_exactly_up_to_rounding(tiny_scheduler):
    sched = tiny_scheduler(freeze="devices")
    device = sched.devices[0]
    w0 = [p.detach().clone() for p in device.model.parameters()]
    sched.method.device_send(device, torch.arange(8))
    sched.method.device_receive(
        device, Message(0, SERVER, "device0", "delta", {"delta": torch.tensor([5.0])})
    )
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(w0, device.model.parameters()))


values = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=300, deadline=None)
@given(st.lists(values, min_size=1, max_size=20), st.data())
def test_replacing_one_record_moves_the_clipped_mean_by_at_most_2c_over_b(deltas, data):
    clip = 10.0
    b = len(deltas)
    i = data.draw(st.integers(0, b - 1))
    other = list(deltas)
    other[i] = data.draw(values)
    a = zo.clip_scalars(torch.tensor(deltas), clip).sum() / b
    c = zo.clip_scalars(torch.tensor(other), clip).sum() / b
    assert torch.isfinite(a) and torch.isfinite(c)
    assert abs(float(a - c)) <= 2 * clip / b * (1 + 1e-6)


def test_clip_maps_nan_to_zero_and_inf_to_the_bounds():
    out = zo.clip_scalars(torch.tensor([float("nan"), float("inf"), -float("inf"), 25.0, -3.0]), 10.0)
    assert out.tolist() == [0.0, 10.0, -10.0, 10.0, -3.0]


def test_server_delta_sensitivity_with_a_poisoned_record(tiny_scheduler):
    """End to end through DPZV's server: replace one record's embeddings by inf/NaN/huge values."""
    for poison in (float("inf"), float("nan"), 1e30, -1e30):
        sched = tiny_scheduler(clip=0.5)
        method, server = sched.method, sched.server
        gen = torch.Generator().manual_seed(1)
        ids = torch.arange(8)
        h_plus, h_minus = torch.randn(8, 4, generator=gen), torch.randn(8, 4, generator=gen)
        msg = lambda hp: Message(
            0,
            "device0",
            SERVER,
            "embeddings",  # noqa: E731
            {"ids": ids, "h_plus": hp, "h_minus": h_minus},
        )
        method.train_server = False
        base = float(method.server_reply(server, msg(h_plus))["delta"])
        bad = h_plus.clone()
        bad[3] = poison
        moved = float(method.server_reply(server, msg(bad))["delta"])
        assert math.isfinite(moved)
        assert abs(moved - base) <= 2 * 0.5 / 8 + 1e-6


def test_no_clip_ablation_differs_from_clipping():
    deltas = torch.tensor([50.0, -1.0])
    assert float(zo.clip_scalars(deltas, None).sum()) == 49.0
    assert float(zo.clip_scalars(deltas, 10.0).sum()) == 9.0


def test_dpzv_default_release_is_the_clipped_batch_mean():
    from privzv.training.config import TrainConfig

    r = dpzv.DPZV.release(TrainConfig(batch_size=64, clip=10.0))
    assert (r.aggregate, r.batch_size, r.clip, r.sensitivity) == ("mean", 64, 10.0, 20.0 / 64)


def test_secret_subsampling_delta_divides_the_kept_sum_by_b(tiny_scheduler):
    from privzv.training.methods import common

    sched = tiny_scheduler(threat="secret-subsampling", batch_size=4, super_batch=8, clip=0.05)
    method, server = sched.method, sched.server
    method.train_server = False
    gen = torch.Generator().manual_seed(2)
    ids = torch.arange(8)
    hp, hm = torch.randn(8, 4, generator=gen), torch.randn(8, 4, generator=gen)
    stale = server.table.gather(ids)
    y = server.labels[ids]
    with torch.no_grad():
        deltas = (
            common.losses(server.head, common.with_row(stale, 0, hp), y)
            - common.losses(server.head, common.with_row(stale, 0, hm), y)
        ) / method.lam
    got = float(
        method.server_reply(
            server, Message(0, "device0", SERVER, "embeddings", {"ids": ids, "h_plus": hp, "h_minus": hm})
        )["delta"]
    )
    kept = torch.as_tensor(sched.recorder.transcripts[SERVER].select("local", "keep")[-1].fields["mask"])
    expected = float(zo.clip_scalars(deltas, 0.05)[kept].sum() / 4)  # / B, not / |kept|
    assert got == pytest.approx(expected, abs=1e-6)
    assert 0 < int(kept.sum()) < 8  # (fixed secret seed) a real subset was kept


class _Draws(TorchDispatchMode):
    """Counts the chunks drawn (``randn`` calls)."""

    def __init__(self):
        super().__init__()
        self.chunks = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.chunks += str(func) == "aten.randn.generator"
        return func(*args, **(kwargs or {}))


def _dpzv_device_step(flat: torch.Tensor, seeds: list[int], momentum: torch.Tensor | None) -> None:
    """DPZV's device passes (common.perturbed_forwards, then DPZV.device_receive) without forwards:
    per direction +lam, -2 lam (and back, but the last); then restore and update, plain or with
    momentum over the K directions (sphere_chunks)."""
    lam, rate, steps = 1e-3, 0.05, [0.37, -0.2, 0.1][: len(seeds)]
    norms = []
    for k, seed in enumerate(seeds):
        norm = zo.perturb_(flat, seed, lam)
        zo.perturb_(flat, seed, -2 * lam, norm)
        if k < len(seeds) - 1:
            zo.perturb_(flat, seed, lam, norm)
        norms.append(norm)
    if momentum is None:
        for k, (seed, norm, step) in enumerate(zip(seeds, norms, steps)):
            zo.perturb_(flat, seed, (lam if k == len(seeds) - 1 else 0.0) - rate * step, norm)
        return
    for at, us in zo.sphere_chunks(len(flat), seeds, norms):
        b = momentum[at].mul_(0.9)
        for u, step in zip(us, steps):
            b.add_(u, alpha=step)
        flat[at].add_(us[-1], alpha=lam).add_(b, alpha=-rate)


@pytest.mark.parametrize("seeds", [[4], [4, 9]])
@pytest.mark.parametrize("with_momentum", [False, True])
def test_kept_draws_leave_the_same_bits_drawing_once_per_direction(seeds, with_momentum):
    """The opt-in: inside zo.kept_draws a step draws each direction's g once (not 3-4 times) and
    leaves exactly the parameters (and momentum) of the default path, step after step."""
    d = 3 * zo.CHUNK + 5  # 3 chunks, the last with the 5 joined
    start = torch.randn(d, generator=torch.Generator().manual_seed(0))
    runs = {}
    for kept in (None, 2 * 4 * d):
        flat, buf = start.clone(), torch.zeros(d) if with_momentum else None
        with zo.kept_draws(kept) if kept else contextlib.nullcontext(), _Draws() as drawn:
            for step in range(2):
                _dpzv_device_step(flat, [s + 100 * step for s in seeds], buf)
        runs[kept] = flat, buf, drawn.chunks
    (flat, buf, chunks), (flat_kept, buf_kept, chunks_kept) = runs.values()
    assert torch.equal(flat, flat_kept) and (buf is None or torch.equal(buf, buf_kept))
    assert chunks_kept == 2 * len(seeds) * len(zo._sizes(d))  # one draw per direction and step
    assert chunks >= 3 * chunks_kept


def test_kept_draws_keep_at_most_their_budget_and_refuse_a_bad_one():
    d = 2 * zo.CHUNK
    flat = torch.zeros(d)
    with zo.kept_draws(4 * d + 3), _Draws() as drawn:  # room for one draw
        zo.perturb_(flat, 1, 0.1)
        zo.perturb_(flat, 2, 0.1)
        assert zo._KEPT.used() == 4 * d  # the second draw replaced the first
        zo.perturb_(flat, 2, -0.1)
        assert drawn.chunks == 2 * 2  # each seed drawn once (for ||g||), then read back
    assert zo._KEPT is None
    with zo.kept_draws(4 * d - 1), _Draws() as drawn:  # too small for one draw: nothing kept
        zo.perturb_(flat, 1, 0.1)
        zo.perturb_(flat, 1, -0.1)
        assert zo._KEPT.used() == 0 and drawn.chunks == 4 * 2  # ||g|| and the pass, twice
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(PrivzvError, match=f"kept_draws max_bytes {bad!r}: allowed is an integer >= 0"):
            with zo.kept_draws(bad):
                pass
