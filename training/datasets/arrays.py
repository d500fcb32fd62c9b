"""``VerticalDataset`` from arrays, and the rules every builder of a user's data shares.

Everything here is data-independent: the train/test split is a seeded permutation of record
indices (it depends on the record count and the seed only), labels map through a public label set
given by the user (sorted onto 0..K-1, never read from the data), and features are scaled by
public ranges the user declares (else kept as they are), never by statistics of the records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from privzv.errors import PrivzvError
from privzv.training import seeds
from privzv.training.data import TEST_FRACTION, Scaling, VerticalDataset, _check_records, _labels, _range

# ------------------------------------------------------------------ parsing the config's strings


def parse_groups(text: str, flag: str = "--device-columns") -> list[list[str]]:
    """``'a,b;c,d'`` -> ``[['a', 'b'], ['c', 'd']]`` (``;`` between devices, ``,`` within)."""
    groups = [[c.strip() for c in group.split(",")] for group in text.split(";")]
    if any(not c for group in groups for c in group):
        raise PrivzvError(f"{flag} {text!r}: an empty column name; write 'a,b;c,d' (';' between devices)")
    return groups


def parse_list(text: str, flag: str) -> list[str]:
    """``'a,b'`` -> ``['a', 'b']`` (no empty items)."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise PrivzvError(f"{flag} {text!r}: an empty item; write comma-separated values")
    return items


def parse_ranges(text: str) -> dict[str, tuple[float, float]]:
    """``'a=0:1,*=-5:5'`` -> ``{'a': (0.0, 1.0), '*': (-5.0, 5.0)}`` (``*``: every other column)."""
    ranges = {}
    for item in parse_list(text, "--ranges"):
        name, eq, bounds = item.partition("=")
        lo, colon, hi = bounds.strip().partition(":")
        try:
            pair = (float(lo), float(hi))
        except ValueError:
            pair = None
        if not eq or not colon or pair is None:
            raise PrivzvError(f"--ranges {item!r}: write COLUMN=LO:HI ('*=LO:HI' for every column)")
        ranges[name.strip()] = pair
    return ranges


# ------------------------------------------------------------------ labels, split, scaling


def label_map(values: Sequence, classes, where: str) -> tuple[np.ndarray, int]:
    """Labels as int64 0..K-1 and K (record i: the i-th value, e.g. a table's i-th data row). ``classes``: an int K (labels already 0..K-1), or the public
    label set (any order; sorted, numerically where every label is a number). A value outside it
    is refused, naming it."""
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        if classes < 1:
            raise PrivzvError(f"{where}: classes {classes}: must be >= 1")
        return np.asarray(values), int(classes)
    if isinstance(classes, str) or not isinstance(classes, Sequence) or len(classes) == 0:
        raise PrivzvError(f"{where}: classes {classes!r}: give a count K or the public label set (a list)")
    public = sorted({str(c) for c in classes}, key=_label_key)
    if len(public) != len(classes):
        raise PrivzvError(f"{where}: label set {list(classes)!r} repeats a label")
    index = {label: i for i, label in enumerate(public)}
    y = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        label = str(value).strip()
        if label not in index:
            raise PrivzvError(
                f"{where}: label {label!r} of record {i} is not in the label set {', '.join(public)}"
            )
        y[i] = index[label]
    return y, len(public)


def _label_key(label: str):
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def split_indices(records: int, seed: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices: a permutation seeded by ``seed`` alone, its first 20% the test split
    (data-independent: it depends on the record count and the seed only)."""
    if records < 2:
        raise PrivzvError(f"{where}: {records} records; a train/test split needs at least 2")
    order = np.random.default_rng(seeds.derive(seed, "split")).permutation(records)
    cut = max(1, round(records * TEST_FRACTION))
    return np.sort(order[cut:]), np.sort(order[:cut])


def scaling(columns: Sequence, ranges) -> Scaling:
    """The fixed map of ``columns``: a column with a declared (lo, hi) is clipped and mapped onto
    [-1, 1]; one without is kept as it is. ``ranges``: None, one (lo, hi) for every column, or a
    mapping column -> (lo, hi), ``'*'`` for the others (columns it names elsewhere are ignored)."""
    if ranges is None:
        ranges = {}
    elif not isinstance(ranges, Mapping):
        ranges = {"*": ranges}
    default = ranges.get("*", (-np.inf, np.inf))
    pairs = [_pair(ranges.get(c, default), c) for c in columns]
    lo, hi = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    ranged = np.isfinite(lo) & np.isfinite(hi)
    declared = _range(np.where(ranged, lo, -1.0), np.where(ranged, hi, 1.0), "")
    return Scaling(
        lo,
        hi,
        np.where(ranged, declared.centre, 0.0),
        np.where(ranged, declared.scale, 1.0),
        "declared ranges mapped onto [-1, 1]" if ranged.any() else "values as they are",
    )


def _pair(bounds, column) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise PrivzvError(f"ranges: column {column!r}: {bounds!r} is not a (lo, hi) pair") from None
    if not lo < hi or np.isnan(lo) or np.isnan(hi) or (np.isfinite(lo) != np.isfinite(hi)):
        raise PrivzvError(f"ranges: column {column!r}: ({lo:g}, {hi:g}) needs finite lo < hi")
    return lo, hi


# ------------------------------------------------------------------ from arrays


def from_arrays(
    x,
    y,
    *,
    classes,
    devices: int | None = None,
    columns: Sequence[Sequence[int]] | None = None,
    x_test=None,
    y_test=None,
    seed: int = 0,
    ranges=None,
    name: str = "arrays",
) -> VerticalDataset:
    """A ``VerticalDataset`` from numpy arrays (or anything ``np.asarray`` takes).

    ``x``: one array per device (``[N, ...]`` each), or one ``[N, F]`` array with ``columns`` (a
    list of column indices per device) or ``devices`` (its columns in that many contiguous groups).
    ``y``: N labels, mapped by ``classes`` (a count K, or the public label set; see
    :func:`label_map`). ``x_test``/``y_test`` in the same form, else a seeded 80/20 split
    (:func:`split_indices`). ``ranges``: public (lo, hi) per column index, or one pair for every
    value (see :func:`scaling`); default: the values as they are, as float32."""
    train_parts = _device_parts(x, devices, columns, name)
    if (x_test is None) != (y_test is None):
        raise PrivzvError(f"{name}: give both x_test and y_test, or neither (a seeded 80/20 split)")
    y_train, k = label_map(y, classes, name if x_test is None else f"{name} train")
    if x_test is None:
        train, test = split_indices(len(train_parts[0]), seed, name)
        if len(y_train) != len(train) + len(test):
            raise PrivzvError(f"{name}: {len(y_train)} labels for {len(train) + len(test)} records")
        test_parts = [p[test] for p in train_parts]
        train_parts = [p[train] for p in train_parts]
        y_train, y_test = y_train[train], y_train[test]
    else:
        test_parts = _device_parts(x_test, len(train_parts), columns, f"{name} test")
        y_test, _ = label_map(y_test, classes, f"{name} test")
    column_ids = None if _is_list(x) else _columns(x, devices, columns)
    if isinstance(ranges, Mapping) and column_ids is not None:
        known = {c for ids in column_ids for c in ids}
        unknown = [k for k in ranges if k != "*" and k not in known]
        if unknown:
            raise PrivzvError(f"ranges: column {unknown[0]!r} is not a device's feature column")
    x_train, x_test_out = [], []
    for m, (tr, te) in enumerate(zip(train_parts, test_parts)):
        _check_records(f"{name} device {m}", tr, y_train, te, y_test, k)
        fixed = scaling(column_ids[m], ranges) if column_ids is not None else scaling([None], _one(ranges))
        x_train.append(fixed(tr))
        x_test_out.append(fixed(te))
    partition = (
        f"{len(x_train)} column groups of {', '.join(str(len(c)) for c in column_ids)} columns"
        if column_ids is not None
        else f"{len(x_train)} arrays, one per device"
    )
    return VerticalDataset(name, x_train, _labels(y_train), x_test_out, _labels(y_test), k, partition)


def _one(ranges):
    """A per-array form takes one (lo, hi) for every value (or none)."""
    if isinstance(ranges, Mapping):
        raise PrivzvError("ranges: per-column ranges need one [N, F] array with columns; give one (lo, hi)")
    return ranges


def _is_list(x) -> bool:
    return isinstance(x, (list, tuple))


def _columns(x, devices, columns) -> list[list[int]]:
    width = np.shape(x)[1] if np.ndim(x) == 2 else 0
    if columns is not None:
        return [list(c) for c in columns]
    return [list(c) for c in np.array_split(np.arange(width), devices or 1)]


def _device_parts(x, devices, columns, name: str) -> list[np.ndarray]:
    """One array per device from either accepted form, with matching record counts."""
    if _is_list(x):
        parts = [np.asarray(p) for p in x]
        if not parts or (devices is not None and len(parts) != devices) or columns is not None:
            raise PrivzvError(f"{name}: {len(parts)} device arrays; give one per device and no columns")
    else:
        x = np.asarray(x)
        if x.ndim != 2:
            raise PrivzvError(
                f"{name}: one array needs shape [N, F] (got {list(x.shape)}); or give one per device"
            )
        groups = _columns(x, devices, columns)
        if devices is not None and len(groups) != devices:
            raise PrivzvError(f"{name}: {len(groups)} column groups for {devices} devices")
        flat = [c for g in groups for c in g]
        if devices is not None and devices > x.shape[1]:
            raise PrivzvError(
                f"devices {devices}: {name} has {x.shape[1]} columns, so at most {x.shape[1]} devices"
            )
        if (
            any(not g for g in groups)
            or len(set(flat)) != len(flat)
            or not all(0 <= c < x.shape[1] for c in flat)
        ):
            raise PrivzvError(
                f"{name}: columns {[list(g) for g in groups]}: each device needs distinct column indices in 0..{x.shape[1] - 1}"
            )
        parts = [x[:, g] for g in groups]
    counts = {len(p) for p in parts}
    if len(counts) != 1:
        raise PrivzvError(f"{name}: device arrays hold {sorted(counts)} records; all must hold the same")
    return parts
