"""The ``privzv`` command: privacy subcommands here, ``train`` and ``attack`` dispatched lazily."""
from __future__ import annotations

import sys
from typing import Sequence

from privzv import cliutil
from privzv.errors import PrivzvError

LAZY = {
    "train": ("training.cli", "train"),
    "attack": ("attacks.cli", "attack"),
}


def _main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv and argv[0] in LAZY:
        import importlib

        module, _ = LAZY[argv[0]]
        return importlib.import_module(module).main(argv[1:])
    from privzv import commands

    parser = commands.build_parser()
    if not argv:
        parser.print_help()
        return 2
    args = parser.parse_args(argv)
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point."""
    return cliutil.run(_main, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
