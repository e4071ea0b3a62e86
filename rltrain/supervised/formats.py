"""Dataset file formats: IDX (the MNIST family) and CIFAR-10's pickled batches, read into
:class:`ArrayDataset` records without torchvision, with one-line errors for damaged files.

Where the files are found or downloaded from is :mod:`rltrain.supervised.datasets`.
"""

from __future__ import annotations

import gzip
import math
import pickle
import struct
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

import numpy as np
import torch

from rltrain.errors import RLTrainError

NUM_CLASSES = 10


def one_line(exc: BaseException, limit: int = 200) -> str:
    """A short single-line description of an exception, for one-line error messages."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DatasetError(RLTrainError):
    """Missing or corrupt dataset files.

    The message is a single line that names what is wrong (usually a file or folder) and what the
    user should do about it, so it can be shown as-is by the CLI.
    """


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """An in-memory labelled image set: ``images`` uint8 [N, C, H, W], ``labels`` int64 [N].

    Images stay uint8 (4x smaller than float32); normalisation happens per batch on the device.
    """

    images: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        """Reject tensors of the wrong dtype/rank early, where the mistake is easy to locate."""
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise ValueError(
                "images must be uint8 [N, C, H, W], "
                f"got {self.images.dtype} {tuple(self.images.shape)}"
            )
        if self.labels.dtype != torch.int64 or self.labels.dim() != 1:
            raise ValueError(
                f"labels must be int64 [N], got {self.labels.dtype} {tuple(self.labels.shape)}"
            )
        if self.images.shape[0] != self.labels.shape[0]:
            raise ValueError(f"{self.images.shape[0]} images but {self.labels.shape[0]} labels")

    def __len__(self) -> int:
        """Number of examples."""
        return int(self.labels.shape[0])


_MNIST_SIDE = 28


_IDX_UBYTE = 0x08


IDX_FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


CIFAR_DIR = "cifar-10-batches-py"


CIFAR_TAR = "cifar-10-python.tar.gz"


CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))


CIFAR_TEST = "test_batch"


_CIFAR_SHAPE = (3, 32, 32)


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file of unsigned bytes into an array shaped by its header.

    The file is gunzipped when it holds gzip data (whatever its name says) and read raw
    otherwise. The magic number (two zero bytes, type code 0x08 for ubyte, number of dims),
    the dims and the payload length are all checked, because a truncated download would
    otherwise surface as a confusing reshape error far from its cause. Any problem raises
    :class:`DatasetError` naming the file.
    """
    path = Path(path)
    data = _read_file_bytes(path)
    dims, offset = _parse_idx_header(path, data)
    expected = math.prod(dims)
    if len(data) - offset != expected:
        raise DatasetError(
            f"{path}: IDX payload is {len(data) - offset} bytes but dims {dims} need {expected} "
            "(truncated or corrupt file); delete it and download it again"
        )
    return np.frombuffer(data, dtype=np.uint8, count=expected, offset=offset).reshape(dims).copy()


GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of gzip data (an IDX file begins with two zero bytes)."""


def _read_file_bytes(path: Path) -> bytes:
    """Whole content of ``path``, gunzipped if it begins with :data:`GZIP_MAGIC`. The bytes
    decide, not the name (explore100): an intact IDX file named ``.gz`` (a browser keeps the
    name of a gzip it was served decompressed) was called corrupt, to be downloaded again,
    and gzip data without ``.gz`` a bad IDX magic number."""
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except (PermissionError, IsADirectoryError) as exc:  # not corrupt: downloading won't help
        raise DatasetError(f"{path}: cannot read ({one_line(exc)})") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(
            f"{path}: cannot read ({one_line(exc)}); the file is corrupt or truncated, "
            "delete it and download it again"
        ) from exc


def _parse_idx_header(path: Path, data: bytes) -> tuple[tuple[int, ...], int]:
    """Validate the IDX magic number and return ``(dims, payload offset)``."""
    if len(data) < 4:
        raise DatasetError(f"{path}: {len(data)} bytes is too short for an IDX header (truncated)")
    zeros, type_code, ndim = struct.unpack(">HBB", data[:4])
    if zeros != 0 or type_code != _IDX_UBYTE or ndim == 0:
        raise DatasetError(
            f"{path}: bad IDX magic number 0x{data[:4].hex()} (expected 0x000008 followed by the "
            "number of dims); this is not an unsigned-byte IDX file"
        )
    offset = 4 + 4 * ndim
    if len(data) < offset:
        raise DatasetError(f"{path}: IDX header announces {ndim} dims but the file is truncated")
    return struct.unpack(f">{ndim}I", data[4:offset]), offset


def idx_names(gz_name: str) -> tuple[str, ...]:
    """The names an IDX file of :data:`IDX_FILES` is read under, best first: the published
    one, uncompressed, and Kaggle's dotted spelling (``train-images.idx3-ubyte``, also what
    some unzippers make of the originals), gzipped or not. explore100: a complete copy under
    the dotted names was reported missing, or swapped for the system's Fashion-MNIST."""
    raw = gz_name.removesuffix(".gz")
    dotted = raw.replace("-idx", ".idx")
    return (gz_name, raw, f"{dotted}.gz", dotted)


def idx_candidates(directory: Path, gz_name: str) -> list[Path]:
    """What ``directory`` holds under any of :func:`idx_names` (in any letter case; files,
    folders or broken links alike), best first: the exact names before other cases."""
    names = idx_names(gz_name)
    try:
        listed = [p.name for p in directory.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except PermissionError:  # searchable but not listable: the exact names, as they stand
        listed = [n for n in names if (directory / n).exists() or (directory / n).is_symlink()]
    found = [n for n in listed if n.lower() in names]
    found.sort(key=lambda n: (n not in names, names.index(n.lower())))
    return [directory / n for n in found]


def idx_path(directory: Path, gz_name: str) -> Path | None:
    """The best file of :func:`idx_candidates` (the published ``.gz`` name first)."""
    return next((p for p in idx_candidates(directory, gz_name) if p.is_file()), None)


def has_idx_set(directory: Path) -> bool:
    """Whether ``directory`` holds all four MNIST-format files (gz or raw)."""
    return all(idx_path(directory, name) is not None for name in IDX_FILES.values())


def read_idx_split(directory: Path) -> tuple[ArrayDataset, ArrayDataset]:
    """Read and validate the train and test splits of an MNIST-format folder."""
    train = _idx_pair(directory, IDX_FILES["train_images"], IDX_FILES["train_labels"])
    test = _idx_pair(directory, IDX_FILES["test_images"], IDX_FILES["test_labels"])
    return train, test


def read_idx_copy(directory: Path, gz_name: str) -> tuple[Path, np.ndarray]:
    """The first of the file's copies in ``directory`` (:func:`idx_candidates`) that reads,
    and its array. explore100: a truncated ``.gz`` beside its intact uncompressed twin was
    to be deleted and downloaded again (impossible offline), the twin never read. Where no
    copy reads, the error is the best one's."""
    copies = [p for p in idx_candidates(directory, gz_name) if p.is_file()]
    if not copies:
        raise DatasetError(f"{directory}: missing {gz_name} (or its uncompressed version)")
    errors: list[DatasetError] = []
    for path in copies:
        try:
            return path, read_idx(path)
        except DatasetError as e:
            errors.append(e)
    raise errors[0]


def _idx_pair(directory: Path, images_name: str, labels_name: str) -> ArrayDataset:
    """Images [N, 28, 28] + labels [N] from two IDX files -> ArrayDataset [N, 1, 28, 28]."""
    images_path, images = read_idx_copy(directory, images_name)
    if images.ndim != 3 or images.shape[1:] != (_MNIST_SIDE, _MNIST_SIDE):
        raise DatasetError(
            f"{images_path}: expected images of shape N x 28 x 28, got {images.shape}; "
            "this is not an MNIST-format image file"
        )
    _check_some(images_path, images.shape[0])
    labels_path, labels = read_idx_copy(directory, labels_name)
    if labels.ndim != 1:
        raise DatasetError(f"{labels_path}: expected a 1-D label file, got shape {labels.shape}")
    _check_labels(labels_path, labels, images.shape[0])
    return ArrayDataset(
        images=torch.from_numpy(images).unsqueeze(1),
        labels=torch.from_numpy(labels.astype(np.int64)),
    )


def _check_some(source: Path | str, num_images: int) -> None:
    """A file of no images is a truncated download or a stub: nothing could train (batches
    of at most 0) or be tested (an accuracy of 0.0000, said as a result)."""
    if num_images == 0:
        raise DatasetError(f"{source}: holds no images (0 in its header); download it again")


def _check_labels(source: Path | str, labels: np.ndarray, num_images: int) -> None:
    """Labels must match the image count and lie in ``[0, num_classes)``."""
    if labels.shape[0] != num_images:
        raise DatasetError(
            f"{source}: {labels.shape[0]} labels for {num_images} images; "
            "the image and label files do not belong together"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise DatasetError(
            f"{source}: labels must lie in [0, {NUM_CLASSES}), "
            f"found [{labels.min()}, {labels.max()}]"
        )


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that only builds what a CIFAR batch contains (dicts, lists, numpy arrays).

    Pickles can run arbitrary code; restricting the globals keeps a tampered archive from doing so.
    """

    _ALLOWED = frozenset(
        {
            ("_codecs", "encode"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"),
            # protocol 5 (Python 3.14's default): an array is _frombuffer(bytes, dtype, shape)
            ("numpy.core.numeric", "_frombuffer"),
            ("numpy._core.numeric", "_frombuffer"),
        }
    )

    def find_class(self, module: str, name: str) -> Any:
        """Resolve only allow-listed globals."""
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"unexpected global {module}.{name} in a CIFAR batch")
        return super().find_class(module, name)


def read_cifar10(path: str | Path) -> tuple[ArrayDataset, ArrayDataset]:
    """Read CIFAR-10's python version into ``(train, test)``, images uint8 [N, 3, 32, 32].

    ``path`` is either the extracted ``cifar-10-batches-py/`` folder or the
    ``cifar-10-python.tar.gz`` archive, whose members are read in place (no extraction, so the
    download is the only copy on disk). Each batch is a pickle holding ``b'data'`` (uint8 rows of
    3072 = R plane, G plane, B plane, each 32x32 row-major) and ``b'labels'``.
    """
    path = Path(path)
    if path.is_dir():
        batches = {name: _load_batch_file(path / name) for name in (*CIFAR_TRAIN, CIFAR_TEST)}
    elif path.is_file():
        batches = _load_batches_from_tar(path)
    else:
        raise DatasetError(f"{path}: not found (expected {CIFAR_DIR}/ or {CIFAR_TAR})")
    train = _concat([batches[name] for name in CIFAR_TRAIN])
    return train, batches[CIFAR_TEST]


def _load_batch_file(path: Path) -> ArrayDataset:
    """One CIFAR batch from a pickle file on disk."""
    try:
        with path.open("rb") as f:
            return _load_batch(f, str(path))
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found; the CIFAR-10 folder is incomplete") from None
    except OSError as exc:  # unreadable, a folder, ...
        raise DatasetError(f"{path}: cannot read ({one_line(exc)})") from None


def _load_batches_from_tar(path: Path) -> dict[str, ArrayDataset]:
    """All six CIFAR batches, read straight from the tar archive's members."""
    wanted = {*CIFAR_TRAIN, CIFAR_TEST}
    batches: dict[str, ArrayDataset] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                name = PurePosixPath(member.name).name
                if member.isfile() and name in wanted and name not in batches:
                    f = tar.extractfile(member)
                    if f is not None:
                        batches[name] = _load_batch(f, f"{path}:{member.name}")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DatasetError(
            f"{path}: cannot read the archive ({one_line(exc)}); delete it and download it again"
        ) from exc
    missing = sorted(wanted - batches.keys())
    if missing:
        raise DatasetError(f"{path}: archive lacks {', '.join(missing)}; it is not CIFAR-10")
    return batches


def _load_batch(f: IO[bytes], source: str) -> ArrayDataset:
    """Unpickle one CIFAR batch (``encoding='bytes'``: the files were written by Python 2)."""
    try:
        obj = _ArrayUnpickler(f, encoding="bytes").load()
    except Exception as exc:  # corrupt pickles can raise almost any exception type
        raise DatasetError(
            f"{source}: not a readable CIFAR batch ({one_line(exc)}); download it again"
        ) from exc
    return _batch_to_dataset(obj, source)


def _batch_to_dataset(obj: object, source: str) -> ArrayDataset:
    """Validate an unpickled batch dict and reshape its rows to [N, 3, 32, 32]. Its keys are
    bytes in the published files (Python 2's str); a subset a user pickled from Python 3 has
    str keys, read alike."""
    if isinstance(obj, dict):
        obj = {k.encode() if isinstance(k, str) else k: v for k, v in obj.items()}
    if not isinstance(obj, dict) or b"data" not in obj or b"labels" not in obj:
        raise DatasetError(f"{source}: expected a dict with b'data' and b'labels' (or str keys)")
    data = np.asarray(obj[b"data"])
    row = math.prod(_CIFAR_SHAPE)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != row:
        raise DatasetError(
            f"{source}: b'data' must be uint8 [N, {row}], got {data.dtype} {data.shape}"
        )
    labels = _integer_labels(obj[b"labels"], source)
    _check_some(source, data.shape[0])
    _check_labels(source, labels, data.shape[0])
    images = np.ascontiguousarray(data.reshape(-1, *_CIFAR_SHAPE))
    return ArrayDataset(images=torch.from_numpy(images), labels=torch.from_numpy(labels))


def _integer_labels(value: object, source: str) -> np.ndarray:
    """A batch's b'labels' as int64: a 1-D list or array of integers (CIFAR-10's is a list of
    ints); strings, None, floats (1.7 was read as 1) or a 2-D array (flattened into twice the
    labels) are refused in one line, not cast."""
    want = f"{source}: b'labels' must be a 1-D list of integers in [0, 10)"
    try:
        labels = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - ragged lists and the like
        raise DatasetError(f"{want} ({one_line(exc)})") from None
    if labels.ndim == 1 and (labels.size == 0 or np.issubdtype(labels.dtype, np.integer)):
        return labels.astype(np.int64)
    if labels.ndim == 0:
        got = type(value).__name__
    else:
        names = {"S": "bytes", "U": "str", "f": "float", "b": "bool", "O": "object"}
        got = f"{names.get(labels.dtype.kind, str(labels.dtype))} values"
        got += f" of shape {labels.shape}" if labels.ndim > 1 else ""
    raise DatasetError(f"{want}, got {got}")


def _concat(parts: list[ArrayDataset]) -> ArrayDataset:
    """Concatenate datasets in order."""
    return ArrayDataset(
        images=torch.cat([p.images for p in parts]), labels=torch.cat([p.labels for p in parts])
    )
