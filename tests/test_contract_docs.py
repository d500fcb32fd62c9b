"""The README states what a run's epsilon covers word for word as docs/accounting.md's threat-model
contract does, and the contract's method rows match what the methods declare."""

from __future__ import annotations

from pathlib import Path

from privzv.training import methods

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- contract:covers -->", "<!-- /contract:covers -->"


def _block(path: Path) -> str:
    text = path.read_text()
    assert text.count(START) == 1 and text.count(END) == 1, path
    return text[text.index(START) : text.index(END)]


def test_the_readme_states_the_contract_word_for_word():
    assert _block(ROOT / "README.md") == _block(ROOT / "docs" / "accounting.md")


def test_every_method_is_in_the_contract_with_the_unit_it_declares():
    rows = [
        line.split("|")[1:3]
        for line in _block(ROOT / "docs" / "accounting.md").splitlines()
        if line.startswith("| ")
        and line.split("|")[2].strip().startswith("`")
        and not line.startswith("| method")
    ]
    declared = {name.strip(): unit.strip().strip("`") for names, unit in rows for name in names.split(",")}
    assert declared == {name: methods.get(name).PROTECTS for name in methods.METHODS}
