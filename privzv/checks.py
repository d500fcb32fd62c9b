"""One validation layer for arguments: the Python API, the Release/Schedule constructors, the
ledger and the CLI's flags check their values here, so every entry point refuses the same values
with the same one-line :class:`PrivzvError` naming the value and what is allowed.

Rules: a bool is never a number; numpy integer and floating scalars are numbers; an integer
beyond the float range, NaN and (unless allowed) inf are refused; a size beyond a named cap
(memory or time) is refused with the cap named; a derived quantity (a sensitivity, a noise
multiplier) that under- or overflows is refused by the value that caused it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from privzv.errors import PrivzvError

# Caps on sizes: beyond them a question would exhaust memory or time, not answer.
MAX_DEVICES = 100_000  # tuples of per-device counts are built
MAX_STEPS = 10**15  # T; epochs of a pooled head are walked one by one (below)
MAX_DATASET = 10**15  # D in a closed-form question
MAX_LEDGER_CELLS = 10**8  # a PrivacyLedger keeps devices x records counts (8 bytes each)
MAX_POOLED_EPOCHS = 10**6  # a pooled DP head's K sums one term per epoch


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    parts = ([] if lo is None else [f"{'>' if lo_open else '>='} {lo:g}"]) + (
        [] if hi is None else [f"{'<' if hi_open else '<='} {hi:g}"]
    )
    return " and ".join(parts)


def _label(name: str, value: Any, shown: str | None) -> str:
    """How a message names the value: ``name=value`` (Python), or ``name`` + ``shown`` (a
    flag and its text, e.g. ``--clip '5e-324'``)."""
    return f"{name}{shown}" if shown is not None else f"{name}={short(value)}"


def number(
    name: str,
    value: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    allow_inf: bool = False,
    shown: str | None = None,
) -> float:
    """``value`` as a float, or PrivzvError naming ``name`` (and ``shown``, :func:`_label`): an
    int (not a bool), a float or a numpy scalar, not NaN, finite unless ``allow_inf``, inside
    [lo, hi] (open ends as asked)."""
    where = _range_text(lo, hi, lo_open, hi_open)
    allowed = f"a {'' if allow_inf else 'finite '}number{' ' + where if where else ''}"
    label = _label(name, value, shown)
    if not _is_number(value):
        raise PrivzvError(f"{label}: must be {allowed}")
    try:
        x = float(value)
    except OverflowError:
        raise PrivzvError(f"{label}: beyond the floating-point range; must be {allowed}") from None
    bad_lo = lo is not None and (x <= lo if lo_open else x < lo)
    bad_hi = hi is not None and (x >= hi if hi_open else x > hi)
    if math.isnan(x) or (math.isinf(x) and not allow_inf) or bad_lo or bad_hi:
        raise PrivzvError(f"{label}: must be {allowed}")
    return x


def integer(
    name: str,
    value: Any,
    *,
    lo: int | None = None,
    cap: int | None = None,
    why: str = "",
    shown: str | None = None,
) -> int:
    """``value`` as an int, or PrivzvError naming ``name`` (and ``shown``): an int or numpy
    integer (not a bool, not a float), >= ``lo``; above ``cap`` it is refused with the cap (and
    ``why``) named."""
    label = _label(name, value, shown)
    n = int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None
    if n is None or (lo is not None and n < lo):
        raise PrivzvError(f"{label}: must be an integer{'' if lo is None else f' >= {lo}'}")
    if cap is not None and n > cap:
        raise PrivzvError(f"{label}: above the cap {cap:.0e}{' (' + why + ')' if why else ''}")
    return n


def choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``, else PrivzvError listing them."""
    if not (isinstance(value, str) and value in allowed):
        raise PrivzvError(f"{name}={short(value)}: allowed are {', '.join(allowed)}")
    return value


def instance(name: str, value: Any, cls: type, what: str) -> Any:
    """``value`` if it is a ``cls``, else PrivzvError saying it must be ``what``."""
    if not isinstance(value, cls):
        raise PrivzvError(f"{name}={short(value)}: must be {what}")
    return value


def representable(name: str, given: Any, derived: float, what: str) -> float:
    """``derived`` (computed from ``given``) if it is finite and so far above 0 that its square
    is not 0 (a noise multiplier is squared and inverted), else PrivzvError: ``given`` makes
    ``what`` under- or overflow."""
    if not (0.0 < derived < math.inf and derived * derived > 0.0):
        raise PrivzvError(
            f"{name}={given!r}: {what} = {derived:g} is outside the floating-point "
            "range (too small or too large)"
        )
    return derived


def one_of(names: Sequence[str], values: Sequence[Any]) -> Any:
    """The one value given (not None) among aliases ``names`` (e.g. epsilon and target_epsilon),
    None when none is; PrivzvError when several are."""
    given = [(n, v) for n, v in zip(names, values) if v is not None]
    if len(given) > 1:
        raise PrivzvError(f"{' and '.join(n for n, _ in given)}: give one of {', '.join(names)}, not several")
    return given[0][1] if given else None


def short(value: Any) -> str:
    """repr of ``value``, cut to 40 characters (a 10**70 is not printed in full)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
