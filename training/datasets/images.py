"""Images from folders: an ImageFolder layout (a grid of patches per device, as CIFAR-10) and
ModelNet40's 12 rendered views per object (MVCNN's ``modelnet40_images_new_12x``; views per device).

Pixels are read as 8-bit grayscale (``channels`` 1) or RGB (3), optionally resized to a fixed
square (a per-image map), and scaled by the fixed map [0, 255] -> [-1, 1] (``PIXELS``): nothing
depends on another image. Class labels are the class folders' names, sorted.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from privzv.errors import PrivzvError
from privzv.training.data import (
    MAX_FILE_BYTES,
    VerticalDataset,
    _check_records,
    _images,
    _labels,
    _patches,
    _range,
)
from privzv.training.datasets import arrays

PIXELS = _range(0.0, 255.0, "8-bit pixels mapped onto [-1, 1]")
SUFFIXES = (".png", ".jpg", ".jpeg")
MAX_PIXELS = 4096 * 4096  # a larger image (or a decompression bomb) is refused
MODES = {1: "L", 3: "RGB"}
VIEWS = 12  # MVCNN's rendered views per object
VIEW_FILE = re.compile(r"^(?P<object>.+_\d+)_(?P<view>\d{3})\.png$")


def read_image(path: Path, channels: int, size: int | None) -> np.ndarray:
    """One image as uint8 [channels, H, W] (resized to size x size if given); unreadable,
    oversized or truncated files are refused, naming them."""
    from PIL import Image

    if path.stat().st_size > MAX_FILE_BYTES:
        raise PrivzvError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        with Image.open(path) as image:
            if image.width * image.height > MAX_PIXELS:
                raise PrivzvError(f"{path}: {image.width}x{image.height} pixels, more than {MAX_PIXELS}")
            image = image.convert(MODES[channels])
            if size is not None:
                image = image.resize((size, size), Image.Resampling.BILINEAR)
            pixels = np.asarray(image, dtype=np.uint8)
    except PrivzvError:
        raise
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise PrivzvError(f"{path}: not a readable image ({' '.join(str(exc).split())[:200]})") from None
    return pixels[None] if channels == 1 else pixels.transpose(2, 0, 1)


def _stack(images: list[np.ndarray], paths: list[Path]) -> np.ndarray:
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        first = images[0].shape
        odd = next(p for p, im in zip(paths, images) if im.shape != first)
        raise PrivzvError(
            f"{odd}: {list(images[paths.index(odd)].shape[1:])} pixels, {paths[0]} has {list(first[1:])};"
            " give --image-size to resize every image"
        )
    return np.stack(images)


def _classes(root: Path) -> list[str]:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise PrivzvError(f"--data-dir {str(root)!r}: no class folders (expected DIR/CLASS/IMAGE.png)")
    return classes


def _folder(root: Path, classes: list[str], channels: int, size: int | None):
    """(images uint8 [N, C, H, W], labels) of the ImageFolder layout ``root/CLASS/IMAGE``."""
    images, labels, paths = [], [], []
    for k, name in enumerate(classes):
        files = sorted(p for p in (root / name).iterdir() if p.suffix.lower() in SUFFIXES)
        if not files:
            raise PrivzvError(f"{root / name}: class folder without images ({', '.join(SUFFIXES)})")
        for path in files:
            images.append(read_image(path, channels, size))
            labels.append(k)
            paths.append(path)
    return _stack(images, paths), np.asarray(labels, dtype=np.int64)


def from_image_folder(
    root,
    *,
    devices: int,
    channels: int = 3,
    image_size: int | None = None,
    seed: int = 0,
    name: str = "image-folder",
) -> VerticalDataset:
    """Images in class folders (``root/CLASS/*.png``; or ``root/train/CLASS`` and
    ``root/test/CLASS``, else a seeded 80/20 split), each cut into a g x g grid of patches,
    devices = g*g (as CIFAR-10)."""
    root = _root(root)
    channels = _channels(channels)
    if (root / "train").is_dir() and (root / "test").is_dir():
        classes = _classes(root / "train")
        if _classes(root / "test") != classes:
            raise PrivzvError(f"--data-dir {str(root)!r}: train and test hold different class folders")
        x_train, y_train = _folder(root / "train", classes, channels, image_size)
        x_test, y_test = _folder(root / "test", classes, channels, image_size)
        if x_train.shape[1:] != x_test.shape[1:]:
            raise PrivzvError(
                f"--data-dir {str(root)!r}: train and test images differ in size; give --image-size"
            )
    else:
        classes = _classes(root)
        x, y = _folder(root, classes, channels, image_size)
        train, test = arrays.split_indices(len(y), seed, name)
        x_train, y_train, x_test, y_test = x[train], y[train], x[test], y[test]
    return _images(name, x_train, y_train, x_test, y_test, len(classes), devices, _patches, PIXELS)


def from_modelnet40(
    root, *, devices: int, channels: int = 1, image_size: int | None = None, name: str = "modelnet40"
) -> VerticalDataset:
    """ModelNet40's rendered views, ``root/CLASS/{train,test}/CLASS_NNNN_VVV.png`` (views 001-012
    of each object). ``devices`` divides 12: device m holds views m*12/M+1 .. (m+1)*12/M, stacked
    on the channel axis ([N, views*channels, H, W]). An object missing a view is refused."""
    root = _root(root)
    channels = _channels(channels)
    if not isinstance(devices, int) or devices < 1 or VIEWS % devices:
        allowed = ", ".join(str(d) for d in range(1, VIEWS + 1) if VIEWS % d == 0)
        raise PrivzvError(f"devices {devices}: the {VIEWS} views split evenly over {allowed} devices")
    classes = _classes(root)
    (v_train, y_train), (v_test, y_test) = (
        _views(root, classes, split, channels, image_size) for split in ("train", "test")
    )
    _check_records(name, v_train, y_train, v_test, y_test, len(classes))
    per = VIEWS // devices

    def part(views: np.ndarray, m: int):
        return PIXELS(views[:, m * per : (m + 1) * per].reshape(len(views), -1, *views.shape[3:]))

    spans = ", ".join(f"{m * per + 1}-{(m + 1) * per}" for m in range(devices))
    return VerticalDataset(
        name,
        [part(v_train, m) for m in range(devices)],
        _labels(y_train),
        [part(v_test, m) for m in range(devices)],
        _labels(y_test),
        len(classes),
        f"{VIEWS} rendered views per object, {per} per device (views {spans}), stacked as channels",
    )


def _views(root: Path, classes: list[str], split: str, channels: int, size: int | None):
    """(views uint8 [N, 12, C, H, W], labels) of one split; objects sorted by class then name."""
    objects, labels, paths, missing = [], [], [], []
    for k, name in enumerate(classes):
        folder = root / name / split
        if not folder.is_dir():
            raise PrivzvError(f"{folder}: missing (expected CLASS/{split}/CLASS_NNNN_VVV.png)")
        found: dict[str, dict[int, Path]] = {}
        for path in folder.iterdir():
            match = VIEW_FILE.match(path.name)
            if match is None:
                if path.suffix.lower() == ".png":
                    raise PrivzvError(f"{path}: not named CLASS_NNNN_VVV.png (views 001-{VIEWS:03d})")
                continue
            found.setdefault(match["object"], {})[int(match["view"])] = path
        if not found:
            raise PrivzvError(f"{folder}: no CLASS_NNNN_VVV.png views")
        for obj in sorted(found):
            views = found[obj]
            if sorted(views) != list(range(1, VIEWS + 1)):
                missing.append(obj)
                continue
            for v in range(1, VIEWS + 1):
                objects.append(read_image(views[v], channels, size))
                paths.append(views[v])
            labels.append(k)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise PrivzvError(f"--data-dir {str(root)!r}: {split} objects without all {VIEWS} views: {shown}")
    stacked = _stack(objects, paths)
    return stacked.reshape(len(labels), VIEWS, *stacked.shape[1:]), np.asarray(labels, dtype=np.int64)


def _root(root) -> Path:
    root = Path(root)
    if not root.is_dir():
        raise PrivzvError(f"--data-dir {str(root)!r}: not a directory")
    return root


def _channels(channels) -> int:
    if channels not in MODES:
        raise PrivzvError(f"--channels {channels!r}: allowed are 1 (grayscale) or 3 (RGB)")
    return channels


def load_image_folder(devices, seed, root, records, *, channels=None, image_size=None):
    """The registered loader of ``--dataset image-folder``."""
    return from_image_folder(root, devices=devices, channels=channels or 3, image_size=image_size, seed=seed)


def load_modelnet40(devices, seed, root, records, *, channels=None, image_size=None):
    """The registered loader of ``--dataset modelnet40``."""
    return from_modelnet40(root, devices=devices, channels=channels or 1, image_size=image_size)
