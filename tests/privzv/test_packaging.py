"""The distribution claims only the import name ``privzv`` (training/ and attacks/ install as
privzv.training and privzv.attacks, pyproject.toml package-dir); its core needs numpy and scipy
only, and a command that needs an extra names it."""

import subprocess
import sys
from pathlib import Path


def _imports(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)


def test_subpackages_import_under_privzv_only(tmp_path):
    ok = _imports(
        "import privzv.training.run, privzv.attacks.registry, privzv.training.methods.dpzv", tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    for generic in ("training", "attacks"):
        bad = _imports(f"import {generic}", tmp_path)
        assert bad.returncode != 0 and "ModuleNotFoundError" in bad.stderr


def test_a_local_training_folder_does_not_shadow_privzv_training(tmp_path):
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("raise RuntimeError('shadowed')\n")
    ok = _imports("import privzv.training.config as c; print(c.TrainConfig.__name__)", tmp_path)
    assert ok.returncode == 0 and ok.stdout.strip() == "TrainConfig", ok.stderr


# --- the accounting-only install and the extras -----------------------------------------------

TRAIN_ONLY = ("torch", "sklearn", "matplotlib", "tqdm", "cryptography", "flwr", "opendp", "dp_accounting")


HIDE = """import sys
class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {modules!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hidden())
"""


def _without(modules, code: str, cwd) -> subprocess.CompletedProcess:
    """Run ``code`` with ``modules`` not installed, as in an install without their extras."""
    return _imports(HIDE.format(modules=set(modules)) + code, cwd)


def test_the_accounting_core_needs_none_of_the_extras(tmp_path):
    done = _without(
        TRAIN_ONLY,
        "import privzv\n"
        "print(round(float(privzv.calibrate(epsilon=1, delta=1e-5, "
        "release=privzv.Release(clip=1.0, batch_size=10), "
        "schedule=privzv.Schedule(steps=100, dataset_size=1000)).noise_multiplier), 6))\n"
        "from privzv.cli import main\n"
        "sys.exit(main(['convert', '--mu', '0.5', '--delta', '1e-5']))",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.splitlines()[0]) > 0


def _cli_without(module: str, argv: list, cwd) -> subprocess.CompletedProcess:
    return _without([module], f"from privzv.cli import main\nsys.exit(main({argv!r}))", cwd)


def test_a_training_or_attack_command_without_its_extra_names_it_in_one_line(tmp_path):
    for module, argv in [
        ("torch", ["train", "--dataset", "digits", "--epsilon", "1", "--out", "r1"]),
        ("sklearn", ["train", "--dataset", "digits", "--epsilon", "1", "--out", "r2"]),
        ("torch", ["attack", "study", "--dataset", "digits", "--out", "r3"]),
        ("torch", ["demo"]),
    ]:
        done = _cli_without(module, argv, tmp_path)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"'{module}' is not installed" in done.stderr and "pip install 'privzv[train]'" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_the_dp_event_export_without_dp_accounting_raises_privzv_error(tmp_path):
    done = _without(
        ["dp_accounting"],
        "import privzv\n"
        "try:\n"
        "    privzv.to_dp_event(privzv.Release(clip=1.0, batch_size=10, sigma=1.0), "
        "privzv.Schedule(steps=10, dataset_size=100))\n"
        "except privzv.PrivzvError as exc:\n"
        "    print(exc)",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'privzv[dpevent]'" in done.stdout


def test_bert_without_transformers_names_the_text_extra_as_a_privzv_error(tmp_path):
    done = _without(
        ["transformers"],
        "import torch\n"
        "from privzv.errors import PrivzvError\n"
        "from privzv.training import VerticalDataset, models\n"
        "x = torch.ones(4, 3, dtype=torch.int64)\n"
        "ds = VerticalDataset('t', [x], torch.zeros(4, dtype=torch.int64), [x], torch.zeros(4, dtype=torch.int64), 2, 'p')\n"
        "try:\n"
        "    models.device_model(ds, 0, 4, 'bert')\n"
        "except PrivzvError as exc:\n"
        "    print(exc)",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "'transformers' is not installed" in done.stdout and "pip install 'privzv[text]'" in done.stdout


def test_an_unrelated_missing_module_is_not_blamed_on_an_extra():
    from privzv.extras import missing_extra

    assert missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope")) is None
    assert "privzv[flower]" in str(missing_extra(ModuleNotFoundError(name="flwr.server")))


EXTRAS = {
    "dpevent",
    "train",
    "attacks",
    "flower",
    "flower-sim",
    "secure",
    "mnist",
    "tables",
    "text",
    "all",
    "test",
    "docs",
    "bench",
    "lint",
}


def _metadata(tmp_path) -> str:
    """The wheel's METADATA as setuptools writes it, from pyproject.toml and the packages'
    __init__ files copied into ``tmp_path`` (no build in the checkout)."""
    import shutil

    root = Path(__file__).resolve().parents[2]
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, tmp_path / name)
    for init in [
        *root.glob("privzv/__init__.py"),
        *root.glob("training/**/__init__.py"),
        *root.glob("attacks/__init__.py"),
    ]:
        target = tmp_path / init.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(init, target)
    out = tmp_path / "meta"
    out.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, setuptools.build_meta as b; print(b.prepare_metadata_for_build_wheel(sys.argv[1]))",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return (out / done.stdout.split()[-1] / "METADATA").read_text()


def test_the_wheel_requires_numpy_and_scipy_only_and_declares_every_extra(tmp_path):
    import privzv

    meta = _metadata(tmp_path)
    fields = [line.split(": ", 1) for line in meta.splitlines() if ": " in line]
    requires = [value for key, value in fields if key == "Requires-Dist"]
    core = sorted(r.split(">")[0].split("<")[0].strip() for r in requires if "extra ==" not in r)
    assert core == ["numpy", "scipy"]
    assert {value for key, value in fields if key == "Provides-Extra"} == EXTRAS
    assert any(r.startswith("torch") and 'extra == "train"' in r for r in requires)
    assert any(r.startswith("dp-accounting") and 'extra == "dpevent"' in r for r in requires)
    assert ("Version", privzv.__version__) in [tuple(f) for f in fields]
    assert {("License-Expression", "Apache-2.0"), ("License-File", "LICENSE")} <= {tuple(f) for f in fields}
