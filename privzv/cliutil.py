"""Shared CLI conventions: one-line errors with exit code 2 (bad input) or 1 (a run that failed),
strict JSON output (no NaN/Infinity tokens), progress, atomic outputs."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from privzv import checks
from privzv.errors import PrivzvError
from privzv.extras import missing_extra


class BadValue(PrivzvError, argparse.ArgumentTypeError):
    """A flag's value is out of range; argparse keeps this message (it rewrites plain ValueErrors)."""


class Failed(Exception):
    """A run that started and could not finish (e.g. training diverged): one line, exit code 1."""


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit code 2 (no usage dump)."""

    def error(self, message: str):  # noqa: D102 - argparse API
        # "argument --x: --x '3': must be ..." -> "--x '3': must be ..."
        raise PrivzvError(re.sub(r"^argument (\S+): (?=\1 )", "", message))

    def one_line_usage(self, more: Sequence[str] = ()) -> PrivzvError:
        """The error for a command given no arguments: its usage and subcommands (with ``more``)
        on one line."""
        commands = [
            name
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        ] + list(more)
        listed = f"; commands: {', '.join(commands)}" if commands else ""
        return PrivzvError(" ".join(self.format_usage().split()) + f"{listed} (see {self.prog} --help)")


def run(main: Callable[[Sequence[str]], int], argv: Sequence[str], prog: str = "privzv") -> int:
    """Run ``main``; turn PrivzvError (bad input) and a missing extra (:mod:`privzv.extras`) into
    one stderr line and exit code 2, and
    :class:`Failed` (the run itself failed) into one stderr line and exit code 1; Ctrl-C (or a
    stop signal) into exit code 128 + the signal's number. A deleted working directory or a
    closed stdout is refused first (exit 2); output that cannot be written to stdout (a full
    device) is exit code 1."""
    try:
        _check_process()
        code = main(argv)
        _flush_stdout()  # a full device fails here, not at exit
        return code
    except PrivzvError as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Failed as exc:
        print(f"{prog}: failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:  # an optional package, e.g. torch in a core install
        if (error := missing_extra(exc)) is None:
            raise
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or privzv.training.stopping.Stop (its signal's code)
        print(f"{prog}: {getattr(exc, 'reason', 'interrupted')}", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    except BrokenPipeError:  # e.g. `privzv calibrate ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except StdoutFailed as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        print(f"{prog}: failed: {_one_line(exc)}", file=sys.stderr)
        return 1


class StdoutFailed(OSError):
    """stdout could not take the output (e.g. ``> /dev/full``)."""


def _check_process() -> None:
    """Refuse to start where the output or relative paths could not work: a working directory
    that was deleted (torch's MKL would abort at import), a closed stdout."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise PrivzvError(
            "the working directory no longer exists (it was deleted); cd to a folder that exists"
        ) from None
    if sys.stdout is None:
        raise PrivzvError("stdout is closed; redirect it to a file or /dev/null instead") from None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def number(
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    allow_inf: bool = False,
) -> Callable[[str], float]:
    """An argparse ``type`` that reads a number and checks it with :mod:`privzv.checks` (the
    Python API's rules), naming the flag and its text in its error. An integer flag's ``high``
    is a cap (memory or time) and is named as one."""

    def parse(text: str):
        shown = f" {text!r}"
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise BadValue(f"{name}{shown}: must be {'an integer' if integer else 'a number'}") from None
        try:
            if integer:
                return checks.integer(
                    name,
                    value,
                    lo=None if low is None else int(low),
                    cap=None if high is None else int(high),
                    shown=shown,
                )
            return checks.number(
                name,
                value,
                lo=low,
                hi=high,
                lo_open=low_open,
                hi_open=high_open,
                allow_inf=allow_inf,
                shown=shown,
            )
        except PrivzvError as exc:
            raise BadValue(str(exc)) from None

    return parse


SECRET_SEED_BYTES = 64  # a seed file holds one integer below 2^63 (19 digits) and whitespace


def _secret_seed_file(text: str) -> int:
    """The secret seed in the file ``text`` names: one integer in [0, 2^63), the file regular and
    readable by its owner only (like ssh's private keys: a seed others can read is no secret)."""
    flag = "--secret-seed-file"
    try:
        info = os.stat(text)
        if not stat.S_ISREG(info.st_mode):
            raise BadValue(f"{flag} {text!r}: not a regular file")
        if info.st_mode & 0o077:
            raise BadValue(
                f"{flag} {text!r}: readable or writable by other users (mode {stat.S_IMODE(info.st_mode):04o});"
                f" chmod 600 it"
            )
        with open(text, "rb") as fh:
            raw = fh.read(SECRET_SEED_BYTES + 1)
    except FileNotFoundError:
        raise BadValue(f"{flag} {text!r}: no such file") from None
    except OSError as exc:
        raise BadValue(f"{flag} {text!r}: cannot be read ({exc.strerror})") from None
    words = raw.split() if len(raw) <= SECRET_SEED_BYTES else []
    if len(words) != 1 or not words[0].isdigit() or int(words[0]) >= 2**63:
        raise BadValue(f"{flag} {text!r}: must hold one integer in [0, 2^63) and nothing else")
    return int(words[0])


def add_secret_seed(parser: argparse.ArgumentParser, help: str) -> None:
    """``--secret-seed N`` and ``--secret-seed-file FILE`` (one of them, both into
    ``args.secret_seed``). A number on the command line is visible to every local user in the
    process list; the file (mode 0600) keeps it from them."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--secret-seed",
        type=number("--secret-seed", low=0, high=2**63 - 1, integer=True),
        help=help + "; other local users can read it in the process list: prefer --secret-seed-file",
    )
    group.add_argument(
        "--secret-seed-file",
        dest="secret_seed",
        metavar="FILE",
        type=_secret_seed_file,
        help="the same seed read from FILE (one integer, the file readable by its owner only)",
    )


def emit(obj: dict, as_json: bool, human: Callable[[dict], str]) -> None:
    """Print one JSON object (``--json``, strict: see :func:`dumps`) or the human rendering of it."""
    with _stdout_errors():
        print(dumps(obj) if as_json else human(obj))
        sys.stdout.flush()


def _flush_stdout() -> None:
    with _stdout_errors():
        sys.stdout.flush()


@contextlib.contextmanager
def _stdout_errors():
    """A write to stdout that fails (other than a reader that left) as :class:`StdoutFailed`."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutFailed(f"stdout: the output could not be written ({exc.strerror or exc})") from None


def dumps(obj, *, default: Callable | None = None, **kwargs) -> str:
    """Strict JSON: arrays and tensors as lists, paths as strings, and a non-finite float as the
    string "inf", "-inf" or "nan" (JSON has no such numbers; no NaN/Infinity token is written).
    ``default`` converts other objects (as in ``json.dumps``); without it they are a TypeError."""
    return json.dumps(strict(obj, default), allow_nan=False, **kwargs)


def strict(value, default: Callable | None = None):
    """``value`` with every non-finite float replaced by its string (see :func:`dumps`)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {k: strict(v, default) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v, default) for v in value]
    if hasattr(value, "tolist"):
        return strict(value.tolist(), default)
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if default is not None:
        return strict(default(value))
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def read_json(path: str | os.PathLike, name: str, *, max_bytes: int | None = None):
    """The strict JSON in ``path`` (no NaN/Infinity token: privzv never writes one); at most
    ``max_bytes`` when given. Anything else is a one-line PrivzvError that starts with ``name``:
    no such file, a directory, unreadable, too large, not UTF-8, not JSON (with the parser's
    reason and line). A FIFO, device or socket is refused before it is opened (no hang)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path):
            raise PrivzvError(f"{name}: not a regular file (a FIFO, device or socket)")
        with open(path, "rb") as fh:
            raw = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise PrivzvError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise PrivzvError(f"{name}: is a directory, not a JSON file") from None
    except OSError as exc:
        raise PrivzvError(f"{name}: cannot be read ({exc.strerror})") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise PrivzvError(f"{name}: larger than {max_bytes} bytes")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise PrivzvError(f"{name}: not a UTF-8 text file") from None
    except json.JSONDecodeError as exc:
        raise PrivzvError(f"{name}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise PrivzvError(f"{name}: not JSON ({reason})") from None


def _no_constant(token: str):
    raise ValueError(f"{token} is not a JSON number (use null for an infinite epsilon)")


def progress(
    iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", quiet: bool = False
):
    """A tqdm bar on a terminal; silent under --json (``quiet``) or when stderr is piped."""
    from tqdm.auto import tqdm

    disable = quiet or not sys.stderr.isatty()
    return tqdm(iterable, total=total, desc=desc, disable=disable, leave=False, dynamic_ncols=True)


@contextlib.contextmanager
def atomic_output_dir(
    path: str | os.PathLike, *, resume: bool = False, replaces: str | None = None
) -> Iterator[Path]:
    """Write a results folder atomically: build it beside ``path``, rename it into place on success.

    On any error the partial folder is removed, so nothing half-written is left. With ``resume``
    the existing folder is copied first and replaced on success. An existing non-empty folder is
    refused unless it holds the file ``replaces`` (an earlier result of the same command), which
    is then replaced on success.
    """
    final = Path(path)
    if final.exists() and not final.is_dir():
        raise PrivzvError(f"--out {str(final)!r}: exists and is not a folder")
    earlier = replaces is not None and (final / replaces).is_file()
    if final.exists() and not (resume or earlier) and any(final.iterdir()):
        raise PrivzvError(f"--out {str(final)!r}: folder exists and is not empty (choose a new one)")
    existing = next(p for p in final.parents if p.exists() or p == Path(p.anchor))
    if not existing.is_dir():
        raise PrivzvError(f"--out {str(final)!r}: {str(existing)!r} is a file, not a folder")
    created = _first_missing(final.parent)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    except OSError as exc:
        _remove(created)
        raise PrivzvError(f"--out {str(final)!r}: cannot create it ({exc.strerror or exc})") from None
    try:
        if resume and final.exists():
            shutil.copytree(final, work, dirs_exist_ok=True)
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        _remove(created)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(work, final)


def _first_missing(folder: Path) -> Path | None:
    """The outermost ancestor of ``folder`` (or itself) that does not exist yet, if any."""
    missing = None
    for candidate in (folder, *folder.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing = candidate
    return missing


def _remove(created: Path | None) -> None:
    """Remove the folders :func:`atomic_output_dir` created, if they are still empty of files."""
    if created is not None and created.is_dir() and not any(p.is_file() for p in created.rglob("*")):
        shutil.rmtree(created, ignore_errors=True)
