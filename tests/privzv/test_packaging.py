"""The distribution claims only the import name ``privzv``: training/ and attacks/ install as
privzv.training and privzv.attacks (pyproject.toml package-dir)."""
import subprocess
import sys


def _imports(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)


def test_subpackages_import_under_privzv_only(tmp_path):
    ok = _imports("import privzv.training.run, privzv.attacks.registry, privzv.training.methods.dpzv",
                  tmp_path)
    assert ok.returncode == 0, ok.stderr
    for generic in ("training", "attacks"):
        bad = _imports(f"import {generic}", tmp_path)
        assert bad.returncode != 0 and "ModuleNotFoundError" in bad.stderr


def test_a_local_training_folder_does_not_shadow_privzv_training(tmp_path):
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("raise RuntimeError('shadowed')\n")
    ok = _imports("import privzv.training.config as c; print(c.TrainConfig.__name__)", tmp_path)
    assert ok.returncode == 0 and ok.stdout.strip() == "TrainConfig", ok.stderr
