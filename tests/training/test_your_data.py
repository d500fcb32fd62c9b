"""Your data: VerticalDataset builders (arrays, CSV, Parquet, image folders, text CSVs), the
ModelNet40 and Amazon Review Polarity loaders, their refusals, and the DP contract (a record's
preprocessing depends on that record alone)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from privzv.cli import main
from privzv.errors import PrivzvError
from privzv.training import data, models
from privzv.training.datasets import arrays, tables, text

HEADER = "a,b,c,d,y\n"


def write_csv(path, x, y, header=HEADER):
    path.write_text(header + "".join(",".join(f"{v:g}" for v in r) + f",{label}\n" for r, label in zip(x, y)))
    return path


def table(n=20, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, size=(n, 4)).astype(float)
    return x, np.where(x[:, 0] > 0, "yes", "no")


# ------------------------------------------------------------------ arrays


def test_from_arrays_columns_split_and_label_set():
    x = np.arange(50, dtype=float).reshape(10, 5)
    y = np.array(["b", "a"] * 5)
    ds = data.from_arrays(x, y, classes=["b", "a"], columns=[[0, 1], [4, 2]], seed=3)
    train, test = arrays.split_indices(10, 3, "t")
    assert len(test) == 2 and sorted([*train, *test]) == list(range(10))
    assert np.array_equal(ds.x_train[1].numpy(), x[train][:, [4, 2]].astype(np.float32))
    assert np.array_equal(ds.x_test[0].numpy(), x[test][:, [0, 1]].astype(np.float32))
    # the public set is sorted: a -> 0, b -> 1, whatever order it was given in
    assert ds.y_train.tolist() == [0 if v == "a" else 1 for v in y[train]] and ds.num_classes == 2
    again = data.from_arrays(x, y, classes=["a", "b"], columns=[[0, 1], [4, 2]], seed=3)
    assert all(torch.equal(p, q) for p, q in zip(ds.x_train, again.x_train))


def test_from_arrays_one_array_per_device_test_arrays_and_ranges():
    xs = [np.zeros((6, 1, 2, 2)), np.full((6, 3), 20.0)]
    ds = data.from_arrays(
        xs, [0, 1, 2, 0, 1, 2], classes=3, x_test=[x[:2] for x in xs], y_test=[2, 1], ranges=(0, 10)
    )
    assert [tuple(x.shape) for x in ds.x_train] == [(6, 1, 2, 2), (6, 3)]
    assert float(ds.x_train[0].min()) == -1 and float(ds.x_train[1].max()) == 1  # clipped to 10
    assert ds.y_test.tolist() == [2, 1] and ds.partition == "2 arrays, one per device"


def test_declared_ranges_per_column_and_values_as_they_are():
    x = np.array([[5.0, -3.0, 100.0]] * 5)
    ds = data.from_arrays(x, [0, 1, 0, 1, 0], classes=2, devices=1, ranges={0: (0, 10), "*": (-2, 2)}, seed=0)
    assert ds.x_train[0][0].tolist() == [0.0, -1.0, 1.0]  # 5 mid-range; -3 and 100 clipped to [-2, 2]
    raw = data.from_arrays(x, [0, 1, 0, 1, 0], classes=2, devices=1)
    assert raw.x_train[0][0].tolist() == [5.0, -3.0, 100.0]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(x=np.zeros((4, 2)), y=[0, 1, 0, 1], classes=2, columns=[[0], [0]]), "distinct column indices"),
        (dict(x=np.zeros((4, 2)), y=[0, 1, 0, 1], classes=2, columns=[[0], [5]]), "distinct column indices"),
        (dict(x=[np.zeros((4, 2)), np.zeros((3, 2))], y=[0] * 4, classes=2), r"\[3, 4\] records"),
        (dict(x=np.zeros((4, 2)), y=[0, 1, 0, 7], classes=2), r"labels: range \[7, 7\], allowed are 0..1"),
        (dict(x=np.zeros((4, 2)), y=["a", "b", "a", "c"], classes=["a", "b"]), "label 'c' of record"),
        (dict(x=np.full((4, 2), np.nan), y=[0, 1, 0, 1], classes=2), "NaN or infinite"),
        (dict(x=np.zeros((4, 2)), y=[0, 1, 0], classes=2), "3 labels for 4 records"),
        (dict(x=np.zeros((4, 2)), y=[0] * 4, classes=["a", "a"]), "repeats a label"),
        (dict(x=np.zeros((4, 2)), y=[0] * 4, classes=2, ranges=(3, 1)), "finite lo < hi"),
        (dict(x=np.zeros((4, 2)), y=[0] * 4, classes=2, x_test=np.zeros((2, 2))), "both x_test and y_test"),
        (dict(x=np.zeros((1, 2)), y=[0], classes=2), "at least 2"),
    ],
)
def test_from_arrays_refusals(kwargs, message):
    with pytest.raises(PrivzvError, match=message):
        data.from_arrays(**kwargs)


# ------------------------------------------------------------------ CSV and Parquet


def test_csv_round_trip_by_device_columns(tmp_path):
    x, y = table()
    path = write_csv(tmp_path / "t.csv", x, y)
    ds = data.load("csv", 2, data_file=str(path), device_columns="d,a;c", label_column="y", labels="yes,no")
    train, test = arrays.split_indices(20, 0, "t")
    assert np.array_equal(ds.x_train[0].numpy(), x[train][:, [3, 0]].astype(np.float32))
    assert np.array_equal(ds.x_test[1].numpy(), x[test][:, [2]].astype(np.float32))
    assert ds.y_train.tolist() == [int(v == "yes") for v in y[train]]  # sorted: no -> 0, yes -> 1
    assert ds.partition == "columns d,a | c" and data.REGISTRY["csv"].model == "mlp"


def test_csv_default_groups_ranges_and_a_test_file(tmp_path):
    x, y = table()
    path = write_csv(tmp_path / "t.csv", x, y)
    test = write_csv(tmp_path / "test.csv", x[:3], y[:3])
    ds = data.load(
        "csv",
        2,
        data_file=str(path),
        test_file=str(test),
        label_column="y",
        labels="no,yes",
        ranges="a=-50:50",
    )
    assert [x_.shape[1] for x_ in ds.x_train] == [2, 2] and len(ds.y_train) == 20 and len(ds.y_test) == 3
    assert np.allclose(ds.x_train[0][:, 0].numpy(), x[:, 0] / 50) and np.array_equal(
        ds.x_test[1].numpy(), x[:3, 2:]
    )


@pytest.mark.parametrize(
    "body, options, message",
    [
        ("a,b,y\n1,2,no\n3,no\n", {}, r"line 3: 2 fields, the header has 3"),
        ("a,b,y\n1,x2,no\n3,4,yes\n", {}, r"line 2, column 'b': 'x2' is not a number"),
        ("a,b,y\n1,,no\n3,4,yes\n", {}, r"line 2, column 'b': '' is not a number"),
        ("a,b,y\n1,2,maybe\n3,4,yes\n", {}, "label 'maybe' of record 0 is not in the label set no, yes"),
        ("a,a,y\n1,2,no\n3,4,yes\n", {}, "column 'a' appears twice"),
        ("", {}, "empty file"),
        ("a,b,y\n", {}, "no records"),
        ("a,b,y\n1,2,no\n3,4,yes\n", {"device_columns": "a;q"}, "no column 'q'; columns are a, b, y"),
        ("a,b,y\n1,2,no\n3,4,yes\n", {"device_columns": "a;y"}, "'y' is the label column"),
        ("a,b,y\n1,2,no\n3,4,yes\n", {"device_columns": "a,b"}, "1 groups for --devices 2"),
        ("a,b,y\n1,2,no\n3,4,yes\n", {"label_column": "z"}, "no label column 'z'"),
        ("a,b,y\n1,2,no\n3,4,yes\n", {"ranges": "q=0:1"}, "'q' is not a feature column"),
        ("a,b,y\n1,2,no\n3,4,yes\n", {"ranges": "a=1"}, "write COLUMN=LO:HI"),
        ("a,b,y\n1,2,no\n3,4,yes\n", {"labels": None}, "needs --labels"),
        ('a,b,y\n1,"2,no\n', {}, "not a readable UTF-8 CSV"),
        (b"a,b,y\n1,2,\xff\xfe\n", {}, "not a readable UTF-8 CSV"),
    ],
)
def test_csv_refusals_name_the_file_and_value(tmp_path, body, options, message):
    path = tmp_path / "t.csv"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    given = {"data_file": str(path), "label_column": "y", "labels": "no,yes", **options}
    with pytest.raises(PrivzvError, match=message):
        data.load("csv", 2, **given)


def test_oversized_and_missing_files_are_refused(tmp_path, monkeypatch):
    path = write_csv(tmp_path / "t.csv", *table())
    monkeypatch.setattr(tables, "MAX_FILE_BYTES", 100)
    with pytest.raises(PrivzvError, match="larger than 100 bytes"):
        data.load("csv", 2, data_file=str(path), label_column="y", labels="no,yes")
    with pytest.raises(PrivzvError, match="--data-file '.*nope.csv': not a file"):
        data.load("csv", 2, data_file=str(tmp_path / "nope.csv"), label_column="y", labels="no,yes")


def test_options_belong_to_their_datasets():
    with pytest.raises(PrivzvError, match="--label-column 'y': only for --dataset csv, parquet, text-csv"):
        data.load("digits", 2, label_column="y")
    from privzv.training.config import TrainConfig

    with pytest.raises(PrivzvError, match="--tokenizer 'hash': only for --dataset text-csv, amazon-polarity"):
        TrainConfig(dataset="csv", tokenizer="hash").validate()


def test_parquet_round_trip_and_refusals(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    x, y = table()
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": x[:, 0], "b": x[:, 1].astype(np.int64), "y": y.tolist()}), path)
    ds = data.load("parquet", 2, data_file=str(path), label_column="y", labels="no,yes")
    train, _ = arrays.split_indices(20, 0, "t")
    assert np.array_equal(ds.x_train[1].numpy()[:, 0], x[train][:, 1].astype(np.float32))
    bad = {
        "nulls.parquet": (pa.table({"a": [1.0, None, 3.0], "y": ["no", "yes", "no"]}), "1 missing values"),
        "text.parquet": (pa.table({"a": ["1", "z", "3"], "y": ["no", "yes", "no"]}), "'z' is not a number"),
    }
    for name, (tbl, message) in bad.items():
        pq.write_table(tbl, tmp_path / name)
        with pytest.raises(PrivzvError, match=message):
            data.load("parquet", 1, data_file=str(tmp_path / name), label_column="y", labels="no,yes")
    (tmp_path / "cut.parquet").write_bytes(path.read_bytes()[:200])
    with pytest.raises(PrivzvError, match="not a readable Parquet file"):
        data.load("parquet", 1, data_file=str(tmp_path / "cut.parquet"), label_column="y", labels="no,yes")


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(PrivzvError, match=r"pip install 'privzv\[tables\]'"):
        data.load("parquet", 1, data_file=str(path), label_column="y", labels="no,yes")


# ------------------------------------------------------------------ the DP contract


def test_changing_one_record_moves_no_other_record(tmp_path):
    """A builder that scaled by statistics of the file (min/max, mean/std) or derived the label
    set from it would move every record when one record turns extreme: none may move."""
    x, y = table(30)
    options = dict(label_column="y", labels="no,yes", ranges="a=-50:50,b=-50:50")
    train, test = arrays.split_indices(30, 0, "t")
    changed = train[3]
    before = data.load("csv", 2, data_file=str(write_csv(tmp_path / "1.csv", x, y)), **options)
    x[changed], y[changed] = [1e6, -1e6, 1e6, -1e6], "yes"
    after = data.load("csv", 2, data_file=str(write_csv(tmp_path / "2.csv", x, y)), **options)
    keep = train != changed
    for b, a in zip(before.x_train, after.x_train):
        assert torch.equal(b[torch.as_tensor(keep)], a[torch.as_tensor(keep)])
        assert not torch.equal(b, a)  # the changed record did change
    assert all(torch.equal(b, a) for b, a in zip(before.x_test, after.x_test))
    assert torch.equal(before.y_train[torch.as_tensor(keep)], after.y_train[torch.as_tensor(keep)])
    assert torch.equal(before.y_test, after.y_test)


def test_changing_one_image_or_text_moves_no_other_record(tmp_path):
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 120, size=(10, 4, 4, 3), dtype=np.uint8)
    write_folder(tmp_path / "f1", pixels)
    pixels[3] = 255
    write_folder(tmp_path / "f2", pixels)
    one, two = (data.load("image-folder", 4, data_dir=tmp_path / f) for f in ("f1", "f2"))
    same_texts = ["good thing here", "bad stuff", "fine it is", "no", "yes indeed", "a b c d e f"]
    changed = [*same_texts[:2], "entirely different words in this review now", *same_texts[3:]]
    texts = [text_ds(tmp_path / f"t{i}.csv", t) for i, t in enumerate((same_texts, changed))]
    # image 3 is the 7th file (cat: 0, 2, 4, 6, 8; dog: 1, 3, ...); text row 2 is record 2
    for before, after, changed in ((one, two, 6), (*texts, 2)):
        train, test = arrays.split_indices(len(before.y_train) + len(before.y_test), 0, "t")
        for part, ids in (("x_train", train), ("x_test", test)):
            keep = torch.as_tensor(ids != changed)
            for b, a in zip(getattr(before, part), getattr(after, part)):
                assert torch.equal(b[keep], a[keep])
                assert torch.equal(b, a) == (changed not in ids)


def text_ds(path, texts):
    rows = "".join(f'"{t}",{i % 2}\n' for i, t in enumerate(texts))
    path.write_text("text,y\n" + rows)
    return data.load("text-csv", 2, data_file=str(path), label_column="y", labels="0,1")


# ------------------------------------------------------------------ image folders


def write_folder(root, pixels, classes=("cat", "dog"), mode="RGB"):
    from PIL import Image

    for i, image in enumerate(pixels):
        folder = root / classes[i % len(classes)]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image if mode == "RGB" else image[..., 0], mode).save(folder / f"{i:03d}.png")
    return root


def test_image_folder_patches_fixed_scaling_and_layouts(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, size=(10, 4, 4, 3), dtype=np.uint8)
    ds = data.load("image-folder", 4, data_dir=write_folder(tmp_path / "f", pixels))
    assert [tuple(x.shape) for x in ds.x_train] == [(8, 3, 2, 2)] * 4 and ds.num_classes == 2
    # files sorted by class then name: cat holds 0, 2, 4, ..., dog 1, 3, ...
    order = [*range(0, 10, 2), *range(1, 10, 2)]
    train, _ = arrays.split_indices(10, 0, "t")
    first = pixels[order][train][:, :2, 2:, :].transpose(0, 3, 1, 2)  # device 1: top-right patch
    assert np.allclose(ds.x_train[1].numpy(), first / 127.5 - 1, atol=1e-6)
    assert data.REGISTRY["image-folder"].model in models.DEVICE_MODELS
    net = models.device_model(ds, 0, 8)
    assert net(ds.x_train[0]).shape == (8, 8)
    for split, count in (("train", 6), ("test", 4)):
        write_folder(tmp_path / "s" / split, pixels[:count], mode="L")
    gray = data.load("image-folder", 1, data_dir=tmp_path / "s", channels=1, image_size=2)
    assert tuple(gray.x_train[0].shape) == (6, 1, 2, 2) and len(gray.y_test) == 4


def test_image_folder_refusals(tmp_path):
    pixels = np.zeros((4, 4, 4, 3), dtype=np.uint8)
    root = write_folder(tmp_path / "f", pixels)
    (root / "cat" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    with pytest.raises(PrivzvError, match="bad.png: not a readable image"):
        data.load("image-folder", 4, data_dir=root)
    (root / "cat" / "bad.png").unlink()
    from PIL import Image

    Image.new("RGB", (6, 6)).save(root / "dog" / "big.png")
    with pytest.raises(PrivzvError, match=r"big.png: \[6, 6\] pixels.*give --image-size"):
        data.load("image-folder", 4, data_dir=root)
    assert data.load("image-folder", 4, data_dir=root, image_size=4).x_train[0].shape[1:] == (3, 2, 2)
    (root / "empty").mkdir()
    with pytest.raises(PrivzvError, match="empty: class folder without images"):
        data.load("image-folder", 4, data_dir=root)
    with pytest.raises(PrivzvError, match="devices 3: patches need a square grid"):
        data.load("image-folder", 3, data_dir=write_folder(tmp_path / "g", pixels))
    with pytest.raises(PrivzvError, match="no class folders"):
        data.load("image-folder", 1, data_dir=tmp_path / "g" / "cat")


# ------------------------------------------------------------------ ModelNet40 views


def write_modelnet(root, objects=2, size=4, skip=None, classes=("airplane", "chair")):
    from PIL import Image

    for k, name in enumerate(classes):
        for split in ("train", "test"):
            for obj in range(1, objects + 1):
                for view in range(1, 13):
                    if skip == (name, split, obj, view):
                        continue
                    folder = root / name / split
                    folder.mkdir(parents=True, exist_ok=True)
                    value = 10 * view + k  # each view's pixels say which view and class it is
                    Image.new("L", (size, size), value).save(folder / f"{name}_{obj:04d}_{view:03d}.png")
    return root


def test_modelnet40_views_per_device(tmp_path):
    root = write_modelnet(tmp_path / "mn")
    ds = data.load("modelnet40", 4, data_dir=root)
    assert [tuple(x.shape) for x in ds.x_train] == [(4, 3, 4, 4)] * 4 and ds.num_classes == 2
    assert ds.y_train.tolist() == [0, 0, 1, 1] and len(ds.y_test) == 4
    raw = np.rint((ds.x_train[2][:, :, 0, 0].numpy() + 1) * 127.5)  # device 2: views 7, 8, 9
    assert raw.tolist() == [[70, 80, 90]] * 2 + [[71, 81, 91]] * 2
    assert "views 1-3, 4-6, 7-9, 10-12" in ds.partition
    rgb = data.load("modelnet40", 12, data_dir=root, channels=3, image_size=2)
    assert tuple(rgb.x_test[0].shape) == (4, 3, 2, 2)
    assert models.device_model(ds, 0, 8)(ds.x_train[0]).shape == (4, 8)


def test_modelnet40_refusals(tmp_path):
    root = write_modelnet(tmp_path / "mn", objects=7, skip=("chair", "train", 3, 5))
    with pytest.raises(PrivzvError, match="train objects without all 12 views: chair_0003"):
        data.load("modelnet40", 4, data_dir=root)
    with pytest.raises(PrivzvError, match="devices 5: the 12 views split evenly over 1, 2, 3, 4, 6, 12"):
        data.load("modelnet40", 5, data_dir=root)
    (root / "chair" / "train" / "chair_0003_005.png").write_bytes(b"junk")
    with pytest.raises(PrivzvError, match="chair_0003_005.png: not a readable image"):
        data.load("modelnet40", 4, data_dir=root)
    (root / "chair" / "train" / "stray.png").write_bytes(b"junk")
    with pytest.raises(PrivzvError, match="stray.png: not named CLASS_NNNN_VVV.png"):
        data.load("modelnet40", 4, data_dir=root)


# ------------------------------------------------------------------ text


def test_hash_tokenizer_is_fixed_and_spans_are_contiguous():
    tok = text.HashTokenizer()
    ids = tok.encode(["The cat, the CAT!", ""], 4)
    assert ids.dtype == np.int64
    assert ids[0, 0] == ids[0, 2] and ids[0, 1] == ids[0, 3] and ids[0, 0] != ids[0, 1]  # case-folded
    assert ids[1].tolist() == [0, 0, 0, 0] and 1 <= ids[0].min() and ids.max() < text.HASH_VOCAB
    # an id is a function of its word only: known value, from BLAKE2b
    import hashlib

    digest = hashlib.blake2b(b"cat", digest_size=8).digest()
    assert ids[0, 1] == 1 + int.from_bytes(digest, "little") % (text.HASH_VOCAB - 1)
    assert text.word_spans("a b c d e f g", 3) == ["a b c", "d e", "f g"]
    assert text.word_spans("a", 3) == ["a", "", ""]


def test_text_csv_quotes_spans_and_device_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        'title,body,y\n"Hi, there","one two\nthree four",pos\n"x","y ""q"" z",neg\n'
        + "".join(f"t{i},w{i} v{i},{'pos' if i % 2 else 'neg'}\n" for i in range(8))
    )
    spans = data.load("text-csv", 2, data_file=str(path), label_column="y", labels="neg,pos", seq_len=3)
    assert spans.vocab == text.HASH_VOCAB and data.REGISTRY["text-csv"].model == "text-bag"
    assert [tuple(x.shape) for x in spans.x_train] == [(8, 3)] * 2
    assert all(x.dtype == torch.int64 for x in spans.x_train + spans.x_test)
    records = ["Hi, there one two\nthree four", 'x y "q" z', *(f"t{i} w{i} v{i}" for i in range(8))]
    train, test = arrays.split_indices(10, 0, "t")
    tok = text.HashTokenizer()
    expect = [tok.encode([text.word_spans(records[i], 2)[m] for i in train], 3) for m in range(2)]
    assert all(np.array_equal(x.numpy(), e) for x, e in zip(spans.x_train, expect))
    per = data.load(
        "text-csv", 2, data_file=str(path), device_columns="title;body", label_column="y", labels="neg,pos"
    )
    assert np.array_equal(
        per.x_test[1].numpy(),
        tok.encode(
            [["one two\nthree four", 'y "q" z', *(f"w{i} v{i}" for i in range(8))][i] for i in test],
            text.SEQ_LEN,
        ),
    )
    assert per.partition == "columns title | body, 64 token ids each"


def test_text_refusals(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,y\nhello,pos\nbye,neg\nfoo,bar\n")
    base = dict(data_file=str(path), label_column="y", labels="neg,pos")
    with pytest.raises(PrivzvError, match="label 'bar' of record"):
        data.load("text-csv", 2, **base)
    with pytest.raises(PrivzvError, match="--tokenizer 'nope': allowed are hash or a local folder"):
        data.load("text-csv", 2, **base, tokenizer="nope")
    with pytest.raises(PrivzvError, match="3 groups for --devices 2"):
        data.load("text-csv", 2, **base, device_columns="text;text;text")
    (tmp_path / "tok").mkdir()
    try:
        import transformers  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(PrivzvError, match=r"pip install 'privzv\[text\]'"):
            data.load("text-csv", 2, **base, tokenizer=str(tmp_path / "tok"))
    else:
        with pytest.raises(PrivzvError, match="not a transformers tokenizer folder"):
            data.load("text-csv", 2, **base, tokenizer=str(tmp_path / "tok"))


# ------------------------------------------------------------------ Amazon Review Polarity


def write_amazon(root, train=12, test=4, extra=""):
    root.mkdir(parents=True, exist_ok=True)
    rows = lambda n: "".join(  # noqa: E731
        f'"{1 + i % 2}","Title, {i}","Body {i} says ""hi""\nand more words here {i}"\n' for i in range(n)
    )
    (root / "train.csv").write_text(rows(train) + extra)
    (root / "test.csv").write_text(rows(test))
    return root


def test_amazon_polarity_labels_spans_and_seeded_subset(tmp_path):
    root = write_amazon(tmp_path / "amz")
    ds = data.load("amazon-polarity", 3, data_dir=root, seq_len=5)
    assert ds.y_train.tolist() == [i % 2 for i in range(12)] and ds.num_classes == 2
    tok = text.HashTokenizer()
    review = 'Title, 4 Body 4 says "hi"\nand more words here 4'
    assert [ds.x_train[m][4].tolist() for m in range(3)] == [
        tok.encode([span], 5)[0].tolist() for span in text.word_spans(review, 3)
    ]
    sub = data.load("amazon-polarity", 3, data_dir=root, records=8, seed=5)
    again = data.load("amazon-polarity", 3, data_dir=root, records=8, seed=5)
    assert len(sub.y_train) == 8 and len(sub.y_test) == 2
    assert all(torch.equal(a, b) for a, b in zip(sub.x_train, again.x_train))


@pytest.mark.parametrize(
    "extra, message",
    [
        ('"3","t","x"\n', r"line \d+: label '3', allowed are 1, 2"),
        ('"1","t"\n', r"line \d+: 2 fields, expected 3"),
        ('"1","t","unterminated\n', "not a readable UTF-8 CSV"),
    ],
)
def test_amazon_polarity_refusals(tmp_path, extra, message):
    root = write_amazon(tmp_path / "amz", extra=extra)
    with pytest.raises(PrivzvError, match=message):
        data.load("amazon-polarity", 2, data_dir=root)


def test_amazon_polarity_missing_files_and_too_many_records(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PrivzvError, match="expected train.csv, test.csv"):
        data.load("amazon-polarity", 2, data_dir=tmp_path / "empty")
    with pytest.raises(PrivzvError, match="13 records asked of .*train.csv, which holds 12"):
        data.load("amazon-polarity", 2, data_dir=write_amazon(tmp_path / "amz"), records=13)


# ------------------------------------------------------------------ the CLI, end to end


def test_train_on_a_csv_then_attack_then_a_changed_file_is_refused(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 4))
    path = write_csv(tmp_path / "t.csv", x, np.where(x[:, 0] + x[:, 2] > 0, "yes", "no"))
    out = tmp_path / "run"
    flags = [
        "--dataset",
        "csv",
        "--data-file",
        str(path),
        "--device-columns",
        "a,b;c,d",
        "--label-column",
        "y",
    ]
    args = ["train", *flags, "--labels", "no,yes", "--devices", "2", "--epochs", "1", "--batch-size", "16"]
    assert main([*args, "--ranges", "*=-4:4", "--out", str(out), "--json"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["test_accuracy"] <= 1
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["device_columns"] == "a,b;c,d" and saved["config"]["data_file"] == str(path)
    assert saved["data"] == {
        "records": 96,
        "test_records": 24,
        "num_classes": 2,
        "features_shape": [[2], [2]],
    }
    assert main(["attack", "run", "--attack", "membership", "--run", str(out), "--json"]) == 0
    capsys.readouterr()
    write_csv(path, x[:100], np.where(x[:100, 0] > 0, "yes", "no"))
    assert main(["attack", "run", "--attack", "membership", "--run", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has records 80, the run was trained on 96" in err
    assert main(["train", "--resume", str(out)]) == 2
    assert "has records 80, the run was trained on 96" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--labels", "no"], "label 'yes' of record"),
        (["--labels", "no,yes", "--device-columns", "a;b;c"], "3 groups for --devices 2"),
        (["--labels", "no,yes", "--tokenizer", "hash"], "--tokenizer 'hash': only for --dataset"),
        (["--labels", "no,yes", "--channels", "2"], "--channels"),
        ([], "needs --labels"),
    ],
)
def test_cli_refusals_write_nothing(tmp_path, capsys, flags, message):
    path = write_csv(tmp_path / "t.csv", *table())
    out = tmp_path / "run"
    argv = ["train", "--dataset", "csv", "--data-file", str(path), "--label-column", "y", "--devices", "2"]
    assert main([*argv, *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not out.exists()


def test_a_dataset_registered_in_python_is_a_dataset_choice(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "REGISTRY", dict(data.REGISTRY))
    x, y = table(40)
    mine = data.from_arrays(x, y, classes=["no", "yes"], devices=2, ranges=(-50, 50))
    data.register("mine", data.Dataset(lambda devices, seed, root, records: mine, 2, "two column pairs"))
    out = tmp_path / "run"
    assert (
        main(["train", "--dataset", "mine", "--devices", "2", "--epochs", "1", "--out", str(out), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["dataset"] == "mine"
    assert data.load("mine", 2).name == "mine"  # found by its registered name (its model, classes)
    with pytest.raises(PrivzvError, match="devices 3: dataset 'mine' holds 2 device slices"):
        data.load("mine", 3)


def test_train_on_token_ids_of_a_text_csv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = [
        " ".join(rng.choice(["good", "great"] if i % 2 else ["bad", "awful"], 6)) + f",{i % 2}\n"
        for i in range(80)
    ]
    path = tmp_path / "r.csv"
    path.write_text("text,y\n" + "".join(rows))
    argv = ["train", "--dataset", "text-csv", "--data-file", str(path), "--label-column", "y"]
    argv += ["--labels", "0,1", "--devices", "2", "--seq-len", "4", "--epochs", "1", "--batch-size", "16"]
    assert main([*argv, "--out", str(tmp_path / "run"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dataset"] == "text-csv" and 0 <= summary["test_accuracy"] <= 1


def test_a_resume_refuses_other_values_of_the_same_shape(tmp_path, capsys, monkeypatch):
    """A relative --data-file read from another working directory, same shape, other values:
    refused by its digest (the old code resumed on it). The digest is in private/ only."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 4))
    for where, values in (("a", x), ("b", -x)):
        (tmp_path / where).mkdir()
        write_csv(tmp_path / where / "t.csv", values, np.where(values[:, 0] > 0, "yes", "no"))
    out = tmp_path / "run"
    monkeypatch.chdir(tmp_path / "a")
    args = ["--dataset", "csv", "--data-file", "t.csv", "--device-columns", "a,b;c,d", "--label-column", "y"]
    args += [
        "--labels",
        "no,yes",
        "--ranges",
        "*=-4:4",
        "--devices",
        "2",
        "--epochs",
        "1",
        "--batch-size",
        "16",
    ]
    assert main(["train", *args, "--out", str(out)]) == 0
    digest = json.loads((out / "private" / "secrets.json").read_text())["data_sha256"]
    public = "".join(
        p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and "private" not in p.parts
    )
    assert len(digest) == 64 and digest not in public
    assert main(["train", "--resume", str(out), "--extend", "--epochs", "2"]) == 0  # the same file
    capsys.readouterr()
    monkeypatch.chdir(tmp_path / "b")
    assert main(["train", "--resume", str(out), "--extend", "--epochs", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other values than the run was trained on" in err
