"""The standard image-classification datasets (MNIST, Fashion-MNIST, CIFAR-10): where their
files are, downloading them, and loading both splits.

The files are read in their published formats (IDX for the MNIST family, Python pickles for
CIFAR-10; :mod:`rltrain.supervised.formats`) so that supervised training needs nothing beyond
torch and numpy; torchvision is deliberately not a dependency. Data is looked up locally
first (including the copy that Debian's ``dataset-fashion-mnist`` package installs) and only
downloaded, with an MD5 check, when absent. Every failure is reported as a one-line
:class:`DatasetError` that says what to do about it.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

import torch

from rltrain.rundir import umask
from rltrain.supervised.downloads import copy_saying, md5_of, one_at_a_time
from rltrain.supervised.formats import (
    CIFAR_DIR,
    CIFAR_TAR,
    CIFAR_TEST,
    CIFAR_TRAIN,
    IDX_FILES,
    NUM_CLASSES,
    ArrayDataset,
    DatasetError,
    has_idx_set,
    idx_candidates,
    idx_path,
    one_line,
    read_cifar10,
    read_idx,
    read_idx_copy,
    read_idx_split,
)
from rltrain.supervised.splits import SplitDataset

__all__ = [
    "DATASETS",
    "SYSTEM_DIRS",
    "ArrayDataset",
    "DatasetError",
    "SplitDataset",
    "load_dataset",
    "read_cifar10",
    "read_idx",
]


DATASETS: tuple[str, ...] = ("mnist", "fashion_mnist", "cifar10")

#: Folders searched after ``root/<name>/`` and ``root/<name>/raw/``; tests monkeypatch this.
#: Debian's ``dataset-fashion-mnist`` installs the full set (recompressed, so never checksummed).
SYSTEM_DIRS: dict[str, tuple[Path, ...]] = {
    "fashion_mnist": (Path("/usr/share/datasets/fashion-mnist"),),
}

#: Where missing files are downloaded from: ``BASE_URLS[name] + file name``.
BASE_URLS: dict[str, str] = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    # The S3 website endpoint only serves http; the MD5 check below guards integrity.
    "fashion_mnist": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "cifar10": "https://www.cs.toronto.edu/~kriz/",
}

#: MD5 of every downloadable file, per dataset. Only downloads are checked, never local files.
CHECKSUMS: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    "fashion_mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
    "cifar10": {
        "cifar-10-python.tar.gz": "c58f30108f718f92721af3b95e74349a",
    },
}

DOWNLOAD_TIMEOUT_S: float = 30.0

#: The first ten labels of the train and test splits, as published. The two MNIST-format
#: sets share a format, so one's files under the other's name would load; their labels tell
#: them apart (an MD5 of the local files could not: recompressed copies, Debian's included,
#: differ from the downloads').
FIRST_LABELS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "mnist": ((5, 0, 4, 1, 9, 2, 1, 3, 1, 4), (7, 2, 1, 0, 4, 1, 4, 9, 5, 9)),
    "fashion_mnist": ((9, 0, 0, 3, 0, 2, 7, 2, 5, 5), (9, 2, 1, 1, 6, 1, 4, 6, 5, 7)),
}

_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


# --------------------------------------------------------------------------------------------
# Locating and downloading
# --------------------------------------------------------------------------------------------


#: torchvision's folder of a dataset under its root (``FashionMNIST/raw/``): read as well.
TORCHVISION_DIRS: dict[str, str] = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}


def _own_dirs(name: str, root: Path) -> list[Path]:
    """Folders under ``root`` that may hold an MNIST-format dataset, in lookup order."""
    tv = [root / TORCHVISION_DIRS[name] / "raw"] if name in TORCHVISION_DIRS else []
    return [root / name, root / name / "raw", *tv]


def _search_dirs(name: str, root: Path) -> list[Path]:
    """Folders that may hold an MNIST-format dataset, in lookup order: the system's copy
    (:data:`SYSTEM_DIRS`) only where ``root`` holds none of its files, for a partial copy in
    ``root`` is the user's (to complete, or to be told what it lacks), not to be replaced;
    a ``root`` that is the system's copy itself is read as it is."""
    own = _own_dirs(name, root)
    if _is_system(name, root):
        return [root]
    return own if _started(name, root) else [*own, *SYSTEM_DIRS.get(name, ())]


def _is_system(name: str, folder: Path) -> bool:
    """Whether ``folder`` is one of the system's copies of ``name`` (:data:`SYSTEM_DIRS`)."""
    return any(_same(folder, d) for d in SYSTEM_DIRS.get(name, ()))


def _same(a: Path, b: Path) -> bool:
    """Whether two paths name one folder (False where either is missing)."""
    with contextlib.suppress(OSError):
        return a.samefile(b)
    return False


def _started(name: str, root: Path) -> bool:
    """Whether ``root`` holds any file of an MNIST-format dataset (or a broken one), in its
    own folders or in itself (a flat copy, which :func:`_check_layout` names)."""
    return any(_holds_some(name, d) for d in [*_own_dirs(name, root), root])


def _holds_some(name: str, folder: Path) -> bool:
    """Whether ``folder`` holds any of an MNIST-format dataset's files, under any of the
    names they are read by (:func:`~rltrain.supervised.formats.idx_names`)."""
    return any(idx_candidates(folder, f) for f in CHECKSUMS[name])


def _locate(name: str, root: Path) -> Path | None:
    """Where the dataset's files are: an MNIST-format folder, or a CIFAR folder/archive."""
    if name == "cifar10":
        bases = (root / name, root)  # rltrain's layout, then torchvision's (CIFAR10(root))
        for folder in (base / CIFAR_DIR for base in bases):
            if not _cifar_lacks(folder):
                return folder
        return next((b / CIFAR_TAR for b in bases if (b / CIFAR_TAR).is_file()), None)
    return next((d for d in _search_dirs(name, root) if has_idx_set(d)), None)


def _cifar_lacks(folder: Path) -> list[str]:
    """The batch files a ``cifar-10-batches-py`` folder lacks."""
    return [b for b in (*CIFAR_TRAIN, CIFAR_TEST) if not (folder / b).is_file()]


def _missing_downloads(name: str, target: Path) -> list[str]:
    """Files of ``CHECKSUMS[name]`` that are not yet in ``target`` (in either compression)."""
    files = CHECKSUMS[name]
    if name == "cifar10":
        return [f for f in files if not (target / f).is_file()]
    return [f for f in files if idx_path(target, f) is None]


def _fetch(url: str, dest: Path, timeout: float) -> None:
    """Stream ``url`` into ``dest``, saying how far it has come (:func:`copy_saying`);
    module-level so tests can monkeypatch it (e.g. offline)."""
    with urllib.request.urlopen(url, timeout=timeout) as response, dest.open("wb") as out:
        total = int(response.headers.get("Content-Length") or 0)
        copy_saying(response, out, total, dest.name.split(".part")[0].lstrip("."))


def _download_file(url: str, dest: Path, md5: str) -> None:
    """Download to a temporary file and rename it to ``dest`` only once its MD5 matches.

    A failed or mismatched download leaves nothing behind, so a later run never mistakes a
    partial file for the real one.
    """
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _fetch(url, tmp, DOWNLOAD_TIMEOUT_S)
        actual = md5_of(tmp)
        if actual != md5:
            raise DatasetError(f"checksum mismatch for {url}: md5 {actual}, expected {md5}")
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes 0600: others sharing data.root read it
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _download(name: str, target: Path, log: Callable[[str], None] | None) -> str | None:
    """Download the dataset's missing files into ``target``; the failure reason, or None."""
    try:
        target.mkdir(parents=True, exist_ok=True)
        with one_at_a_time(target):  # (what is missing is judged once it is this one's turn)
            for file_name in _missing_downloads(name, target):
                url = BASE_URLS[name] + file_name
                if log is not None:
                    log(f"downloading {url} -> {target / file_name}")
                _download_file(url, target / file_name, CHECKSUMS[name][file_name])
    except DatasetError as exc:
        return str(exc)
    except (OSError, http.client.HTTPException) as exc:
        return one_line(exc)
    return None


def _missing_message(name: str, root: Path, reason: str) -> str:
    """One-line instructions saying exactly which files to put where: beside a partial copy
    where there is one (explore100: torchvision's FashionMNIST/raw/ holding two of the four
    files was ignored, the error named root/fashion_mnist/ and all four)."""
    target = root / name
    if name != "cifar10":
        target = next((d for d in _own_dirs(name, root) if _holds_some(name, d)), target)
    files = _missing_downloads(name, target) or list(CHECKSUMS[name])
    if name == "cifar10":
        what = f"{CIFAR_TAR} (from {BASE_URLS[name]}{CIFAR_TAR}) or its extracted {CIFAR_DIR}/"
        folder = target / CIFAR_DIR
        if folder.is_dir():  # a partial copy: say what it lacks
            lacks = [b for b in (*CIFAR_TRAIN, CIFAR_TEST) if not (folder / b).is_file()]
            what += f" ({folder} lacks {', '.join(lacks)})"
    else:
        what = f"{', '.join(files)} (from {BASE_URLS[name]})"
    where = f"the {name}/ folder" if target == root / name else "where its other files are,"
    message = f"{name} not found: put {what} into {target} ({where} under data.root={root})"
    if name == "fashion_mnist" and not _started(name, root):  # (else: the user's copy)
        message += ", or install Debian's dataset-fashion-mnist"
    return f"{message}{_in_the_way(target, [*files, CIFAR_TAR, CIFAR_DIR])} ({reason})"


def _in_the_way(folder: Path, names: list[str]) -> str:
    """What holds a data file's name without being the file (a folder, a broken link): "put
    the file there" alone says nothing of what is in its way."""
    for name in dict.fromkeys(n for f in names for n in (f, f.removesuffix(".gz"))):
        path = folder / name
        if path.is_symlink() and not path.exists():
            return f"; {path} is a broken link: remove it"
        if path.exists() and not path.is_file() and name != CIFAR_DIR:
            return f"; {path} is a folder, not the file: remove it"
    return ""


def _labelled_as(name: str, folder: Path) -> bool:
    """Whether ``folder`` itself holds an MNIST-format set whose labels begin as ``name``'s
    (:data:`FIRST_LABELS`: the sets' files are named alike); else :func:`_check_layout`."""
    if name not in FIRST_LABELS or not has_idx_set(folder):
        return False
    try:
        firsts = tuple(
            tuple(read_idx_copy(folder, IDX_FILES[split])[1][:10].tolist())
            for split in ("train_labels", "test_labels")
        )
    except DatasetError:
        return False  # (a damaged file: read, and said, as any other copy's)
    return firsts == FIRST_LABELS[name]


def _check_identity(name: str, location: Path, train: torch.Tensor, test: torch.Tensor) -> None:
    """A one-line error if the files found for ``name`` are another set's (FIRST_LABELS)."""
    firsts = (tuple(train[:10].tolist()), tuple(test[:10].tolist()))
    for other, known in FIRST_LABELS.items():
        if other != name and name in FIRST_LABELS and firsts == known:
            raise DatasetError(
                f"{location} holds {other}'s files, not {name}'s (its labels begin as "
                f"{other}'s do): put {name}'s files there, or set data.dataset={other}"
            )


def _check_layout(name: str, root: Path) -> None:
    """DatasetError for a data.root that is the dataset's own folder, or whose ``name`` is a
    file: the files would be looked for (and downloaded) one level too deep, or not at all."""
    folder = root / name
    if folder.exists() and not folder.is_dir():
        raise DatasetError(f"data.root={root}: {folder} is a file; {name}'s files go in a folder")
    if name == "cifar10":  # (torchvision's layout, root/cifar-10-batches-py, is read whole)
        if (root / CIFAR_DIR).is_dir() and not (folder / CIFAR_DIR).exists():
            lacks = ", ".join(_cifar_lacks(root / CIFAR_DIR))
            raise DatasetError(f"data.root={root}: {root / CIFAR_DIR} lacks {lacks}")
        _check_cifar_batches(name, root)
        return
    if has_idx_set(root):
        fix = f"give its parent, {root.parent}" if root.name == name else f"move them into {folder}"
        other = "fashion_mnist" if name == "mnist" else "mnist"  # (their files are named alike)
        raise DatasetError(
            f"data.root={root} holds MNIST-format files itself, {name}'s or {other}'s; {name}'s "
            f"are read from the {name}/ folder under it: {fix} (or, for {other}'s, set "
            f"data.dataset={other})"
        )


def _check_cifar_batches(name: str, root: Path) -> None:
    """DatasetError for a data.root that is CIFAR-10's batch folder itself, or for batch files
    lying in root or root/cifar10 without their folder (an archive extracted with
    --strip-components). explore100: neither was noticed; the error named a folder nested in
    the user's copy, and with data.download a 163 MB download went there."""
    if root.name == CIFAR_DIR:
        raise DatasetError(
            f"data.root={root} is CIFAR-10's {CIFAR_DIR}/ folder itself; give the folder "
            f"above it: {_root_above(name, root)}"
        )
    for folder in (root, root / name):
        flat = [b for b in (*CIFAR_TRAIN, CIFAR_TEST) if (folder / b).is_file()]
        if flat:
            raise DatasetError(
                f"{folder} holds CIFAR-10's batch files ({', '.join(flat)}) without their "
                f"{CIFAR_DIR}/ folder: move them into {root / name / CIFAR_DIR}"
            )


def _root_above(name: str, path: Path) -> Path:
    """The data.root that reads ``path`` (CIFAR-10's batch folder or archive): the folder
    holding it (torchvision's layout), or above that where it is the ``name/`` folder."""
    return path.parent.parent if path.parent.name == name else path.parent


def _obtain(name: str, root: Path, download: bool, log: Callable[[str], None] | None) -> Path:
    """Download the dataset if allowed and locate it again; DatasetError when still missing."""
    reason = "download disabled"
    if download:
        made = [p for p in (root / name, root, *root.parents) if not p.exists()]  # deepest first
        failure = _download(name, root / name, log)
        reason = "downloaded files incomplete" if failure is None else f"download failed: {failure}"
        location = _locate(name, root)
        if location is not None:
            return location
        for folder in made:  # an offline machine: no empty mnist/ left behind (rmdir: if empty)
            with contextlib.suppress(OSError):
                folder.rmdir()
    raise DatasetError(_missing_message(name, root, reason))


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def load_dataset(
    name: str,
    root: str | Path,
    download: bool = True,
    log: Callable[[str], None] | None = None,
) -> SplitDataset:
    """Load ``name`` from ``root`` (config key ``data.root``), downloading it if allowed.

    MNIST-format sets are looked up in ``root/<name>/``, ``root/<name>/raw/`` and then
    :data:`SYSTEM_DIRS`; CIFAR-10 in ``cifar-10-batches-py/``, then ``cifar-10-python.tar.gz``,
    under ``root/cifar10/`` or (torchvision's layout) ``root``. Missing files are downloaded
    into ``root/<name>/`` when ``download`` is true; if they are still missing a one-line
    :class:`DatasetError` says which files to put where.
    """
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if not str(root).strip():  # Path("") is the working folder: a typo, not a choice
        raise DatasetError(f"data.root={str(root)!r}: give the folder that holds {name}/")
    root = Path(root).expanduser()
    if root.exists() and not root.is_dir():
        above = f": give {_root_above(name, root)}" if root.name == CIFAR_TAR else ""
        raise DatasetError(
            f"data.root={root} is a file; it must be a folder (of the datasets){above}"
        )
    try:
        location = _locate(name, root)
        if location is None and _labelled_as(name, root):
            location = root  # a copy of the set itself (Debian's folder, moved: explore110)
        if location is None:
            _check_layout(name, root)
            location = _obtain(name, root, download, log)
    except PermissionError as exc:  # a data.root this user may not search
        raise DatasetError(f"data.root={root}: cannot read ({one_line(exc)})") from None
    train, test = read_cifar10(location) if name == "cifar10" else read_idx_split(location)
    _check_identity(name, location, train.labels, test.labels)
    if log is not None:
        fallback = _is_system(name, location) and not _same(location, root)
        none = "does not exist" if not root.exists() else "holds none of its files"
        why = f" (data.root={root} {none}: the system's copy)" if fallback else ""
        log(f"{name}: {len(train)} train / {len(test)} test images from {location}{why}")
    mean, std = _STATS[name]
    return SplitDataset(name, train, test, NUM_CLASSES, mean, std, source=location)
