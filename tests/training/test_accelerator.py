"""The device-agnostic trainer on the CPU: --device and --autocast, their refusals, the placement
seams, checkpoints as CPU tensors, the ZO draws' construction whatever the chunking, and a static
scan that no code path creates a tensor on a hard-coded device (tests/training/test_cuda.py runs
the CUDA side where a GPU is present)."""

from __future__ import annotations

import ast
import dataclasses
import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from privzv.cli import main
from privzv.errors import PrivzvError
from privzv.training import accelerator, run, zo
from privzv.training.config import TrainConfig
from privzv.training.run_folder import CHECKPOINT

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("privzv", "training", "attacks")
NO_CUDA = not torch.cuda.is_available()

# (file, enclosing function or "<module>") -> why it may name a device
ALLOWED = {
    ("training/accelerator.py", "<module>"): "the host device, named once for every other module",
    ("training/accelerator.py", "_cuda"): "resolves --device cuda to the current CUDA device",
    ("training/transcript.py", "_numpy"): "writing transcripts: numpy arrays on disk come from CPU tensors",
    ("training/engines/flower/codec.py", "encode"): "serialising a message for the wire (numpy arrays)",
}


# --------------------------------------------------------------------------- the static scan
def _hard_coded(node: ast.AST) -> str | None:
    """What names a device in ``node`` (a call), or None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ("cpu", "cuda") and not node.args:
        return f".{func.attr}()"
    for kw in node.keywords:
        if kw.arg == "device" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return f"device={kw.value.value!r}"
    named = isinstance(func, ast.Attribute) and func.attr in ("device", "to")
    first = node.args[0] if node.args else None
    if named and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return f"{func.attr}({first.value!r})"
    return None


def scan(root: Path, folders=SCANNED) -> list[tuple[str, str, int, str]]:
    """(file, enclosing function, line, what) of every call that names a device under ``folders``."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            rel = path.relative_to(root).as_posix()

            def visit(node, where):
                for child in ast.iter_child_nodes(node):
                    inner = (
                        child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
                    )
                    what = _hard_coded(child)
                    if what:
                        found.append((rel, where, child.lineno, what))
                    visit(child, inner)

            visit(tree, "<module>")
    return found


def test_no_code_path_creates_a_tensor_on_a_hard_coded_device():
    """Every device named in privzv/, training/ and attacks/ is in the allow-list with its reason,
    and every allow-list entry is still used."""
    found = scan(ROOT)
    outside = [f"{f}:{line} in {fn}: {what}" for f, fn, line, what in found if (f, fn) not in ALLOWED]
    assert not outside, (
        "hard-coded devices (use the run's device, or privzv.training.accelerator):\n" + "\n".join(outside)
    )
    assert {(f, fn) for f, fn, _, _ in found} == set(ALLOWED)


def test_the_scan_catches_a_planted_violation(tmp_path):
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "planted.py").write_text(
        "import torch\n"
        "def fine(x, place):\n"
        "    return torch.zeros(3, device=place) + x.to(place)\n"
        "def bad(x):\n"
        "    a = torch.zeros(3, device='cuda')\n"
        "    b = x.cpu()\n"
        "    c = torch.device('cuda:0')\n"
        "    return a, b, c, x.to('cpu'), x.cuda()\n"
    )
    found = scan(tmp_path, ("training",))
    assert {(fn, what) for _, fn, _, what in found} == {
        ("bad", "device='cuda'"),
        ("bad", ".cpu()"),
        ("bad", "device('cuda:0')"),
        ("bad", "to('cpu')"),
        ("bad", ".cuda()"),
    }


# --------------------------------------------------------------------------- --device, --autocast
def test_auto_resolves_to_cuda_only_where_available():
    assert accelerator.resolve("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert accelerator.resolve("auto").type == expected


def test_the_config_declares_device_and_autocast_with_cpu_fp32_defaults():
    config = TrainConfig()
    assert (config.device, config.autocast) == ("cpu", "none")
    with pytest.raises(PrivzvError, match="--device 'tpu'|--device \"tpu\"|--device tpu"):
        TrainConfig(device="tpu").validate()
    with pytest.raises(PrivzvError, match="--autocast"):
        TrainConfig(autocast="fp8").validate()


@pytest.mark.skipif(not NO_CUDA, reason="refusals of CUDA without CUDA")
def test_cuda_without_cuda_is_refused_by_the_api_with_nothing_written(tmp_path, tiny_config, tiny_dataset):
    out = tmp_path / "run"
    with pytest.raises(PrivzvError, match=r"^--device cuda: CUDA is not available here"):
        run.train(tiny_config(device="cuda"), out, secret_seed=1)
    assert not out.exists()
    with pytest.raises(PrivzvError, match="--device cuda"):
        run.build(tiny_config(device="cuda"), tiny_dataset())


@pytest.mark.skipif(not NO_CUDA, reason="refusals of CUDA without CUDA")
@pytest.mark.parametrize(
    ("flags", "start"),
    [
        (["--device", "cuda"], "privzv train: error: --device cuda: CUDA is not available here"),
        (["--autocast", "fp16"], "privzv train: error: --autocast fp16: not on device cpu (CUDA only)"),
    ],
)
def test_the_cli_refuses_in_one_line_with_exit_2(tmp_path, capsys, flags, start):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--dataset",
            "breast-cancer",
            "--devices",
            "2",
            "--epochs",
            "0.1",
            "--out",
            str(out),
            *flags,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(start) and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


# --------------------------------------------------------------------------- placement on the CPU
@pytest.mark.parametrize("method", ["dpzv", "vafl", "czofo", "rr-prior", "zoo-vfl"])
def test_device_cpu_and_auto_train_exactly_as_before(tiny_scheduler, method):
    """An explicit --device cpu (and auto, here without CUDA) goes through the placement seams
    and gives the default run's bits: every model, the head, the table and the labels on it."""
    place = accelerator.resolve("auto")
    runs = []
    for device in ("cpu", "auto") if place.type == "cpu" else ("cpu",):
        sched = tiny_scheduler(
            method=method, device=device, epsilon=2.0 if method == "rr-prior" else math.inf
        )
        for _ in range(6):
            sched.step()
        tensors = [p for d in sched.devices for p in d.model.parameters()]
        tensors += [*sched.server.head.parameters(), sched.server.table.data, sched.server.labels]
        assert {t.device.type for t in tensors} == {"cpu"}
        runs.append(torch.cat([d.flat for d in sched.devices]))
    reference = tiny_scheduler(method=method, epsilon=2.0 if method == "rr-prior" else math.inf)
    for _ in range(6):
        reference.step()
    for flat in runs:
        assert torch.equal(flat, torch.cat([d.flat for d in reference.devices]))


def test_checkpoints_hold_cpu_tensors_and_resume_on_another_device_setting(tmp_path, tiny_config, no_plots):
    """A run's checkpoint is CPU tensors only (asserted on the saved file); a resume may change
    --device (auto here), and only that besides --epochs."""
    out = tmp_path / "run"
    config = tiny_config(epochs=0.1, sigma=2.0)
    run.train(config, out, secret_seed=5, checkpoint_every=5)
    saved = torch.load(io.BytesIO((out / CHECKPOINT).read_bytes()), weights_only=True)
    devices = set()

    def walk(obj):
        if isinstance(obj, torch.Tensor):
            devices.add(obj.device.type)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    walk(saved["state"])
    assert devices == {"cpu"}
    extended = dataclasses.replace(run.saved_config(out), epochs=0.2, device="auto")
    summary = run.train(extended, out, resume=True, extend=True)
    assert summary["rounds"] > saved["round"]
    with pytest.raises(PrivzvError, match="cannot change on --resume"):
        run.train(dataclasses.replace(run.saved_config(out), autocast="bf16"), out, resume=True)


def test_to_host_moves_every_tensor_of_a_state_and_keeps_cpu_tensors():
    t = torch.arange(3.0)
    state = {"a": t, "b": [t, (t, 2)], "c": {"d": t}, "e": "text"}
    host = accelerator.to_host(state)
    assert host["a"] is t and host["b"][1][0] is t and host["b"][1][1] == 2 and host["e"] == "text"
    assert isinstance(host["b"][1], tuple)


def test_bf16_autocast_runs_the_devices_forwards_in_bf16_and_sends_float32(tiny_scheduler):
    """Under --autocast bf16 on the CPU the device's layers compute in bfloat16, its uplink is
    float32 (the server checks it), the parameters stay fp32, and the run differs from fp32's."""
    runs = {}
    for name in ("none", "bf16"):
        sched = tiny_scheduler(autocast=name)
        seen = []
        device = sched.devices[0]
        for layer in device.model.modules():
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
        for _ in range(4):
            assert sched.step()
        assert sched.refused == 0
        assert {p.dtype for d in sched.devices for p in d.model.parameters()} == {torch.float32}
        assert set(seen) == {torch.bfloat16 if name == "bf16" else torch.float32}
        runs[name] = device.flat.clone()
    assert not torch.equal(runs["none"], runs["bf16"])


# --------------------------------------------------------------------------- ZO draws on a device
@pytest.mark.parametrize("sizes", [[7, 1, 20], [1] * 5, [50]])
def test_any_chunking_keeps_u_on_the_whole_sphere(monkeypatch, sizes):
    """The construction any device's draws go through, with a stub of odd chunks (the CUDA entry's
    chunking differs from the CPU's): ||g|| is taken over the same chunks the perturbation adds, so
    w + s u(seed) lies at distance exactly s sqrt(d) from w, along sqrt(d) g / ||g|| of the whole
    draw g, and the first tensor's share of ||u||^2 has its Beta(3/2, (d-3)/2) mean (per-chunk
    normalisation would not)."""
    d = sum(sizes) + 9

    def stub(n):
        assert n == d
        return [*sizes, 9]

    monkeypatch.setitem(zo.DRAWS, "cpu", zo.Draws(stub, zo.DRAWS["cpu"].norm))
    shares = []
    for seed in range(300):
        params = [torch.zeros(3), torch.zeros(d - 3)]
        norm = zo.perturb_(params, seed, 0.5)
        u = torch.cat(params) / 0.5
        gens = torch.Generator().manual_seed(seed)
        g = torch.cat([torch.randn(n, generator=gens) for n in stub(d)])
        assert norm == pytest.approx(float(g.double().norm()), rel=1e-12)
        assert torch.allclose(u, math.sqrt(d) * g / norm, rtol=1e-6, atol=1e-7)
        assert float(u.double().norm()) == pytest.approx(math.sqrt(d), rel=1e-6)
        assert torch.allclose(zo.direction(params, seed), u, rtol=1e-6, atol=1e-7)
        shares.append(float(u[:3].square().sum()) / d)
    shares = np.array(shares)
    assert shares.mean() == pytest.approx(3 / d, abs=4 * shares.std() / math.sqrt(len(shares)))


@pytest.mark.parametrize("d", [1, 5, 1 << 18, (1 << 18) + 3, 109_000_000])
def test_cuda_chunks_cover_d_in_at_most_cuda_chunks(d):
    sizes = zo._cuda_sizes(d)
    assert sum(sizes) == d and len(sizes) <= zo.CUDA_CHUNKS
    assert all(n == sizes[0] for n in sizes[:-1]) and sizes[0] >= min(d, zo.CUDA_MIN_CHUNK)


def test_directions_on_an_unknown_device_type_are_refused():
    with pytest.raises(PrivzvError, match="ZO directions on device 'meta'"):
        zo.perturb_([torch.zeros(4, device="meta")], 1, 1.0)
