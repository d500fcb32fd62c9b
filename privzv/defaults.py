"""The defaults of every entry point, declared once: ``privzv.noise_multiplier`` / ``epsilon`` /
``calibrate`` / ``account`` and their ``_all`` variants, :class:`privzv.release.Release` and
:class:`privzv.release.Schedule`, the ledger, ``privzv calibrate`` / ``account`` and ``privzv
attack audit``. The threat is the device's (no amplification: DPZV's devices choose their
batches), the relation replace-one (the paper's 2C/B), the accountant the smallest rigorous
bound."""

from __future__ import annotations

DEFAULTS = {"threat": "device", "neighbors": "replace-one", "accountant": "best"}
THREAT: str = DEFAULTS["threat"]
NEIGHBORS: str = DEFAULTS["neighbors"]
ACCOUNTANT: str = DEFAULTS["accountant"]
