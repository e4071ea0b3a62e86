"""Tests for rltrain.supervised.datasets, on tiny files written in the real on-disk formats."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import struct
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rltrain.rundir import umask
from rltrain.supervised import datasets as ds
from rltrain.supervised.datasets import (
    DATASETS,
    FIRST_LABELS,
    ArrayDataset,
    DatasetError,
    SplitDataset,
    load_dataset,
    read_cifar10,
    read_idx,
)
from rltrain.supervised.sharding import shard_indices, take

MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
CIFAR_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
N_TRAIN, N_TEST, N_CIFAR_BATCH = 12, 5, 3


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """No system folders (the host may have Debian's Fashion-MNIST) and never the network."""
    monkeypatch.setattr(ds, "SYSTEM_DIRS", {})

    def offline(url: str, dest: Path, timeout: float) -> None:
        raise OSError("network unreachable (test)")

    monkeypatch.setattr(ds, "_fetch", offline)


# ---------------------------------------------------------------------------------------------
# Writers for the real formats
# ---------------------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as IDX: 0x0000, type 0x08, ndim, big-endian uint32 dims, payload."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim)
    dims = struct.pack(f">{array.ndim}I", *array.shape)
    return header + dims + array.astype(np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray) -> Path:
    """Write ``array`` as an IDX file, gzipped when the name ends with .gz."""
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


def mnist_arrays(seed: int) -> dict[str, np.ndarray]:
    """Tiny random MNIST-like splits keyed by file name."""
    rng = np.random.default_rng(seed)
    return {
        MNIST_FILES[0]: rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
        MNIST_FILES[1]: rng.integers(0, 10, N_TRAIN, dtype=np.uint8),
        MNIST_FILES[2]: rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        MNIST_FILES[3]: rng.integers(0, 10, N_TEST, dtype=np.uint8),
    }


def write_mnist(folder: Path, seed: int = 0, gz: bool = True) -> dict[str, np.ndarray]:
    """Write the four MNIST-format files into ``folder`` and return the arrays written."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = mnist_arrays(seed)
    for name, array in arrays.items():
        write_idx(folder / (name if gz else name.removesuffix(".gz")), array)
    return arrays


def cifar_batches(seed: int) -> dict[str, dict[bytes, object]]:
    """Tiny CIFAR batches: b'data' uint8 [n, 3072] and b'labels' list, as in the real files."""
    rng = np.random.default_rng(seed)
    return {
        name: {
            b"batch_label": name.encode(),
            b"data": rng.integers(0, 256, (N_CIFAR_BATCH, 3072), dtype=np.uint8),
            b"labels": [int(v) for v in rng.integers(0, 10, N_CIFAR_BATCH)],
        }
        for name in CIFAR_BATCHES
    }


def write_cifar_dir(
    folder: Path, seed: int = 0, protocol: int = 2
) -> dict[str, dict[bytes, object]]:
    """Write ``cifar-10-batches-py``-style pickles (the download's protocol 2) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    batches = cifar_batches(seed)
    for name, batch in batches.items():
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))
    return batches


def cifar_tar_bytes(batches: dict[str, dict[bytes, object]]) -> bytes:
    """A ``cifar-10-python.tar.gz`` holding ``cifar-10-batches-py/<batch>`` members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, batch in batches.items():
            payload = pickle.dumps(batch, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# read_idx
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["images-idx3-ubyte.gz", "images-idx3-ubyte"])
def test_read_idx_round_trip(tmp_path: Path, name: str) -> None:
    array = np.random.default_rng(1).integers(0, 256, (4, 28, 28), dtype=np.uint8)
    result = read_idx(write_idx(tmp_path / name, array))
    assert result.dtype == np.uint8
    np.testing.assert_array_equal(result, array)
    result[0, 0, 0] = 1  # the result must be writable (torch.from_numpy warns otherwise)


def test_read_idx_one_dim(tmp_path: Path) -> None:
    labels = np.arange(10, dtype=np.uint8)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "l.gz", labels)), labels)


@pytest.mark.parametrize(
    "magic", [b"\x00\x00\x0d\x03", b"\x01\x00\x08\x03", b"\x00\x00\x08\x00", b"PK\x03\x04"]
)
def test_read_idx_bad_magic(tmp_path: Path, magic: bytes) -> None:
    data = magic + idx_bytes(np.zeros((2, 3, 3), np.uint8))[4:]
    path = tmp_path / "bad-idx3-ubyte"
    path.write_bytes(data)
    with pytest.raises(DatasetError, match="magic") as info:
        read_idx(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("cut", [2, 9, 30])
def test_read_idx_truncated(tmp_path: Path, gz: bool, cut: int) -> None:
    data = idx_bytes(np.ones((2, 5, 5), np.uint8))[:-cut]
    path = tmp_path / ("t-idx3-ubyte.gz" if gz else "t-idx3-ubyte")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(DatasetError) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_read_idx_extra_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x-idx1-ubyte"
    path.write_bytes(idx_bytes(np.ones(3, np.uint8)) + b"\x00")
    with pytest.raises(DatasetError, match="payload"):
        read_idx(path)


def test_read_idx_truncated_gzip_stream(tmp_path: Path) -> None:
    path = tmp_path / "t-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.ones((20, 28, 28), np.uint8)))[:-40])
    with pytest.raises(DatasetError) as info:
        read_idx(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_read_idx_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        read_idx(tmp_path / "nope.gz")


# ---------------------------------------------------------------------------------------------
# load_dataset: MNIST family
# ---------------------------------------------------------------------------------------------


def assert_mnist_split(split: SplitDataset, arrays: dict[str, np.ndarray]) -> None:
    """The loaded split holds exactly ``arrays`` in [N, 1, 28, 28] uint8 / int64 form."""
    assert split.num_classes == 10
    assert split.train.images.shape == (N_TRAIN, 1, 28, 28)
    assert split.test.images.shape == (N_TEST, 1, 28, 28)
    assert split.train.images.dtype == torch.uint8
    assert split.train.labels.dtype == torch.int64
    assert len(split.train) == N_TRAIN and len(split.test) == N_TEST
    np.testing.assert_array_equal(split.train.images[:, 0].numpy(), arrays[MNIST_FILES[0]])
    np.testing.assert_array_equal(split.train.labels.numpy(), arrays[MNIST_FILES[1]])
    np.testing.assert_array_equal(split.test.images[:, 0].numpy(), arrays[MNIST_FILES[2]])
    np.testing.assert_array_equal(split.test.labels.numpy(), arrays[MNIST_FILES[3]])


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_load_mnist_like_from_root(tmp_path: Path, name: str) -> None:
    arrays = write_mnist(tmp_path / name, seed=2)
    lines: list[str] = []
    split = load_dataset(name, tmp_path, download=False, log=lines.append)
    assert split.name == name
    assert_mnist_split(split, arrays)
    expected = {"mnist": ((0.1307,), (0.3081,)), "fashion_mnist": ((0.2860,), (0.3530,))}
    assert (split.mean, split.std) == expected[name]
    assert len(lines) == 1 and str(tmp_path / name) in lines[0]


def test_load_mnist_uncompressed_from_raw(tmp_path: Path) -> None:
    arrays = write_mnist(tmp_path / "mnist" / "raw", seed=3, gz=False)
    assert_mnist_split(load_dataset("mnist", tmp_path, download=False), arrays)


def test_load_expands_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    arrays = write_mnist(tmp_path / "data" / "mnist", seed=4)
    assert_mnist_split(load_dataset("mnist", "~/data", download=False), arrays)


def test_fashion_mnist_system_dir_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "usr-share"
    arrays = write_mnist(system, seed=5)
    monkeypatch.setattr(ds, "SYSTEM_DIRS", {"fashion_mnist": (tmp_path / "empty", system)})
    lines: list[str] = []
    split = load_dataset("fashion_mnist", tmp_path / "root", download=False, log=lines.append)
    assert_mnist_split(split, arrays)
    assert lines[0].endswith(
        f"from {system} (data.root={tmp_path / 'root'} does not exist: the system's copy)"
    )  # (explore106: a typo's path "held none of its files")
    (tmp_path / "root").mkdir()
    load_dataset("fashion_mnist", tmp_path / "root", download=False, log=lines.append)
    assert lines[-1].endswith(
        f"(data.root={tmp_path / 'root'} holds none of its files: the system's copy)"
    )


def test_a_flat_copy_in_the_root_is_named_not_replaced_by_the_systems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data.root holding the four files itself trained on the system's copy without a word;
    it is named as one level off, unless it is the system's copy itself (data.root set to
    /usr/share/datasets/fashion-mnist), which is read as it is."""
    system = tmp_path / "system"
    arrays = write_mnist(system, seed=5)
    monkeypatch.setattr(ds, "SYSTEM_DIRS", {"fashion_mnist": (system,)})
    flat = tmp_path / "flat"
    write_mnist(flat, seed=6)
    with pytest.raises(DatasetError, match="holds MNIST-format files itself"):
        load_dataset("fashion_mnist", flat, download=False)
    lines: list[str] = []
    assert_mnist_split(load_dataset("fashion_mnist", system, False, lines.append), arrays)
    assert lines[0].endswith(f"images from {system}")


def test_root_takes_precedence_over_system_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_mnist(tmp_path / "system", seed=6)
    local = write_mnist(tmp_path / "root" / "fashion_mnist", seed=7)
    monkeypatch.setattr(ds, "SYSTEM_DIRS", {"fashion_mnist": (tmp_path / "system",)})
    assert_mnist_split(load_dataset("fashion_mnist", tmp_path / "root", download=False), local)


def test_unknown_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset("imagenet", tmp_path)
    for name in DATASETS:
        assert name in str(info.value)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_missing_files_no_download(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    write_mnist(folder)
    (folder / MNIST_FILES[2]).unlink()  # an incomplete folder does not count
    with pytest.raises(DatasetError) as info:
        load_dataset(name, tmp_path, download=False)
    message = str(info.value)
    assert "\n" not in message
    assert MNIST_FILES[2] in message and str(folder) in message
    assert "data.root" in message and "download disabled" in message
    assert "dataset-fashion-mnist" not in message  # the user's copy: not the system's


def test_a_partial_copy_in_the_root_is_never_replaced_by_the_systems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fashion-MNIST lacking a file (or holding a broken link) in data.root trained on the
    system's full copy without a word; the system's serves a root that holds none of it, and
    torchvision's layout (FashionMNIST/raw/) is read."""
    system = tmp_path / "system"
    write_mnist(system)
    monkeypatch.setitem(ds.SYSTEM_DIRS, "fashion_mnist", (system,))
    root = tmp_path / "root"
    write_mnist(root / "fashion_mnist")
    (root / "fashion_mnist" / MNIST_FILES[3]).unlink()
    (root / "fashion_mnist" / MNIST_FILES[3]).symlink_to(tmp_path / "gone")
    with pytest.raises(DatasetError, match=f"put {MNIST_FILES[3]}"):
        load_dataset("fashion_mnist", root, download=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert len(load_dataset("fashion_mnist", empty, download=False).train) > 0
    tv = tmp_path / "tv"
    write_mnist(tv / "FashionMNIST" / "raw")
    assert len(load_dataset("fashion_mnist", tv, download=False).train) > 0


def test_a_root_one_level_off_is_named(tmp_path: Path) -> None:
    """data.root given as the dataset's own folder, or with a file in the place of it."""
    write_mnist(tmp_path / "mnist")
    with pytest.raises(
        DatasetError, match=f"holds MNIST-format files itself, .*give its parent, {tmp_path} "
    ):
        load_dataset("mnist", tmp_path / "mnist", download=False)
    # Fashion-MNIST's files are named as MNIST's: which set a folder holds is not said as known
    with pytest.raises(DatasetError, match=r"mnist's or fashion_mnist's; .*data.dataset=fashion"):
        load_dataset("mnist", tmp_path / "mnist", download=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "mnist").write_text("not a folder")
    with pytest.raises(DatasetError, match="mnist is a file; mnist's files go in a folder"):
        load_dataset("mnist", other, download=False)


def write_mnist_as(folder: Path, names: dict[str, str], gzipped: set[str]) -> dict:
    """The four files under other ``names`` (by published name), gzip data for ``gzipped``."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = mnist_arrays(seed=8)
    for name, array in arrays.items():
        data = idx_bytes(array)
        (folder / names[name]).write_bytes(gzip.compress(data) if name in gzipped else data)
    return arrays


def test_the_bytes_decide_whether_a_file_is_gunzipped_not_its_name(tmp_path: Path) -> None:
    """explore100: an intact uncompressed file named .gz (a browser saved it decompressed)
    was "corrupt ... download it again", and gzip data named without .gz a bad magic."""
    swapped = {n: n.removesuffix(".gz") if n.endswith(".gz") else n for n in MNIST_FILES}
    swapped[MNIST_FILES[0]] = MNIST_FILES[0]  # raw bytes under the .gz name
    gzipped = {MNIST_FILES[1]}  # gzip bytes under the raw name
    arrays = write_mnist_as(tmp_path / "mnist", swapped, gzipped)
    assert not (tmp_path / "mnist" / MNIST_FILES[1]).exists()
    assert_mnist_split(load_dataset("mnist", tmp_path, download=False), arrays)


def test_a_damaged_gz_beside_an_intact_raw_twin_reads_the_twin(tmp_path: Path) -> None:
    """explore100: the truncated .gz was to be deleted and downloaded again (offline: not
    possible), its intact uncompressed twin beside it never read."""
    arrays = write_mnist(tmp_path / "mnist", seed=9)
    gz = tmp_path / "mnist" / MNIST_FILES[0]
    write_idx(gz.with_suffix(""), arrays[MNIST_FILES[0]])  # the intact twin
    gz.write_bytes(gz.read_bytes()[:-40])
    assert_mnist_split(load_dataset("mnist", tmp_path, download=False), arrays)
    (gz.with_suffix("")).write_bytes(b"\x00\x00\x08")  # both damaged: the .gz's error
    with pytest.raises(DatasetError, match=f"{gz}: cannot read"):
        load_dataset("mnist", tmp_path, download=False)


def test_kaggles_dotted_names_are_the_users_copy_in_any_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore100: train-images.idx3-ubyte and friends (Kaggle's uploads) were not read: MNIST
    was "not found", and Fashion-MNIST silently swapped for the system's copy."""
    system = tmp_path / "system"
    write_mnist(system, seed=10)
    monkeypatch.setattr(ds, "SYSTEM_DIRS", {"fashion_mnist": (system,)})
    dotted = {n: n.removesuffix(".gz").replace("-idx", ".idx") for n in MNIST_FILES}
    dotted[MNIST_FILES[3]] = dotted[MNIST_FILES[3]].upper()  # T10K-LABELS.IDX1-UBYTE
    for name in ("mnist", "fashion_mnist"):
        arrays = write_mnist_as(tmp_path / "kaggle" / name, dotted, {MNIST_FILES[2]})
        lines: list[str] = []
        split = load_dataset(name, tmp_path / "kaggle", download=False, log=lines.append)
        assert_mnist_split(split, arrays)
        assert lines[0].endswith(f"from {tmp_path / 'kaggle' / name}")
    # one of them missing: the user's copy, completed or named, never the system's
    (tmp_path / "kaggle" / "fashion_mnist" / dotted[MNIST_FILES[0]]).unlink()
    with pytest.raises(DatasetError, match=f"put {MNIST_FILES[0]} \\(from"):
        load_dataset("fashion_mnist", tmp_path / "kaggle", download=False)


def test_a_partial_copy_is_named_in_the_folder_it_is_in(tmp_path: Path) -> None:
    """explore100: torchvision's FashionMNIST/raw/ holding the test files alone: the error
    named root/fashion_mnist/ and all four files."""
    raw = tmp_path / "FashionMNIST" / "raw"
    write_mnist(raw)
    for name in MNIST_FILES[:2]:
        (raw / name).unlink()
    with pytest.raises(DatasetError) as info:
        load_dataset("fashion_mnist", tmp_path, download=False)
    message = str(info.value)
    assert f"put {MNIST_FILES[0]}, {MNIST_FILES[1]} (from " in message
    assert f"into {raw} (where its other files are, under data.root={tmp_path})" in message
    assert MNIST_FILES[2] not in message and "dataset-fashion-mnist" not in message


def test_missing_files_lists_all_when_empty(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", tmp_path, download=False)
    assert all(f in str(info.value) for f in MNIST_FILES)
    assert ds.BASE_URLS["mnist"] in str(info.value)


def test_what_holds_a_files_name_is_said(tmp_path: Path) -> None:
    """A folder, or a broken link, where a data file goes: the message said only to put the
    file there."""
    folder = tmp_path / "mnist"
    write_mnist(folder)
    (folder / MNIST_FILES[1]).unlink()
    (folder / MNIST_FILES[1]).mkdir()
    with pytest.raises(DatasetError, match="is a folder, not the file: remove it") as info:
        load_dataset("mnist", tmp_path, download=False)
    assert str(folder / MNIST_FILES[1]) in str(info.value)
    (folder / MNIST_FILES[1]).rmdir()
    (folder / MNIST_FILES[1]).symlink_to(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="is a broken link: remove it"):
        load_dataset("mnist", tmp_path, download=False)


def test_wrong_image_shape(tmp_path: Path) -> None:
    folder = tmp_path / "mnist"
    write_mnist(folder)
    bad = write_idx(folder / MNIST_FILES[0], np.zeros((N_TRAIN, 32, 32), np.uint8))
    with pytest.raises(DatasetError, match="28 x 28") as info:
        load_dataset("mnist", tmp_path, download=False)
    assert str(bad) in str(info.value)


@pytest.mark.parametrize("index", [0, 2])  # the training images, the test images
def test_a_split_of_no_images_is_named(tmp_path: Path, index: int) -> None:
    """An empty training set said "use a batch_size of at most 0"; an empty test set was
    taken, and every mode's accuracy reported as 0.0000."""
    folder = tmp_path / "mnist"
    write_mnist(folder)
    bad = write_idx(folder / MNIST_FILES[index], np.zeros((0, 28, 28), np.uint8))
    write_idx(folder / MNIST_FILES[index + 1], np.zeros(0, np.uint8))
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", tmp_path, download=False)
    assert str(info.value) == f"{bad}: holds no images (0 in its header); download it again"


def test_an_empty_cifar_batch_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_dir(folder, seed=17)
    empty = {b"data": np.zeros((0, 3072), np.uint8), b"labels": []}
    (folder / "test_batch").write_bytes(pickle.dumps(empty, protocol=4))
    with pytest.raises(DatasetError, match="holds no images") as info:
        read_cifar10(folder)
    assert str(folder / "test_batch") in str(info.value)


@pytest.mark.parametrize(
    ("labels", "got"),
    [
        ([b"cat"] * 20, "got bytes values"),
        (None, "got NoneType"),
        ([1.7] * 20, "got float values"),  # (was cast to 1)
        (np.zeros((10, 2), np.int64), "got int64 values of shape (10, 2)"),  # (was flattened)
    ],
)
def test_cifar_labels_that_are_not_integers_are_one_line(
    tmp_path: Path, labels: object, got: str
) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_dir(folder, seed=17)
    bad = {b"data": np.zeros((20, 3072), np.uint8), b"labels": labels}
    (folder / "test_batch").write_bytes(pickle.dumps(bad, protocol=4))
    with pytest.raises(DatasetError) as info:
        read_cifar10(folder)
    want = "test_batch: b'labels' must be a 1-D list of integers in [0, 10), " + got
    assert str(info.value).endswith(want)


def test_label_count_mismatch(tmp_path: Path) -> None:
    folder = tmp_path / "mnist"
    write_mnist(folder)
    bad = write_idx(folder / MNIST_FILES[3], np.zeros(N_TEST + 1, np.uint8))
    with pytest.raises(DatasetError, match="labels for") as info:
        load_dataset("mnist", tmp_path, download=False)
    assert str(bad) in str(info.value)


def test_label_out_of_range(tmp_path: Path) -> None:
    folder = tmp_path / "mnist"
    write_mnist(folder)
    bad = write_idx(folder / MNIST_FILES[1], np.full(N_TRAIN, 10, np.uint8))
    with pytest.raises(DatasetError, match=r"\[0, 10\)") as info:
        load_dataset("mnist", tmp_path, download=False)
    assert str(bad) in str(info.value)


# ---------------------------------------------------------------------------------------------
# Downloads (``_fetch`` monkeypatched; never the network)
# ---------------------------------------------------------------------------------------------


def test_an_unreadable_file_is_not_called_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_mnist(tmp_path / "mnist")
    read = Path.read_bytes

    def denied(self: Path) -> bytes:  # (tests run as root, whom chmod does not stop)
        if self.name.startswith("train-labels"):
            raise PermissionError(13, "Permission denied", str(self))
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", tmp_path, download=False)
    message = str(info.value)
    assert "Permission denied" in message and "train-labels" in message
    assert "corrupt" not in message and "\n" not in message


def test_download_offline(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", tmp_path, download=True)
    message = str(info.value)
    assert "\n" not in message
    assert "download failed" in message and "network unreachable" in message
    assert str(tmp_path / "mnist") in message
    assert not (tmp_path / "mnist").exists()  # an offline try leaves no empty folder
    with pytest.raises(DatasetError):  # nor a data.root it made, nor the folders above it
        load_dataset("mnist", tmp_path / "new" / "data", download=True)
    assert not (tmp_path / "new").exists() and tmp_path.is_dir()


def test_download_checksum_mismatch_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def wrong(url: str, dest: Path, timeout: float) -> None:
        dest.write_bytes(b"<html>not the file</html>")

    monkeypatch.setattr(ds, "_fetch", wrong)
    with pytest.raises(DatasetError, match="checksum mismatch") as info:
        load_dataset("fashion_mnist", tmp_path)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "fashion_mnist").exists()


def test_download_failure_midway_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def partial(url: str, dest: Path, timeout: float) -> None:
        dest.write_bytes(b"half")
        raise TimeoutError("timed out")

    monkeypatch.setattr(ds, "_fetch", partial)
    with pytest.raises(DatasetError, match="timed out"):
        load_dataset("mnist", tmp_path)
    assert not (tmp_path / "mnist").exists()


def served(files: dict[str, bytes], calls: list[str]):
    """A fake ``_fetch`` serving ``files`` by the URL's last path component."""

    def fetch(url: str, dest: Path, timeout: float) -> None:
        calls.append(url)
        assert timeout > 0
        dest.write_bytes(files[url.rsplit("/", 1)[-1]])

    return fetch


def test_download_success_mnist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arrays = mnist_arrays(seed=8)
    files = {name: gzip.compress(idx_bytes(a), mtime=0) for name, a in arrays.items()}
    sums = {name: hashlib.md5(data).hexdigest() for name, data in files.items()}
    monkeypatch.setitem(ds.CHECKSUMS, "mnist", sums)
    calls: list[str] = []
    monkeypatch.setattr(ds, "_fetch", served(files, calls))
    lines: list[str] = []
    split = load_dataset("mnist", tmp_path, log=lines.append)
    assert_mnist_split(split, arrays)
    assert calls == [ds.BASE_URLS["mnist"] + name for name in MNIST_FILES]
    assert sorted(p.name for p in (tmp_path / "mnist").iterdir()) == sorted(MNIST_FILES)
    mode = 0o666 & ~umask()  # as any file this user makes: others sharing data.root read it
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "mnist").iterdir()} == {mode}
    assert len(lines) == len(MNIST_FILES) + 1
    # A second load finds the files locally and fetches nothing.
    calls.clear()
    assert_mnist_split(load_dataset("mnist", tmp_path), arrays)
    assert calls == []


def test_download_only_missing_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arrays = write_mnist(tmp_path / "mnist", seed=9)
    (tmp_path / "mnist" / MNIST_FILES[1]).unlink()
    data = gzip.compress(idx_bytes(arrays[MNIST_FILES[1]]), mtime=0)
    monkeypatch.setitem(
        ds.CHECKSUMS,
        "mnist",
        {**ds.CHECKSUMS["mnist"], MNIST_FILES[1]: hashlib.md5(data).hexdigest()},
    )
    calls: list[str] = []
    monkeypatch.setattr(ds, "_fetch", served({MNIST_FILES[1]: data}, calls))
    assert_mnist_split(load_dataset("mnist", tmp_path), arrays)
    assert calls == [ds.BASE_URLS["mnist"] + MNIST_FILES[1]]


def test_download_success_cifar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = cifar_tar_bytes(cifar_batches(seed=10))
    monkeypatch.setitem(
        ds.CHECKSUMS, "cifar10", {"cifar-10-python.tar.gz": hashlib.md5(data).hexdigest()}
    )
    calls: list[str] = []
    monkeypatch.setattr(ds, "_fetch", served({"cifar-10-python.tar.gz": data}, calls))
    split = load_dataset("cifar10", tmp_path)
    assert calls == ["https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"]
    assert (tmp_path / "cifar10" / "cifar-10-python.tar.gz").read_bytes() == data
    assert len(split.train) == 5 * N_CIFAR_BATCH


# ---------------------------------------------------------------------------------------------
# CIFAR-10
# ---------------------------------------------------------------------------------------------


def assert_cifar(train: ArrayDataset, test: ArrayDataset, batches: dict) -> None:
    """Layout check: row = R plane, G plane, B plane, each 32x32 row-major."""
    assert train.images.shape == (5 * N_CIFAR_BATCH, 3, 32, 32)
    assert test.images.shape == (N_CIFAR_BATCH, 3, 32, 32)
    assert train.images.dtype == torch.uint8 and train.labels.dtype == torch.int64
    rows = np.concatenate([batches[f"data_batch_{i}"][b"data"] for i in range(1, 6)])
    labels = sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    assert train.labels.tolist() == labels
    assert test.labels.tolist() == batches["test_batch"][b"labels"]
    # Known pixel: image 4, green channel, y=5, x=7 is column 1024 + 5 * 32 + 7 of row 4.
    assert int(train.images[4, 1, 5, 7]) == int(rows[4, 1024 + 5 * 32 + 7])
    assert int(train.images[0, 2, 31, 0]) == int(rows[0, 2048 + 31 * 32])
    for c in range(3):
        expected = rows[:, c * 1024 : (c + 1) * 1024].reshape(-1, 32, 32)
        np.testing.assert_array_equal(train.images[:, c].numpy(), expected)


@pytest.mark.parametrize("protocol", [2, 5])  # the download's; Python 3.14's default
def test_read_cifar10_directory(tmp_path: Path, protocol: int) -> None:
    batches = write_cifar_dir(tmp_path / "cifar-10-batches-py", seed=11, protocol=protocol)
    assert_cifar(*read_cifar10(tmp_path / "cifar-10-batches-py"), batches)


def test_a_cifar_subset_pickled_from_python_3_is_read(tmp_path: Path) -> None:
    """A user's own subset in the real layout, pickled with str keys ('data', 'labels'), was
    refused as not a CIFAR batch."""
    folder = tmp_path / "cifar-10-batches-py"
    batches = write_cifar_dir(folder, seed=13)
    for name, batch in batches.items():
        own = {k.decode(): v for k, v in batch.items()}
        (folder / name).write_bytes(pickle.dumps(own))
    assert_cifar(*read_cifar10(folder), batches)


def test_read_cifar10_tar(tmp_path: Path) -> None:
    batches = cifar_batches(seed=12)
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(cifar_tar_bytes(batches))
    assert_cifar(*read_cifar10(archive), batches)
    assert sorted(p.name for p in tmp_path.iterdir()) == [archive.name]  # nothing extracted


def test_read_cifar10_known_pixel_value(tmp_path: Path) -> None:
    batches = cifar_batches(seed=13)
    data = np.zeros((N_CIFAR_BATCH, 3072), np.uint8)
    data[1, 2 * 1024 + 3 * 32 + 9] = 200  # image 1, blue, y=3, x=9
    batches["test_batch"][b"data"] = data
    write_dir = tmp_path / "cifar-10-batches-py"
    write_dir.mkdir()
    for name, batch in batches.items():
        (write_dir / name).write_bytes(pickle.dumps(batch, protocol=2))
    _, test = read_cifar10(write_dir)
    assert int(test.images[1, 2, 3, 9]) == 200
    assert int(test.images.sum()) == 200


@pytest.mark.parametrize("layout", ["dir", "tar", "torchvision dir", "torchvision tar"])
def test_load_cifar10(tmp_path: Path, layout: str) -> None:
    """Under data.root/cifar10/, or as torchvision's CIFAR10(root) leaves it (it was refused
    as a root one level off)."""
    batches = cifar_batches(seed=14)
    base = tmp_path if layout.startswith("torchvision") else tmp_path / "cifar10"
    if layout.endswith("dir"):
        write_cifar_dir(base / "cifar-10-batches-py", seed=14)
    else:
        base.mkdir(exist_ok=True)
        (base / "cifar-10-python.tar.gz").write_bytes(cifar_tar_bytes(batches))
    split = load_dataset("cifar10", tmp_path, download=False)
    assert split.num_classes == 10
    assert split.mean == (0.4914, 0.4822, 0.4465) and split.std == (0.2470, 0.2435, 0.2616)
    assert_cifar(split.train, split.test, batches)


def test_cifar_missing_no_download(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset("cifar10", tmp_path, download=False)
    message = str(info.value)
    assert "cifar-10-python.tar.gz" in message and str(tmp_path / "cifar10") in message
    assert "\n" not in message


@pytest.mark.parametrize("under", ["cifar10", "."])
def test_cifar_folder_missing_a_batch_names_it(tmp_path: Path, under: str) -> None:
    write_cifar_dir(tmp_path / under / "cifar-10-batches-py", seed=15)
    (tmp_path / under / "cifar-10-batches-py" / "data_batch_5").unlink()
    with pytest.raises(DatasetError, match="cifar-10-batches-py lacks data_batch_5"):
        load_dataset("cifar10", tmp_path, download=False)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("data/cifar10/cifar-10-batches-py", "is CIFAR-10's cifar-10-batches-py/ folder itself; "
         "give the folder above it: {tmp}/data"),
        ("data/cifar-10-batches-py", "folder itself; give the folder above it: {tmp}/data"),
        ("data", "{tmp}/data holds CIFAR-10's batch files (data_batch_1, data_batch_2, "
         "data_batch_3, data_batch_4, data_batch_5, test_batch) without their "
         "cifar-10-batches-py/ folder: move them into {tmp}/data/cifar10/cifar-10-batches-py"),
        ("data/cifar10", "{tmp}/data/cifar10 holds CIFAR-10's batch files (data_batch_1, "),
    ],
)  # fmt: skip
def test_a_root_that_is_cifars_batch_folder_is_named_before_any_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, said: str
) -> None:
    """explore100: data.root given as the extracted folder, or a folder of the six batch files
    without it, got an error naming a folder nested in it, after a 163 MB download into it."""
    calls: list[str] = []
    monkeypatch.setattr(ds, "_fetch", lambda url, dest, timeout: calls.append(url))
    write_cifar_dir(tmp_path / given, seed=20)
    if given == "data/cifar10":  # the files flat in data/cifar10: data.root=data
        given = "data"
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(DatasetError) as info:
        load_dataset("cifar10", tmp_path / given, download=True)
    assert said.format(tmp=tmp_path) in str(info.value)
    assert calls == [] and sorted(tmp_path.rglob("*")) == before


def test_a_root_that_is_cifars_archive_names_its_folder(tmp_path: Path) -> None:
    archive = tmp_path / "data" / "cifar10" / "cifar-10-python.tar.gz"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(cifar_tar_bytes(cifar_batches(seed=21)))
    with pytest.raises(
        DatasetError, match=f"is a file; it must be a folder .*: give {tmp_path}/data$"
    ):
        load_dataset("cifar10", archive, download=False)


def test_an_empty_data_root_is_refused() -> None:
    with pytest.raises(DatasetError) as info:  # (it read the working folder)
        load_dataset("mnist", "", download=False)
    assert str(info.value) == "data.root='': give the folder that holds mnist/"


def test_data_root_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("x: 1\n")
    with pytest.raises(DatasetError, match=r"config.yaml is a file; it must be a folder"):
        load_dataset("mnist", tmp_path / "config.yaml", download=False)


def test_cifar_tar_missing_member(tmp_path: Path) -> None:
    batches = cifar_batches(seed=15)
    del batches["data_batch_3"]
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(cifar_tar_bytes(batches))
    with pytest.raises(DatasetError, match="data_batch_3") as info:
        read_cifar10(archive)
    assert str(archive) in str(info.value)


def test_cifar_corrupt_tar(tmp_path: Path) -> None:
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(cifar_tar_bytes(cifar_batches(seed=16))[:200])
    with pytest.raises(DatasetError) as info:
        read_cifar10(archive)
    assert str(archive) in str(info.value)


def test_cifar_bad_batch_shape(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_dir(folder, seed=17)
    bad = {b"data": np.zeros((2, 1000), np.uint8), b"labels": [0, 1]}
    (folder / "data_batch_2").write_bytes(pickle.dumps(bad, protocol=2))
    with pytest.raises(DatasetError, match="3072") as info:
        read_cifar10(folder)
    assert str(folder / "data_batch_2") in str(info.value)


def test_cifar_pickle_globals_restricted(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_dir(folder, seed=18)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": print}, protocol=2))
    with pytest.raises(DatasetError, match="test_batch"):
        read_cifar10(folder)


def test_cifar_legacy_numpy_core_pickle(tmp_path: Path) -> None:
    """The real batches were pickled by numpy 1.x, whose arrays reference ``numpy.core``."""
    folder = tmp_path / "cifar-10-batches-py"
    batches = write_cifar_dir(folder, seed=19)
    legacy = pickle.dumps(batches["test_batch"], protocol=2)
    legacy = legacy.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert b"numpy.core.multiarray" in legacy
    (folder / "test_batch").write_bytes(legacy)
    _, test = read_cifar10(folder)
    assert test.labels.tolist() == batches["test_batch"][b"labels"]


# ---------------------------------------------------------------------------------------------
# shard_indices / take
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "shards"), [(10, 3), (7, 7), (5, 8), (0, 2), (1000, 4)])
def test_shard_indices_disjoint_covering_balanced(n: int, shards: int) -> None:
    parts = [shard_indices(n, shards, s, seed=42) for s in range(shards)]
    assert all(p.dtype == torch.int64 for p in parts)
    joined = torch.cat(parts)
    assert sorted(joined.tolist()) == list(range(n))  # disjoint and covering
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_shard_indices_deterministic_and_seeded() -> None:
    a = shard_indices(100, 4, 1, seed=7)
    assert torch.equal(a, shard_indices(100, 4, 1, seed=7))
    assert not torch.equal(a, shard_indices(100, 4, 1, seed=8))
    assert not torch.equal(torch.sort(a).values, torch.arange(25) + 25)  # permuted, not a slice


@pytest.mark.parametrize(
    ("n", "shards", "shard"), [(-1, 2, 0), (10, 0, 0), (10, 2, 2), (10, 2, -1), (10.0, 2, 0)]
)
def test_shard_indices_bad_arguments(n: object, shards: int, shard: int) -> None:
    with pytest.raises(ValueError):
        shard_indices(n, shards, shard, seed=0)  # type: ignore[arg-type]


def test_take() -> None:
    images = torch.arange(6 * 2 * 2, dtype=torch.uint8).reshape(6, 1, 2, 2)
    full = ArrayDataset(images=images, labels=torch.arange(6))
    part = take(full, torch.tensor([4, 1]))
    assert len(part) == 2
    assert part.labels.tolist() == [4, 1]
    assert torch.equal(part.images[0], images[4])


def test_array_dataset_validates() -> None:
    with pytest.raises(ValueError):
        ArrayDataset(images=torch.zeros(2, 1, 2, 2), labels=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError):
        ArrayDataset(
            images=torch.zeros(2, 1, 2, 2, dtype=torch.uint8), labels=torch.zeros(3).long()
        )


@pytest.mark.parametrize("name, other", [("mnist", "fashion_mnist"), ("fashion_mnist", "mnist")])
def test_another_sets_files_under_a_name_are_refused_by_their_labels(
    tmp_path: Path, name: str, other: str
) -> None:
    """explore94: the real Fashion-MNIST files under mnist/ loaded and ran as MNIST. The two
    share a format; their published first labels tell them apart."""
    images = np.zeros((12, 28, 28), dtype=np.uint8)
    train, test = (np.array([*first, 0, 1], dtype=np.uint8) for first in FIRST_LABELS[other])
    arrays = dict(zip(MNIST_FILES, (images, train, images, test), strict=True))
    (tmp_path / name).mkdir()
    for file, array in arrays.items():
        write_idx(tmp_path / name / file, array)
    with pytest.raises(DatasetError, match=f"holds {other}'s files, not {name}'s") as e:
        load_dataset(name, tmp_path, download=False)
    assert f"set data.dataset={other}" in str(e.value) and "\n" not in str(e.value)
    write_mnist(tmp_path / other, seed=5)  # random labels: loaded as ever
    assert len(load_dataset(other, tmp_path, download=False).train) == N_TRAIN


def test_a_flat_copy_whose_labels_name_its_set_is_read_in_place(tmp_path: Path) -> None:
    """explore110: a copy of Debian's fashion-mnist folder (the four files, no fashion_mnist/
    under it) was refused, though the system's own is read as it is; the labels tell the set."""
    images = np.zeros((12, 28, 28), dtype=np.uint8)
    train, test = (np.array([*f, 0, 1], dtype=np.uint8) for f in FIRST_LABELS["fashion_mnist"])
    (tmp_path / "copy").mkdir()
    for file, array in zip(MNIST_FILES, (images, train, images, test), strict=True):
        write_idx(tmp_path / "copy" / file, array)
    lines: list[str] = []
    data = load_dataset("fashion_mnist", tmp_path / "copy", download=False, log=lines.append)
    assert len(data.train) == 12 and lines == [
        f"fashion_mnist: 12 train / 12 test images from {tmp_path / 'copy'}"
    ]
    with pytest.raises(DatasetError, match="holds MNIST-format files itself"):
        load_dataset("mnist", tmp_path / "copy", download=False)  # Fashion's: not MNIST's


def test_a_long_download_says_how_far_it_has_come(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """explore100: CIFAR-10's 163 MB said nothing for minutes after "downloading" (the copy
    _fetch makes of the response; the network is never used here)."""
    from rltrain.supervised import downloads

    monkeypatch.setattr(downloads, "PROGRESS_S", 0.0)
    data, out = bytes(3 << 20), io.BytesIO()  # 3 MB, read a MB at a time
    downloads.copy_saying(io.BytesIO(data), out, len(data), "cifar-10-python.tar.gz")
    assert out.getvalue() == data
    said = capsys.readouterr().err.splitlines()
    shown = [(1, 33), (2, 67), (3, 100)]
    assert said == [f"  cifar-10-python.tar.gz: {m}.0 of 3.0 MB ({p}%)" for m, p in shown]
    downloads.copy_saying(io.BytesIO(data), io.BytesIO(), 0, "x")  # no Content-Length
    assert capsys.readouterr().err.splitlines()[-1] == "  x: 3.0 MB"


def test_workers_of_one_machine_download_the_data_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explore100: each worker of a cluster node downloaded the whole archive at once; the
    others now wait for the first, then find its files."""
    import threading

    arrays = mnist_arrays(seed=11)
    files = {name: gzip.compress(idx_bytes(a), mtime=0) for name, a in arrays.items()}
    monkeypatch.setitem(
        ds.CHECKSUMS, "mnist", {n: hashlib.md5(d).hexdigest() for n, d in files.items()}
    )
    calls: list[str] = []
    fetch = served(files, calls)

    def slow(url: str, dest: Path, timeout: float) -> None:
        time.sleep(0.05)  # (the others arrive while it downloads)
        fetch(url, dest, timeout)

    monkeypatch.setattr(ds, "_fetch", slow)
    loaded: list[object] = []
    workers = [
        threading.Thread(target=lambda: loaded.append(load_dataset("mnist", tmp_path)))
        for _ in range(4)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(loaded) == 4 and sorted(calls) == sorted(
        ds.BASE_URLS["mnist"] + n for n in MNIST_FILES
    )
    assert sorted(p.name for p in (tmp_path / "mnist").iterdir()) == sorted(MNIST_FILES)
