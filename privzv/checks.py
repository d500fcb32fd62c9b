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
from typing import Any, Sequence

from privzv.errors import PrivzvError

# Caps on sizes: beyond them a question would exhaust memory or time, not answer.
MAX_DEVICES = 100_000              # tuples of per-device counts are built
MAX_STEPS = 10 ** 15               # T; epochs of a pooled head are walked one by one (below)
MAX_DATASET = 10 ** 15             # D in a closed-form question
MAX_LEDGER_CELLS = 10 ** 8         # a PrivacyLedger keeps devices x records counts (8 bytes each)
MAX_POOLED_EPOCHS = 10 ** 6        # a pooled DP head's K sums one term per epoch


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    parts = ([] if lo is None else [f"{'>' if lo_open else '>='} {lo:g}"]) + (
        [] if hi is None else [f"{'<' if hi_open else '<='} {hi:g}"])
    return " and ".join(parts)


def number(name: str, value: Any, *, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False, hi_open: bool = False, allow_inf: bool = False) -> float:
    """``value`` as a float, or PrivzvError naming ``name``: an int (not a bool), a float or a
    numpy scalar, not NaN, finite unless ``allow_inf``, inside [lo, hi] (open ends as asked)."""
    where = _range_text(lo, hi, lo_open, hi_open)
    allowed = f"a number{' ' + where if where else ''}"
    if not _is_number(value):
        raise PrivzvError(f"{name}={value!r}: must be {allowed}")
    try:
        x = float(value)
    except OverflowError:
        raise PrivzvError(f"{name}={short(value)}: beyond the floating-point range; must be "
                          f"{allowed}") from None
    if math.isnan(x) or (math.isinf(x) and not allow_inf):
        raise PrivzvError(f"{name}={value!r}: must be a finite number{' ' + where if where else ''}")
    bad_lo = lo is not None and (x <= lo if lo_open else x < lo)
    bad_hi = hi is not None and (x >= hi if hi_open else x > hi)
    if bad_lo or bad_hi:
        raise PrivzvError(f"{name}={value!r}: must be {allowed}")
    return x


def integer(name: str, value: Any, *, lo: int | None = None, cap: int | None = None,
            why: str = "") -> int:
    """``value`` as an int, or PrivzvError naming ``name``: an int or numpy integer (not a bool,
    not a float), >= ``lo``; above ``cap`` it is refused with the cap (and ``why``) named."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        more = "" if lo is None else f" >= {lo}"
        raise PrivzvError(f"{name}={short(value)}: must be an integer{more}")
    n = int(value)
    if lo is not None and n < lo:
        raise PrivzvError(f"{name}={n}: must be an integer >= {lo}")
    if cap is not None and n > cap:
        raise PrivzvError(f"{name}={short(n)}: above the cap {cap:.0e}{' (' + why + ')' if why else ''}")
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
        raise PrivzvError(f"{name}={given!r}: {what} = {derived:g} is outside the floating-point "
                          "range (too small or too large)")
    return derived


def one_of(names: Sequence[str], values: Sequence[Any]) -> Any:
    """The one value given (not None) among aliases ``names`` (e.g. epsilon and target_epsilon),
    None when none is; PrivzvError when several are."""
    given = [(n, v) for n, v in zip(names, values) if v is not None]
    if len(given) > 1:
        raise PrivzvError(f"{' and '.join(n for n, _ in given)}: give one of "
                          f"{', '.join(names)}, not several")
    return given[0][1] if given else None


def short(value: Any) -> str:
    """repr of ``value``, cut to 40 characters (a 10**70 is not printed in full)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
