"""The README's promises that a file can check: its two set-up commands (CI runs the second
verbatim), its size, docs examples that import privzv's subpackages by their installed names, and
no reference to files outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [
    "bash scripts/install.sh && .venv/bin/privzv demo",
    "bash scripts/install.sh test,mnist && .venv/bin/python -m pytest",
]
OUTSIDE = re.compile("pap" + r"ers/\d|DESIGN\.md")  # split so that this file does not match itself
SOURCES = ("privzv", "training", "attacks", "tests", "benchmarks", "docs", "scripts")


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first_block.splitlines() == COMMANDS
    assert COMMANDS[1] in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_readme_is_at_most_10_kb():
    assert len((ROOT / "README.md").read_bytes()) <= 10 * 1024


def test_docs_examples_import_the_installed_names():
    bare = re.compile(r"^>>> (from|import) (training|attacks)\b", re.MULTILINE)
    assert [p.name for p in (ROOT / "docs").glob("*.md") if bare.search(p.read_text())] == []


def test_no_reference_to_files_outside_the_repository():
    files = [
        *ROOT.glob("*.md"),
        *(p for folder in SOURCES for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md")),
    ]
    assert [
        f"{p.relative_to(ROOT)}: {m.group()}" for p in files for m in OUTSIDE.finditer(p.read_text())
    ] == []
