"""privzv: differential-privacy accounting for zeroth-order vertical federated learning.

``import privzv`` is cheap and never imports torch; the names below load their module on first
use. Accounting never imports dp-accounting (about 2 s to import); only the DpEvent export does.
"""

__version__ = "0.1.0"

_LAZY = {
    "PrivzvError": "privzv.errors",
    "Release": "privzv.release",
    "Schedule": "privzv.release",
    "ACCOUNTANTS": "privzv.accounting",
    "Result": "privzv.accounting",
    "account": "privzv.accounting",
    "calibrate": "privzv.accounting",
    "account_all": "privzv.accounting",
    "calibrate_all": "privzv.accounting",
    "releases_per_record": "privzv.accounting",
    "noise_multiplier": "privzv.api",
    "epsilon": "privzv.api",
    "to_dp_event": "privzv.dpevent",
    "PrivacyLedger": "privzv.ledger",
    "BudgetExceeded": "privzv.ledger",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'privzv' has no attribute {name!r}")
