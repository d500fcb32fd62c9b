"""The training config declared once (issue 22 item 2): every field's checks, JSON types, CLI
flags and docs/cli.md's reference come from its declaration in ``TrainConfig``."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from privzv import cliutil
from privzv.errors import PrivzvError
from privzv.training import cli, schema
from privzv.training.config import CAPS, TrainConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
FIELDS = schema.fields(TrainConfig)
NUMERIC = [f for f in FIELDS if f.numeric]
FLOATS = [f for f in NUMERIC if not f.integer]


def test_the_docs_reference_is_the_declaration():
    """docs/cli.md's config reference is regenerated, not edited: ``python -m
    privzv.training.schema docs/cli.md`` rewrites it after a declaration changes."""
    text = DOC.read_text()
    assert schema.with_reference(text, TrainConfig) == text


def test_a_toy_field_reaches_the_parser_the_checks_the_json_types_and_the_reference():
    toy = dataclasses.make_dataclass(
        "Toy", [("toy_knob", int, schema.field(3, "a toy knob", low=1, cap=9))], bases=(TrainConfig,)
    )
    parser = cliutil.Parser(prog="toy")
    schema.add_flags(parser, toy)
    args = parser.parse_args(["--toy-knob", "5", "--devices", "2"])
    assert schema.given(args, toy) == {"toy_knob": 5, "devices": 2}
    with pytest.raises(PrivzvError, match="--toy-knob '0': must be an integer >= 1"):
        parser.parse_args(["--toy-knob", "0"])
    assert toy(toy_knob=9).validate().toy_knob == 9
    with pytest.raises(PrivzvError, match=r"--toy-knob 10: must be <= 9 \(cap"):
        toy(toy_knob=10).validate()
    with pytest.raises(PrivzvError, match="--toy-knob True: must be an integer"):
        toy(toy_knob=True).validate()
    with pytest.raises(PrivzvError, match="config toy_knob 'x': must be int"):
        toy.from_dict({"toy_knob": "x"})
    assert "| `toy_knob` | `--toy-knob` | `3` | integer >= 1 (cap 9) | a toy knob |" in schema.reference(toy)


def test_flags_and_caps_are_derived_from_the_declaration():
    parser = cli.build_parser()
    options = {o for a in parser._actions for o in a.option_strings}
    assert {f.label for f in FIELDS if f.spec.flag} <= options
    assert CAPS == {f.name: f.spec.cap for f in FIELDS if f.spec.cap is not None}
    assert TrainConfig().validate() == TrainConfig()  # every default passes its own declaration


@pytest.mark.parametrize("f", NUMERIC, ids=lambda f: f.name)
def test_bool_is_not_a_number(f):
    with pytest.raises(PrivzvError, match=f"^{f.label} True: must be an? (integer|number)$"):
        TrainConfig(**{f.name: True}).validate()


@pytest.mark.parametrize("f", NUMERIC, ids=lambda f: f.name)
@pytest.mark.parametrize("sign", [1, -1])
def test_integers_beyond_float_range_are_refused_by_name(f, sign):
    shown = f"{'-' if sign < 0 else ''}<an integer of 1329 bits>"
    with pytest.raises(PrivzvError, match=f"^{f.label} {shown}: beyond the floating-point range"):
        TrainConfig(**{f.name: sign * 10**400}).validate()


@pytest.mark.parametrize("f", FLOATS, ids=lambda f: f.name)
def test_nan_and_unallowed_infinities_are_refused_by_name(f):
    with pytest.raises(PrivzvError, match=f"^{f.label} nan: must be a (finite )?number"):
        TrainConfig(**{f.name: math.nan}).validate()
    if not f.spec.allow_inf:
        with pytest.raises(PrivzvError, match=f"^{f.label} inf: must be a finite number"):
            TrainConfig(**{f.name: math.inf}).validate()


def test_a_list_field_checks_its_items():
    with pytest.raises(PrivzvError, match=r"^activation \[2 items\]: item <an integer of 1329 bits>"):
        TrainConfig(devices=2, activation=[10**400, 0.5]).validate()
    with pytest.raises(PrivzvError, match=r"^activation \[2 items\]: item True: must be a number"):
        TrainConfig(devices=2, activation=[True, 0.5]).validate()
    assert TrainConfig(devices=2, activation=[0.25, 0.75]).validate()


def test_cross_field_rules_are_named_in_one_list():
    from privzv.training import config

    assert all(callable(rule) and rule.__name__ in vars(config) for rule in config.RULES)
    with pytest.raises(PrivzvError, match="--head-share 1"):
        TrainConfig(head_share=1.0).validate()


HOSTILE = [True, 10**400, -(10**400), math.nan, math.inf, -math.inf, "x", [1], {}, None, object()]


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f.name)
def test_any_value_of_any_field_is_accepted_as_declared_or_a_privzv_error(f):
    """The Python API raises PrivzvError and nothing else (before: OverflowError for integers
    beyond float range, TypeError for a non-list activation), and accepts only declared types."""
    for value in HOSTILE:
        try:
            TrainConfig(**{f.name: value}).validate()
        except PrivzvError:
            continue
        assert (value is None and f.optional) or (
            isinstance(value, f.kinds) and (isinstance(value, bool) == (bool in f.kinds))
        ), value


def test_numpy_scalars_are_numbers_kept_as_python_numbers():
    np = pytest.importorskip("numpy")
    c = TrainConfig(clip=np.float32(0.5), devices=np.int64(2), epochs=np.float64(1.0)).validate()
    assert (type(c.clip), type(c.devices), c.clip, c.devices) == (float, int, 0.5, 2)
    assert json.loads(json.dumps(c.to_dict()))["clip"] == 0.5
    with pytest.raises(PrivzvError, match="must be an integer"):
        TrainConfig(devices=np.bool_(True)).validate()
