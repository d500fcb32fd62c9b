"""Text split over devices, tokenised offline: a text CSV and Amazon Review Polarity.

A record's text is either one text per device (a column group each) or one text cut into M
contiguous word spans (as the seeds split a review into paragraphs). Each device's text becomes
``seq_len`` int64 token ids (truncated, padded with 0) by a data-independent tokenizer: the
built-in ``hash`` tokenizer (lowercased ``\\w+`` words, each hashed onto a fixed vocabulary of
``HASH_VOCAB`` ids) or a transformers tokenizer from a local folder (``local_files_only``; its
vocabulary is its own, fixed before the data is seen). Nothing depends on another record.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from privzv.errors import PrivzvError
from privzv.training import seeds
from privzv.training.data import VerticalDataset, _check_records, _labels
from privzv.training.datasets import arrays, tables

HASH_VOCAB = 1 << 15  # ids 1..HASH_VOCAB-1 for words, 0 for padding
SEQ_LEN = 64  # default tokens per device segment
WORD = re.compile(r"\w+")
AMAZON_FILES = ("train.csv", "test.csv")
AMAZON_LABELS = ("1", "2")  # Zhang et al. 2015: 1 negative, 2 positive -> 0, 1
AMAZON_MAX_BYTES = 4 << 30  # train.csv is 1.6 GB; read as a stream, never whole
CHUNK = 4096  # records tokenised at a time


class HashTokenizer:
    """Lowercased ``\\w+`` words, word w -> 1 + (BLAKE2b-64(w) mod (HASH_VOCAB - 1)); 0 pads."""

    vocab = HASH_VOCAB

    def encode(self, texts: Sequence[str], seq_len: int) -> np.ndarray:
        ids = np.zeros((len(texts), seq_len), dtype=np.int64)
        known = _WORD_IDS
        for i, text in enumerate(texts):
            words = WORD.findall(text.lower())[:seq_len]
            ids[i, : len(words)] = [known.get(w) or _word_id(w) for w in words]
        return ids


_WORD_IDS: dict[str, int] = {}  # words repeat: each hashed once (an id is a function of its word)
MAX_KNOWN_WORDS = 1 << 20


def _word_id(word: str) -> int:
    digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
    value = 1 + int.from_bytes(digest, "little") % (HASH_VOCAB - 1)
    if len(_WORD_IDS) < MAX_KNOWN_WORDS:
        _WORD_IDS[word] = value
    return value


class LocalTokenizer:
    """A transformers tokenizer loaded from a local folder (no download)."""

    def __init__(self, folder: Path):
        try:
            from transformers import AutoTokenizer
        except ModuleNotFoundError as exc:
            from privzv.extras import missing_extra

            raise (missing_extra(exc) or exc) from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise PrivzvError(
                f"--tokenizer {str(folder)!r}: not a transformers tokenizer folder ({' '.join(str(exc).split())[:200]})"
            ) from None
        if self.tokenizer.pad_token_id is None:
            raise PrivzvError(f"--tokenizer {str(folder)!r}: the tokenizer has no padding token")
        self.vocab = len(self.tokenizer)

    def encode(self, texts: Sequence[str], seq_len: int) -> np.ndarray:
        out = self.tokenizer(
            list(texts), truncation=True, max_length=seq_len, padding="max_length", return_tensors="np"
        )
        return np.asarray(out["input_ids"], dtype=np.int64)


TOKENIZERS = {"hash": HashTokenizer}


def tokenizer(spec: str | None):
    """A built-in tokenizer by name (``TOKENIZERS``), or a local transformers tokenizer folder."""
    spec = spec or "hash"
    if spec in TOKENIZERS:
        return TOKENIZERS[spec]()
    if not Path(spec).is_dir():
        raise PrivzvError(
            f"--tokenizer {spec!r}: allowed are {', '.join(TOKENIZERS)} or a local folder with a transformers tokenizer"
        )
    return LocalTokenizer(Path(spec))


def word_spans(text: str, devices: int) -> list[str]:
    """``text``'s whitespace-separated words in ``devices`` contiguous spans (as even as possible;
    a short text leaves the last spans empty)."""
    words = text.split()
    size, longer = divmod(len(words), devices)  # np.array_split's sizes: the first ones longer
    bounds = [m * size + min(m, longer) for m in range(devices + 1)]
    return [" ".join(words[bounds[m] : bounds[m + 1]]) for m in range(devices)]


def device_texts(rows: Sequence[Sequence[str]], devices: int) -> list[list[str]]:
    """Per device, the text of each record: ``rows`` holds one text per device, or one text per
    record (cut into word spans)."""
    if all(len(row) == devices for row in rows) and devices > 1:
        return [[row[m] for row in rows] for m in range(devices)]
    spans = [word_spans(" ".join(row), devices) for row in rows]
    return [[s[m] for s in spans] for m in range(devices)]


def _encode(rows: Sequence[Sequence[str]], devices: int, tok, seq_len: int) -> list[np.ndarray]:
    return [tok.encode(texts, seq_len) for texts in device_texts(rows, devices)]


def _seq_len(seq_len) -> int:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise PrivzvError(f"--seq-len {seq_len!r}: must be an integer >= 1")
    return seq_len


def _dataset(name, parts_train, y_train, parts_test, y_test, k, tok, partition) -> VerticalDataset:
    for m, (tr, te) in enumerate(zip(parts_train, parts_test)):
        _check_records(f"{name} device {m}", tr, y_train, te, y_test, k)
    return VerticalDataset(
        name,
        [torch.from_numpy(p) for p in parts_train],
        _labels(y_train),
        [torch.from_numpy(p) for p in parts_test],
        _labels(y_test),
        k,
        partition,
        vocab=tok.vocab,
    )


def from_text_csv(
    path,
    *,
    label_column: str,
    classes,
    devices: int,
    device_columns: Sequence[Sequence[str]] | None = None,
    tokenizer_name: str | None = None,
    seq_len: int = SEQ_LEN,
    test_path=None,
    seed: int = 0,
    name: str = "text-csv",
) -> VerticalDataset:
    """Token ids int64 [N, seq_len] per device from a CSV with a header. ``device_columns``: one
    group of text columns per device, or one group (default: every column but the label) whose
    joined text is cut into ``devices`` word spans. ``classes``: the public label set or a count.
    ``test_path``: a test CSV of the same columns, else a seeded 80/20 split."""
    tok, seq_len = tokenizer(tokenizer_name), _seq_len(seq_len)
    table = tables.read_csv(path)
    groups = _text_groups(table, label_column, device_columns, devices)
    rows = _rows(table, groups)
    y_train, k = arrays.label_map(table.columns[label_column], classes, name)
    if test_path is None:
        train, test = arrays.split_indices(len(rows), seed, name)
        rows_test, y_test = [rows[i] for i in test], y_train[test]
        rows, y_train = [rows[i] for i in train], y_train[train]
    else:
        test_table = tables.read_csv(test_path, "--test-file")
        missing = [c for g in groups for c in g if c not in test_table.columns] + (
            [] if label_column in test_table.columns else [label_column]
        )
        if missing:
            raise PrivzvError(
                f"{test_table.path}: no column {missing[0]!r} (the test CSV needs the same columns)"
            )
        rows_test = _rows(test_table, groups)
        y_test, _ = arrays.label_map(test_table.columns[label_column], classes, f"{name} test")
    how = (
        "columns " + " | ".join(",".join(g) for g in groups)
        if len(groups) == devices and devices > 1
        else f"columns {','.join(groups[0])} in {devices} contiguous word spans"
    )
    return _dataset(
        name,
        _encode(rows, devices, tok, seq_len),
        y_train,
        _encode(rows_test, devices, tok, seq_len),
        y_test,
        k,
        tok,
        f"{how}, {seq_len} token ids each",
    )


def _text_groups(table, label, groups, devices) -> list[list[str]]:
    if groups is None:
        if label not in table.columns:
            raise PrivzvError(
                f"{table.path}: no label column {label!r}; columns are {', '.join(table.columns)}"
            )
        return [[c for c in table.columns if c != label]]
    if len(groups) not in (1, devices):
        raise PrivzvError(
            f"--device-columns: {len(groups)} groups for --devices {devices} (one group per device, "
            "or one group cut into word spans)"
        )
    return tables._feature_columns(table, label, groups, None)


def _rows(table, groups) -> list[list[str]]:
    """Per record, the text of each group (its columns joined by a space)."""
    joined = [
        [" ".join(str(c) for c in cells) for cells in zip(*(table.columns[c] for c in group))]
        for group in groups
    ]
    return [list(texts) for texts in zip(*joined)]


# ------------------------------------------------------------------ Amazon Review Polarity


def from_amazon_polarity(
    root,
    *,
    devices: int,
    tokenizer_name: str | None = None,
    seq_len: int = SEQ_LEN,
    records: int | None = None,
    seed: int = 0,
    name: str = "amazon-polarity",
) -> VerticalDataset:
    """Zhang et al. 2015's ``train.csv`` / ``test.csv`` (no header; label 1|2, title, text;
    quoted CSV): labels 1, 2 -> 0, 1; title and text joined and cut into ``devices`` contiguous
    word spans, ``seq_len`` token ids each. ``records`` N: a seeded subset of N training records
    and N // 4 test records (at least 1), else every record."""
    tok, seq_len = tokenizer(tokenizer_name), _seq_len(seq_len)
    root = Path(root)
    missing = [f for f in AMAZON_FILES if not (root / f).is_file()]
    if missing:
        raise PrivzvError(
            f"--data-dir {str(root)!r}: Amazon Review Polarity files not found; expected "
            f"{', '.join(AMAZON_FILES)} in DIR (amazon_review_polarity_csv)"
        )
    if records is not None and (isinstance(records, bool) or not isinstance(records, int) or records < 4):
        raise PrivzvError(
            f"--records {records!r}: must be an integer >= 4 (a quarter of it for the test split)"
        )
    splits = []
    for file, take in zip(AMAZON_FILES, (records, None if records is None else records // 4)):
        splits.append(_amazon_split(root / file, devices, tok, seq_len, take, seed))
    (x_train, y_train), (x_test, y_test) = splits
    return _dataset(
        name,
        x_train,
        y_train,
        x_test,
        y_test,
        len(AMAZON_LABELS),
        tok,
        f"title and text in {devices} contiguous word spans, {seq_len} token ids each",
    )


def _amazon_rows(path: Path) -> Iterator[tuple[int, int, str]]:
    """(line, label 0|1, title + text) of each record; a malformed row is refused, naming it."""
    if path.stat().st_size > AMAZON_MAX_BYTES:
        raise PrivzvError(f"{path}: larger than {AMAZON_MAX_BYTES} bytes")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, strict=True)
            for row in reader:
                if len(row) != 3:
                    raise PrivzvError(
                        f"{path}: line {reader.line_num}: {len(row)} fields, expected 3 (label, title, text)"
                    )
                if row[0].strip() not in AMAZON_LABELS:
                    raise PrivzvError(f"{path}: line {reader.line_num}: label {row[0]!r}, allowed are 1, 2")
                yield reader.line_num, AMAZON_LABELS.index(row[0].strip()), f"{row[1]} {row[2]}"
    except (csv.Error, UnicodeDecodeError) as exc:
        raise PrivzvError(
            f"{path}: not a readable UTF-8 CSV file ({' '.join(str(exc).split())[:200]})"
        ) from None


def _amazon_split(path: Path, devices, tok, seq_len, take, seed):
    """One file's token ids per device and labels; ``take``: a seeded subset of that many."""
    count = sum(1 for _ in _amazon_rows(path))
    if count == 0:
        raise PrivzvError(f"{path}: no records")
    keep = None
    if take is not None:
        take = max(1, take)
        if take > count:
            raise PrivzvError(f"--records: {take} records asked of {path}, which holds {count}")
        rng = np.random.default_rng(seeds.derive(seed, "records", path.name))
        keep = set(rng.choice(count, take, replace=False).tolist())
    size = count if keep is None else len(keep)
    parts = [np.zeros((size, seq_len), dtype=np.int64) for _ in range(devices)]
    labels = np.zeros(size, dtype=np.int64)
    texts, at = [], 0
    for i, (_, label, text) in enumerate(_amazon_rows(path)):
        if keep is not None and i not in keep:
            continue
        labels[at + len(texts)] = label
        texts.append([text])
        if len(texts) == CHUNK:
            at = _fill(parts, texts, at, devices, tok, seq_len)
    _fill(parts, texts, at, devices, tok, seq_len)
    return parts, labels


def _fill(parts, texts, at, devices, tok, seq_len) -> int:
    for m, ids in enumerate(_encode(texts, devices, tok, seq_len)):
        parts[m][at : at + len(ids)] = ids
    at += len(texts)
    texts.clear()
    return at


def load_text_csv(devices, seed, root, records, *, tokenizer=None, seq_len=None, **table):
    """The registered loader of ``--dataset text-csv``."""
    return from_text_csv(
        **tables.table_arguments("text-csv", **table),
        devices=devices,
        tokenizer_name=tokenizer,
        seq_len=seq_len or SEQ_LEN,
        seed=seed,
    )


def load_amazon_polarity(devices, seed, root, records, *, tokenizer=None, seq_len=None):
    """The registered loader of ``--dataset amazon-polarity``."""
    return from_amazon_polarity(
        root,
        devices=devices,
        tokenizer_name=tokenizer,
        seq_len=seq_len or SEQ_LEN,
        records=records,
        seed=seed,
    )
