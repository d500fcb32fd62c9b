"""mkdocs hook: lay privzv out as it installs (training/ and attacks/ become privzv.training and
privzv.attacks, pyproject.toml package-dir) in a temporary tree of linked files, so that
mkdocstrings reads every docstring of docs/api.md from source, without importing anything."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = {"privzv": "privzv", "privzv/training": "training", "privzv/attacks": "attacks"}


def _mirror(source: Path, target: Path) -> None:
    """Real folders (griffe does not walk linked ones) holding links to ``source``'s .py files."""
    for path in source.rglob("*.py"):
        link = target / path.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(path)


@event_priority(100)  # before mkdocstrings reads its handlers' paths
def on_config(config):
    tree = Path(tempfile.mkdtemp(prefix="privzv-api-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    for installed, folder in LAYOUT.items():
        _mirror(ROOT / folder, tree / installed)
    config.plugins["mkdocstrings"].config.handlers["python"]["paths"] = [str(tree)]
    return config
