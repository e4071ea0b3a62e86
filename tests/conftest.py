"""Shared fixtures: tiny, learnable datasets written in the real file formats."""

from __future__ import annotations

import gzip
import json
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

# the repository root, for `examples/` (the README's own env), also under a bare `pytest`
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rltrain.supervised import datasets as ds  # noqa: E402
from rltrain.supervised.datasets import ArrayDataset


def patterns(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images [n, 28, 28] where class c lights the c-th 7x7 block (plus noise)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    images = rng.integers(0, 60, size=(n, 28, 28)).astype(np.uint8)
    for i, c in enumerate(labels):
        r, q = divmod(int(c), 4)
        images[i, 7 * r : 7 * r + 7, 7 * q : 7 * q + 7] = 220
    return images, labels


def write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_mnist_like(folder: Path, n_train: int, n_test: int, seed: int = 0) -> None:
    """The four standard IDX .gz files of MNIST / Fashion-MNIST."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, s in (("train", n_train, seed), ("t10k", n_test, seed + 1)):
        images, labels = patterns(n, s)
        write_idx(folder / f"{split}-images-idx3-ubyte.gz", images)
        write_idx(folder / f"{split}-labels-idx1-ubyte.gz", labels)


@pytest.fixture
def tiny_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """data.root holding a tiny learnable fashion_mnist/ (and no system copy, no network)."""
    monkeypatch.setattr(ds, "SYSTEM_DIRS", {})
    root = tmp_path / "data"
    write_mnist_like(root / "fashion_mnist", n_train=640, n_test=200)
    return root


def tiny_dataset(n: int = 256, seed: int = 0) -> ArrayDataset:
    images, labels = patterns(n, seed)
    return ArrayDataset(torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels).long())


@pytest.fixture
def run_bench(tmp_path: Path) -> Callable[[str], tuple[Path, dict[str, Any]]]:
    """`rltrain bench` through the CLI on a config given as YAML text, into tmp_path/run;
    returns the run folder and its summary.json (the run must succeed)."""

    def run(text: str) -> tuple[Path, dict[str, Any]]:
        from rltrain.cli import main

        config = tmp_path / "bench.yaml"
        config.write_text(text)
        out = tmp_path / "run"
        assert main(["bench", str(config), "--run-dir", str(out)]) == 0
        return out, json.loads((out / "summary.json").read_text())

    return run


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json."""
    import json

    return json.loads((run_dir / "summary.json").read_text())


def checkpoint_when(
    run_dir: Path,
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 180.0,
    cancel: threading.Event | None = None,
    alive: Callable[[], bool] = lambda: True,
) -> dict[str, Any] | None:
    """The run's newest checkpoint once ``done`` holds for it, polled every 0.25 s (None:
    ``timeout`` seconds passed, ``cancel`` was set, or the run is no longer ``alive``). Tests
    wait for what they need to have happened, not for a wall-clock budget that the machine's
    load can make too short."""
    from rltrain.checkpoint import latest_checkpoint

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (cancel and cancel.is_set()) and alive():
        path = latest_checkpoint(run_dir)
        try:
            state = torch.load(path, weights_only=True) if path else None
        except (OSError, RuntimeError):  # pruned between the listing and the load
            state = None
        if state is not None and done(state):
            return state
        time.sleep(0.25)
    return None


@contextmanager
def interrupt_when(run_dir: Path, done: Callable[[dict[str, Any]], bool]) -> Iterator[None]:
    """SIGINT this process (a graceful stop) once ``done`` holds for the run's newest
    checkpoint: the run ends as soon as what the test waits for has happened."""
    finished = threading.Event()

    def watch() -> None:
        if checkpoint_when(run_dir, done, timeout=600, cancel=finished) is not None:
            os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray must not start: the Ray runtime's start-up raises if anything reaches it (the
    thread and process runtimes never import it)."""
    from rltrain.runtime import ray as runtime

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run without Ray started Ray")

    monkeypatch.setattr(runtime, "start", refuse)


@pytest.fixture(autouse=True)
def _ray_only_in_slow_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-m "not slow"` starts no Ray: a test that does is marked slow (issue 30)."""
    if request.node.get_closest_marker("slow") is not None:
        return
    import ray

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a test not marked slow started Ray: mark it slow")

    monkeypatch.setattr(ray, "init", refuse)


# --- one Ray for the in-process tests that need no Ray of their own ---------------------------

_shared_ray_up = False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "shared_ray: runs on the one local Ray these tests share (see _shared_ray in conftest)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared_ray tests run one after another, where the first of them was: their Ray
    starts once, and no other test of this process runs beside it. (Under pytest-xdist, ``-n
    2 --dist loadfile``, each worker runs whole files: the shared_ray tests of a file share
    one Ray, and a worker starts its own for them.)"""
    users = [item for item in items if item.get_closest_marker("shared_ray") is not None]
    if len(users) < 2:
        return
    first = items.index(users[0])
    marked = set(users)
    rest = [item for item in items if item not in marked]
    items[:] = rest[:first] + users + rest[first:]


def _stop_shared_ray() -> None:
    global _shared_ray_up
    if _shared_ray_up:
        import ray

        ray.shutdown()
        _shared_ray_up = False


@pytest.fixture(autouse=True)
def _shared_ray(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked shared_ray runs on a local Ray that the session started as a notebook's
    ``ray.init`` does: rltrain leaves a Ray it did not start running (the caller's), so one Ray
    serves them all instead of a start-up and a shutdown (seconds) each. Every other test runs
    without it: it is stopped before them, so that the tests that start their own Ray (its
    start-up, --address, a setup hook, killed processes) still do."""
    global _shared_ray_up
    if request.node.get_closest_marker("shared_ray") is None:
        _stop_shared_ray()
        yield
        return
    assert request.node.get_closest_marker("slow") is not None, "a shared_ray test starts Ray"
    import ray

    if not _shared_ray_up:
        assert not ray.is_initialized(), "a Ray left running by an earlier test"
        ray.init(
            address="local",  # never a cluster that `ray start` left running on the machine
            num_cpus=2,
            include_dashboard=False,
            logging_level="ERROR",
            # workers at the tests' priority, as in rltrain's own local start (at Ray's nice
            # 15 they starve beside any busy process)
            _system_config={"worker_niceness": 0},
        )
        _shared_ray_up = True
    yield
    assert ray.is_initialized(), "the test stopped the caller's Ray"


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop_shared_ray()


@contextmanager
def fake_server(answer: bytes) -> Iterator[str]:
    """A TCP server on a free port that answers each connection's first bytes with
    ``answer``; yields its HOST:PORT."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        try:
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.recv(64)
                    conn.sendall(answer)
        except OSError:  # closed
            return

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


GRPC_SETTINGS = bytes([0, 0, 0x18, 4, 0, 0, 0, 0, 0])  # what Ray 2.60's GCS answers first
