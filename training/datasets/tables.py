"""``VerticalDataset`` from a CSV or Parquet table: a column list per device and a label column.

A table is read whole (at most ``privzv.training.data.MAX_FILE_BYTES``), checked (a header of
distinct names, every row as wide as it, numbers in every feature cell, no missing value, labels in
the public label set), then built by :func:`privzv.training.datasets.arrays.from_arrays`: a seeded
80/20 split unless a test table is given, public ranges or the values as they are.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from privzv.errors import PrivzvError
from privzv.training.data import MAX_FILE_BYTES, VerticalDataset
from privzv.training.datasets import arrays


@dataclasses.dataclass
class Table:
    """A table's columns (header order), each a 1-D array, and how to name a row in errors."""

    path: Path
    columns: dict[str, np.ndarray]
    row_name: Callable[[int], str]

    @property
    def records(self) -> int:
        return len(next(iter(self.columns.values())))

    def numbers(self, name: str) -> np.ndarray:
        """Column ``name`` as float64; a cell that is not a number is refused, naming it."""
        column = self.columns[name]
        if np.issubdtype(column.dtype, np.number) and column.dtype != bool:
            return column.astype(np.float64)
        try:
            return column.astype(np.float64)
        except (TypeError, ValueError):
            for i, cell in enumerate(column):
                try:
                    float(cell)
                except (TypeError, ValueError):
                    raise PrivzvError(
                        f"{self.path}: {self.row_name(i)}, column {name!r}: {cell!r} is not a number"
                    ) from None
            raise


def _checked_file(path, flag: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise PrivzvError(f"{flag} {str(path)!r}: not a file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise PrivzvError(f"{flag} {str(path)!r}: larger than {MAX_FILE_BYTES} bytes")
    return path


def read_csv(path, flag: str = "--data-file", header: Sequence[str] | None = None) -> Table:
    """A CSV file (RFC 4180 quoting, UTF-8): its first row names the columns, unless ``header``
    gives them (a file without a header row). Blank lines are skipped."""
    path = _checked_file(path, flag)
    rows, lines = [], []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, strict=True)
            names = list(header) if header is not None else next(reader, None)
            if not names:
                raise PrivzvError(f"{path}: empty file (no header row)")
            for row in reader:
                if not row:
                    continue
                if len(row) != len(names):
                    raise PrivzvError(
                        f"{path}: line {reader.line_num}: {len(row)} fields, the header has {len(names)}"
                    )
                rows.append(row)
                lines.append(reader.line_num)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise PrivzvError(
            f"{path}: not a readable UTF-8 CSV file ({' '.join(str(exc).split())[:200]})"
        ) from None
    names = [n.strip() for n in names]
    _distinct(names, path)
    if not rows:
        raise PrivzvError(f"{path}: no records")
    cells = np.array(rows, dtype=object)
    return Table(path, {n: cells[:, j] for j, n in enumerate(names)}, lambda i: f"line {lines[i]}")


def read_parquet(path, flag: str = "--data-file") -> Table:
    """A Parquet file (needs pyarrow: the extra ``privzv[tables]``); null cells are refused."""
    path = _checked_file(path, flag)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError as exc:
        from privzv.extras import missing_extra

        raise (missing_extra(exc) or exc) from None
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise PrivzvError(
            f"{path}: not a readable Parquet file ({' '.join(str(exc).split())[:200]})"
        ) from None
    _distinct(table.column_names, path)
    if table.num_rows == 0:
        raise PrivzvError(f"{path}: no records")
    columns = {}
    for name, column in zip(table.column_names, table.columns):
        if column.null_count:
            raise PrivzvError(f"{path}: column {name!r} has {column.null_count} missing values")
        numeric = pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
        columns[name] = column.to_numpy() if numeric else np.array(column.to_pylist(), dtype=object)
    return Table(path, columns, lambda i: f"row {i}")


def _distinct(names: Sequence[str], path: Path) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise PrivzvError(f"{path}: column {name!r} appears twice in the header")
        seen.add(name)


READERS = {"csv": read_csv, "parquet": read_parquet}


def from_table(
    path,
    *,
    label_column: str,
    classes,
    device_columns: Sequence[Sequence[str]] | None = None,
    devices: int | None = None,
    ranges: Mapping[str, tuple[float, float]] | tuple[float, float] | None = None,
    test_path=None,
    seed: int = 0,
    format: str = "csv",
    name: str | None = None,
) -> VerticalDataset:
    """A ``VerticalDataset`` from a CSV or Parquet file (``format``).

    ``device_columns``: the feature columns of each device (default: every column but the label,
    in ``devices`` contiguous groups). ``classes``: the public label set (labels are matched as
    text) or a count K of labels 0..K-1. ``ranges``: public (lo, hi) per column name (``'*'``: the
    others) or one pair for all; default: the values as they are. ``test_path``: a test table with
    the same columns, else a seeded 80/20 split of ``path``."""
    if format not in READERS:
        raise PrivzvError(f"format {format!r}: allowed are {', '.join(READERS)}")
    name = name or format
    table = READERS[format](path)
    features = _feature_columns(table, label_column, device_columns, devices)
    flat = [c for group in features for c in group]
    ids, at = [], 0
    for group in features:
        ids.append(list(range(at, at + len(group))))
        at += len(group)
    if isinstance(ranges, Mapping):
        unknown = [c for c in ranges if c != "*" and c not in flat]
        if unknown:
            raise PrivzvError(f"--ranges: {unknown[0]!r} is not a feature column ({', '.join(flat)})")
        ranges = {flat.index(c) if c != "*" else c: pair for c, pair in ranges.items()}
    x = np.stack([table.numbers(c) for c in flat], axis=1)
    test_x = test_y = None
    if test_path is not None:
        test = READERS[format](test_path, "--test-file")
        missing = [c for c in (*flat, label_column) if c not in test.columns]
        if missing:
            raise PrivzvError(
                f"{test.path}: no column {missing[0]!r} (the test table needs the same columns)"
            )
        test_x = np.stack([test.numbers(c) for c in flat], axis=1)
        test_y = test.columns[label_column]
    ds = arrays.from_arrays(
        x,
        table.columns[label_column],
        classes=classes,
        columns=ids,
        x_test=test_x,
        y_test=test_y,
        seed=seed,
        ranges=ranges,
        name=name,
    )
    ds.partition = "columns " + " | ".join(",".join(g) for g in features)
    return ds


def _feature_columns(table: Table, label, groups, devices) -> list[list[str]]:
    if label not in table.columns:
        raise PrivzvError(f"{table.path}: no label column {label!r}; columns are {', '.join(table.columns)}")
    if groups is None:
        others = [c for c in table.columns if c != label]
        devices = devices or 1
        if not others or devices > len(others):
            raise PrivzvError(
                f"devices {devices}: {table.path} has {len(others)} feature columns, so at most {len(others)} devices"
            )
        return [[others[i] for i in part] for part in np.array_split(np.arange(len(others)), devices)]
    groups = [list(g) for g in groups]
    if devices is not None and len(groups) != devices:
        raise PrivzvError(
            f"--device-columns: {len(groups)} groups for --devices {devices} (one group per device)"
        )
    flat = [c for g in groups for c in g]
    for column in flat:
        if column not in table.columns:
            raise PrivzvError(f"{table.path}: no column {column!r}; columns are {', '.join(table.columns)}")
        if column == label:
            raise PrivzvError(f"--device-columns: {column!r} is the label column")
    if len(set(flat)) != len(flat) or any(not g for g in groups):
        raise PrivzvError("--device-columns: every device needs its own columns (a column is listed twice)")
    return groups


def load(format: str):
    """The registered loader of ``--dataset csv`` / ``parquet``: the config's strings parsed."""

    def loader(devices, seed, root, records, *, ranges=None, **table):
        return from_table(
            **table_arguments(format, **table),
            devices=devices,
            ranges=arrays.parse_ranges(ranges) if ranges else None,
            seed=seed,
            format=format,
        )

    return loader


def table_arguments(
    dataset: str, data_file=None, test_file=None, device_columns=None, label_column=None, labels=None
) -> dict:
    """The table flags of ``--dataset dataset`` as a builder's arguments; a missing one is
    refused, naming its flag."""
    for flag, value in (("--data-file", data_file), ("--label-column", label_column), ("--labels", labels)):
        if value is None:
            raise PrivzvError(f"--dataset {dataset}: needs {flag} (docs/data.md)")
    return dict(
        path=data_file,
        label_column=label_column,
        classes=arrays.parse_list(labels, "--labels"),
        device_columns=arrays.parse_groups(device_columns) if device_columns else None,
        test_path=test_file,
    )
