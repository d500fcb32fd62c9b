"""The ``privzv`` command: privacy subcommands here; ``train``, ``attack`` and ``demo`` are
dispatched lazily to the layers above (privzv itself never imports training or attacks)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from privzv import cliutil

LAZY = {
    "train": "privzv.training.cli",
    "attack": "privzv.attacks.cli",
    "demo": "privzv.attacks.demo",
}
LAZY_HELP = """further commands (each has --help):
  train     train DPZV or a baseline on vertically partitioned data
  attack    attack a training run, audit a release, run the scalar-vs-vector study
  demo      the main job on embedded data: accounting, audit, DPZV training"""


def _main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv and argv[0] in LAZY:
        return importlib.import_module(LAZY[argv[0]]).main(argv[1:])
    from privzv import commands

    parser = commands.build_parser()
    parser.epilog = LAZY_HELP
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    if not argv:
        raise parser.one_line_usage(list(LAZY))
    args = parser.parse_args(argv)
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point."""
    return cliutil.run(_main, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
