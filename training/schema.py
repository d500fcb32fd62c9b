"""Declare-once config fields (scikit-learn's parameter constraints, nanoGPT's one config).

A field of a config dataclass is declared once, with :func:`field`: its type (the annotation), its
default, its range, cap and choices, its CLI flag and its help. Everything else is derived here:
the JSON type check (:func:`check_types`), the per-field checks (:func:`check_fields`), the
``argparse`` flags (:func:`add_flags`, :func:`given`) and the reference table of docs/cli.md
(:func:`reference`, rewritten by ``python -m privzv.training.schema docs/cli.md``). Rules that tie
fields together are not field declarations: the config keeps them as named rules in one list.

A number field takes a Python int or float (JSON's numbers; an int field an int), then the rules
of :mod:`privzv.checks`, the validation layer of the API and the CLI (:func:`number_problem`).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from privzv import checks, cliutil
from privzv.errors import PrivzvError

VALUE, ON, OFF, NONE = "value", "on", "off", ""  # flag shapes: --name X, --name, --no-name, none
BEGIN, END = "<!-- config-reference:begin -->", "<!-- config-reference:end -->"


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a field allows, besides its type and default (those are the dataclass field's)."""

    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    allow_inf: bool = False
    cap: float | None = None  # against exhausting memory or time (docs/cli.md, "Caps")
    choices: tuple | Callable[[], Iterable] | None = None  # a callable: a registry read lazily
    flag: str = VALUE  # VALUE, ON, OFF or NONE (--config only)

    def allowed(self) -> tuple | None:
        return (
            None
            if self.choices is None
            else tuple(self.choices() if callable(self.choices) else self.choices)
        )


def field(default: Any, help: str, **spec: Any) -> Any:
    """A dataclass field declared with its :class:`Spec`."""
    return dataclasses.field(default=default, metadata={"spec": Spec(help, **spec)})


@dataclasses.dataclass(frozen=True)
class Field:
    """One declared field, with what its annotation says: ``kinds`` (float admits int),
    ``optional`` (None allowed), ``integer`` (an int field) and ``element`` (a list's item kinds)."""

    name: str
    default: Any
    spec: Spec
    kinds: tuple[type, ...]
    optional: bool
    element: tuple[type, ...] | None

    @property
    def integer(self) -> bool:
        return self.kinds == (int,)

    @property
    def numeric(self) -> bool:
        return int in self.kinds

    @property
    def label(self) -> str:
        """How errors name the field: its flag where it has one, else its config key."""
        dashed = self.name.replace("_", "-")
        flags = {VALUE: f"--{dashed}", ON: f"--{dashed}", OFF: f"--no-{dashed}"}
        return flags.get(self.spec.flag, self.name)


@functools.cache
def fields(cls) -> tuple[Field, ...]:
    """The declared fields of config dataclass ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    return tuple(
        Field(f.name, f.default, f.metadata["spec"], *_kinds(hints[f.name])) for f in dataclasses.fields(cls)
    )


def _kinds(hint) -> tuple[tuple[type, ...], bool, tuple[type, ...] | None]:
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    (base,) = [a for a in args if a is not type(None)]
    origin = typing.get_origin(base) or base
    element = None
    if origin is list:
        element = _kinds(typing.get_args(base)[0])[0]
    return ((int, float) if origin is float else (origin,)), type(None) in args, element


# --------------------------------------------------------------------------- checks
def show(value) -> str:
    """``repr(value)``, but an integer beyond float range by its size (its digits may not print)."""
    if isinstance(value, int) and not isinstance(value, bool) and not _in_float_range(value):
        return f"{'-' if value < 0 else ''}<an integer of {abs(value).bit_length()} bits>"
    return repr(value)


def _in_float_range(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def number_problem(value, *, integer: bool = False, allow_inf: bool = False) -> str | None:
    """Why ``value`` is not a usable number for a number field, or None: a Python int or float
    (an int where ``integer``; a bool is neither), then :func:`privzv.checks.number`'s rules
    (integers beyond the float range, NaN, and infinities unless allowed are refused)."""
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return f"must be {'an integer' if integer else 'a number'}"
    try:
        checks.number("", value, allow_inf=allow_inf, shown="")
    except PrivzvError as exc:
        return str(exc).removeprefix(": ")
    return None


def _range_text(spec: Spec) -> str:
    lo = "" if spec.low is None else f"{'>' if spec.low_open else '>='} {spec.low:g}"
    hi = "" if spec.high is None else f"{'<' if spec.high_open else '<='} {spec.high:g}"
    return " and ".join(p for p in (lo, hi) if p)


def _out_of_range(spec: Spec, value) -> bool:
    return (spec.low is not None and (value <= spec.low if spec.low_open else value < spec.low)) or (
        spec.high is not None and (value >= spec.high if spec.high_open else value > spec.high)
    )


def check_types(cls, d: dict) -> None:
    """Refuse a JSON value of the wrong type (bool is not a number; null only where optional)."""
    by_name = {f.name: f for f in fields(cls)}
    for name, value in d.items():
        f = by_name[name]
        if value is None and f.optional:
            continue
        if not isinstance(value, f.kinds) or (isinstance(value, bool) and bool not in f.kinds):
            allowed = " or ".join(k.__name__ for k in f.kinds) + (" or null" if f.optional else "")
            raise PrivzvError(f"config {name} {show(value)}: must be {allowed}")


def check_fields(config, skip: tuple[str, ...] = ()) -> None:
    """Each field of ``config`` (but those named in ``skip``) against its declaration: type,
    number, range, cap, choices."""
    for f in fields(type(config)):
        if f.name in skip:
            continue
        value = getattr(config, f.name)
        problem = field_problem(f, value)
        if problem:
            shown = f"[{len(value)} items]" if isinstance(value, list) else show(value)
            raise PrivzvError(f"{f.label} {shown}: {problem}")


def field_problem(f: Field, value) -> str | None:
    """Why ``value`` does not fit field ``f``, or None."""
    if value is None:
        return None if f.optional else "must be given"
    if f.element is not None:
        if not isinstance(value, list):
            return "must be a list"
        bad = next((v for v in value if number_problem(v)), None) if int in f.element else None
        return None if bad is None else f"item {show(bad)}: {number_problem(bad)}"
    if f.numeric:
        problem = number_problem(value, integer=f.integer, allow_inf=f.spec.allow_inf)
        if problem:
            return problem
        if _out_of_range(f.spec, value):
            return f"must be {'an integer' if f.integer else 'a number'} {_range_text(f.spec)}"
        if f.spec.cap is not None and value > f.spec.cap:
            return f"must be <= {f.spec.cap:g} (cap against exhausting memory or time, docs/cli.md)"
    elif not isinstance(value, f.kinds) or (isinstance(value, bool) and bool not in f.kinds):
        return f"must be {' or '.join(k.__name__ for k in f.kinds)}"
    allowed = f.spec.allowed()
    if allowed is not None and value not in allowed:
        return f"allowed are {', '.join(allowed)}"
    return None


# --------------------------------------------------------------------------- the CLI
def add_flags(parser, cls) -> None:
    """One flag per field of ``cls`` that declares one (its default stays None: "not given")."""
    for f in fields(cls):
        help_text = f.spec.help + (
            "" if f.default is None or f.spec.flag != VALUE else f" (default {_text(f.default)})"
        )
        if f.spec.flag in (ON, OFF):
            parser.add_argument(f.label, action="store_true", help=help_text)
        elif f.spec.flag == VALUE:
            kw: dict[str, Any] = {"help": help_text}
            if f.spec.choices is not None:
                kw["choices"] = f.spec.allowed()
            elif f.numeric:
                kw["type"] = cliutil.number(
                    f.label,
                    low=f.spec.low,
                    high=f.spec.high,
                    low_open=f.spec.low_open,
                    high_open=f.spec.high_open,
                    integer=f.integer,
                    allow_inf=f.spec.allow_inf,
                )
            parser.add_argument(f.label, **kw)


def dest(f: Field) -> str:
    """The ``argparse`` attribute of field ``f``'s flag."""
    return f.label[2:].replace("-", "_")


def given(args, cls) -> dict:
    """The fields whose flags were given in ``args``, as {field: value}."""
    out = {}
    for f in fields(cls):
        value = getattr(args, dest(f)) if f.spec.flag else None
        if f.spec.flag == VALUE and value is not None:
            out[f.name] = value
        elif f.spec.flag in (ON, OFF) and value:
            out[f.name] = f.spec.flag == ON
    return out


# --------------------------------------------------------------------------- the reference
def _text(value) -> str:
    if isinstance(value, float):
        return format(value, "g")
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _allowed_text(f: Field) -> str:
    allowed = f.spec.allowed()
    if allowed is not None:
        return " \\| ".join(f"`{a}`" for a in allowed) + (", or null" if f.optional else "")
    kind = "integer" if f.integer else "number" if f.numeric else " ".join(k.__name__ for k in f.kinds)
    if f.element is not None:
        kind = "list of numbers"
    parts = [kind, _range_text(f.spec) if f.numeric else ""]
    if f.spec.allow_inf:
        parts.append("or inf")
    if f.spec.cap is not None:
        parts.append(f"(cap {f.spec.cap:g})")
    return " ".join(p for p in parts if p) + (", or null" if f.optional else "")


def reference(cls) -> str:
    """The markdown table of every field of ``cls`` (docs/cli.md, between the markers)."""
    rows = ["| field | flag | default | allowed | meaning |", "|---|---|---|---|---|"]
    for f in fields(cls):
        flag = f"`{f.label}`" if f.spec.flag else "(--config only)"
        meaning = f.spec.help.replace("|", "\\|")
        rows.append(f"| `{f.name}` | {flag} | `{_text(f.default)}` | {_allowed_text(f)} | {meaning} |")
    return "\n".join(rows)


def with_reference(text: str, cls) -> str:
    """``text`` (a markdown document) with the part between the markers replaced by the reference."""
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise PrivzvError(f"the document has no {BEGIN} ... {END} block")
    return f"{head}{BEGIN}\n{reference(cls)}\n{END}{tail}"


def main(argv: list[str]) -> int:
    """``python -m privzv.training.schema DOC``: rewrite DOC's TrainConfig reference."""
    from privzv.training.config import TrainConfig

    (doc,) = argv
    path = Path(doc)
    path.write_text(with_reference(path.read_text(), TrainConfig))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
