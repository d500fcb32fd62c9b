"""privzv: differential-privacy accounting for zeroth-order vertical federated learning.

``import privzv`` is cheap and never imports torch; the names below load their module on first
use (type checkers see them through the ``TYPE_CHECKING`` imports). Accounting never imports
dp-accounting (about 2 s to import); only the DpEvent export does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from privzv.accounting import Result, releases_per_record
    from privzv.api import account, account_all, calibrate, calibrate_all, epsilon, noise_multiplier
    from privzv.defaults import DEFAULTS
    from privzv.dpevent import to_dp_event
    from privzv.errors import PrivzvError
    from privzv.ledger import BudgetExceeded, PrivacyLedger
    from privzv.registry import Accountant, register_accountant
    from privzv.release import HeadUpdate, Release, Schedule

    ACCOUNTANTS: tuple[str, ...]
    __version__: str

_LAZY = {
    "PrivzvError": "privzv.errors",
    "Release": "privzv.release",
    "Schedule": "privzv.release",
    "HeadUpdate": "privzv.release",
    "DEFAULTS": "privzv.defaults",
    "ACCOUNTANTS": "privzv.accounting",
    "Accountant": "privzv.registry",
    "register_accountant": "privzv.registry",
    "Result": "privzv.accounting",
    "releases_per_record": "privzv.accounting",
    "noise_multiplier": "privzv.api",
    "epsilon": "privzv.api",
    "calibrate": "privzv.api",
    "account": "privzv.api",
    "calibrate_all": "privzv.api",
    "account_all": "privzv.api",
    "to_dp_event": "privzv.dpevent",
    "PrivacyLedger": "privzv.ledger",
    "BudgetExceeded": "privzv.ledger",
}

__all__ = ["__version__", *_LAZY]


def _version() -> str:
    """The installed distribution's version (pyproject.toml is its one source)."""
    from importlib import metadata

    try:
        return metadata.version("privzv")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "0+unknown"


def __getattr__(name: str) -> object:
    if name == "__version__":
        return _version()
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'privzv' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
