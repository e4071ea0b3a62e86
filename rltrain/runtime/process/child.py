"""What runs inside a process of the process runtime (:mod:`rltrain.runtime.process`).

A child builds its plain class (an :class:`~rltrain.rl.actor.Actor`, a
:class:`~rltrain.rl.worker.Worker`, a DQN actor, a supervised worker, an evaluator) and then
runs the calls the driver sends, one at a time and in order, as a Ray actor of concurrency
1 does. The parameter server and the replay memory stay in the trainer's process: an
argument that names one (:class:`ServiceRef`) becomes a proxy here, whose every method is a
request over the child's service pipe. Tensors cross both pipes through reused shared-memory
slots (:mod:`rltrain.runtime.process.shm`).

Imported by the forkserver before it forks the children, so each child starts with torch,
the envs and the algorithms already imported.
"""

from __future__ import annotations

import array
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from rltrain import extensions, signals
from rltrain.records import GradUpdate, Params, PushResult, ServerStats
from rltrain.runtime.process.forkstart import remove_socket
from rltrain.runtime.process.shm import Inbox, Outbox
from rltrain.runtime.titles import set_title
from rltrain.runtime.trim import keep_trimmed


@dataclass(frozen=True)
class ServiceRef:
    """An argument that stands for an object of the trainer's process (``server``, ``replay``)."""

    name: str


class RemoteError(Exception):
    """An exception raised in another process, with that process's traceback as its text
    (the original, when it can be pickled, is this one's ``__cause__``)."""


def exception_message(e: BaseException, tb: str) -> tuple[BaseException | None, str]:
    """What crosses a pipe for an exception: itself if it pickles, and its traceback."""
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return None, tb
    return e, tb


def rebuild(e: BaseException | None, tb: str) -> BaseException:
    """The exception to raise on this side: the original with the remote traceback attached."""
    if e is None:
        return RemoteError(tb)
    e.__cause__ = RemoteError(tb)
    return e


class Channel:
    """One side of a pipe with its shared-memory slots in each direction.

    A message is a plain pickle (``pickle.dumps``, not multiprocessing's pickler: torch
    registers reductions there that move every small tensor into shared memory and hand its
    descriptor over through a helper thread and a socket per tensor). The descriptors of new
    slots follow the message on the same socket (``SCM_RIGHTS``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.outbox = Outbox()
        self.inbox = Inbox()
        self.lock = threading.Lock()  # threads of one process may send on one pipe
        self._sock: socket.socket | None = None

    @property
    def sock(self) -> socket.socket:
        """The pipe as a socket (a duplex Pipe is a Unix socket pair), for descriptors."""
        if self._sock is None:
            self._sock = socket.socket(fileno=os.dup(self.conn.fileno()))
        return self._sock

    def close(self) -> None:
        """Close the socket :attr:`sock` made (the pipe is its owner's): under ``python -X
        dev`` each child warned of it unclosed at its exit (explore102)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def send(self, *msg: Any) -> None:
        with self.lock, signals.deferred():  # whole, or not at all
            packed = self.outbox.pack(msg)
            slots, fds = self.outbox.take_fresh()
            try:
                data = pickle.dumps((slots, packed), protocol=pickle.HIGHEST_PROTOCOL)
                self.conn.send_bytes(data)
                if fds:
                    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _ints(fds))]
                    self.sock.sendmsg([b"F"], rights)
            finally:  # sent, or the peer is gone (died, restarted): ours are not needed
                self.outbox.sent(slots)

    def read(self) -> Any:
        """The next message as sent: its slots mapped, their values not yet copied out."""
        slots, packed = pickle.loads(self.conn.recv_bytes())
        if slots:
            self.inbox.attach(slots, self._recv_fds(len(slots)))
        return packed

    def recv(self) -> Any:
        return self.inbox.unpack(self.read())

    def _recv_fds(self, n: int) -> list[int]:
        size = socket.CMSG_SPACE(n * array.array("i").itemsize)
        _, ancdata, _, _ = self.sock.recvmsg(1, size)
        fds = array.array("i")
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        if len(fds) != n:
            for fd in fds:
                os.close(fd)
            raise OSError(f"expected {n} shared-memory descriptors, got {len(fds)}")
        return list(fds)


def _ints(fds: list[int]) -> array.array:
    return array.array("i", fds)


class Requester:
    """The child's end of its service pipe: one request at a time, answered in order."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.waiting = False  # a request sent by exchange_begin, not yet answered

    def begin(self, service: str, method: str, *args: Any) -> Callable[[], Any]:
        assert not self.waiting, "one request at a time per process"
        self.channel.send(service, method, args)
        self.waiting = True

        def finish() -> Any:
            kind, value, tb = self.channel.recv()
            self.waiting = False
            if kind == "raised":
                raise rebuild(value, tb)
            return value

        return finish

    def call(self, service: str, method: str, *args: Any) -> Any:
        return self.begin(service, method, *args)()


class ServerProxy:
    """The parameter server as a child sees it (:class:`rltrain.ps.server.Server`)."""

    def __init__(self, requests: Requester) -> None:
        self.requests = requests

    def push(self, update: GradUpdate) -> PushResult:
        return self.requests.call("server", "push", update)

    def pull(self, have: Params | None = None) -> Params:
        """Parameters travel only when newer than ``have`` (the trainer's side remembers what
        it last sent this process)."""
        p = self.requests.call("server", "pull", None if have is None else have.version)
        if p is not None:
            return p
        assert have is not None  # None comes back only for the version ``have`` holds
        return have

    def exchange(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0
    ) -> tuple[PushResult, Params]:
        return self.exchange_begin(update, wait_version, timeout)()

    def exchange_begin(
        self, update: GradUpdate, wait_version: int = 0, timeout: float = 0.0
    ) -> Callable[[], tuple[PushResult, Params]]:
        return self.requests.begin("server", "exchange", update, wait_version, timeout)

    def wait_for_version(self, version: int, timeout: float) -> bool:
        return self.requests.call("server", "wait_for_version", version, timeout)

    def stats(self) -> ServerStats:
        return self.requests.call("server", "stats")

    def health(self) -> list[tuple[int, bool] | None]:
        """Each shard's (version, fenced): a cheap look at how far the server has moved."""
        return self.requests.call("server", "health")


class ServiceProxy:
    """Any other service (the replay memory): each method a request."""

    def __init__(self, requests: Requester, name: str) -> None:
        self.requests, self.name = requests, name

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args: self.requests.call(self.name, method, *args)


def resolve(args: tuple, requests: Requester, proxies: dict[str, Any]) -> tuple:
    """The call's arguments with each :class:`ServiceRef` replaced by its proxy."""
    out = []
    for a in args:
        if isinstance(a, ServiceRef):
            if a.name not in proxies:
                is_server = a.name == "server"
                proxy = ServerProxy(requests) if is_server else ServiceProxy(requests, a.name)
                proxies[a.name] = proxy
            a = proxies[a.name]
        out.append(a)
    return tuple(out)


def main(
    cls: type,
    args: tuple,
    ctrl: Connection,
    svc: Connection,
    path: list[str],
    concurrency: int = 1,
    extended: bytes | None = None,
    title: tuple[str, int] | None = None,
    restarted: bool = False,
    trainer: tuple[int, str] | None = None,
) -> None:
    """A child's life: build the instance, say "up", run calls until the pipe closes.

    ``restarted``: this process replaces one that died; an instance with a ``restarted``
    method hears it before it says it is up (Ray's ``was_current_actor_reconstructed``: a
    learner's shards then refuse requests until they are restored).

    ``concurrency`` > 1 runs calls in that many threads (a supervised worker's ``stop``
    beside its ``run``); results then come back in the order they finish, by call id.
    ``extended``: the algorithms and rules the trainer registered (:mod:`rltrain.extensions`;
    the forkserver forked before the user's script registered them). ``title``: the role and
    index ``ps`` and ``top`` call this process by (:mod:`rltrain.runtime.titles`).
    ``trainer``: the pid of the process that started this one and its forkserver's socket
    (:func:`watch_trainer`)."""
    if title is not None:
        set_title(*title)
    keep_trimmed()
    hold_stops()
    if trainer is not None:
        watch = threading.Thread(target=watch_trainer, args=trainer, name="rltrain-watch")
        watch.daemon = True
        watch.start()
    sys.path[:] = path  # the trainer's (imports, tests' modules) as it is now
    calls, requests = Channel(ctrl), Requester(Channel(svc))
    proxies: dict[str, Any] = {}
    try:
        if extended is not None:
            extensions.unpack(extended)
        instance = cls(*args)
        if restarted and hasattr(instance, "restarted"):
            instance.restarted()
    except BaseException as e:
        _tell(calls, "failed", *exception_message(e, traceback.format_exc()), None)
        return
    _tell(calls, "up", os.getpid(), None, None)

    def run(call_id: int, method: str, call_args: tuple) -> None:
        try:
            value = getattr(instance, method)(*resolve(call_args, requests, proxies))
            reply: tuple = ("ok", value, None, call_id)
        except BaseException as e:
            reply = ("raised", *exception_message(e, traceback.format_exc()), call_id)
        _tell(calls, *reply)

    pool = ThreadPoolExecutor(concurrency) if concurrency > 1 else None
    while True:
        try:
            msg = calls.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        if pool is None:
            run(*msg)
        else:
            pool.submit(run, *msg)
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
    close = getattr(instance, "close", None)
    if close is not None:
        close()
    calls.close()
    requests.channel.close()


STOPS = (signal.SIGINT, signal.SIGTERM)


def hold_stops() -> None:
    """Ctrl-C and a scheduler's SIGTERM (Slurm's ``scancel``, systemd's stop) reach the whole
    process group; they stop the trainer, which writes its final checkpoint (the shards may
    live in this process) and then stops us. Caught and dropped, not ignored: an ignored
    signal stays ignored in whatever this process starts (an env's worker processes, whose
    ``terminate()`` would then do nothing), where a caught one is reset by an exec, and by a
    fork here. Restarted system calls (``siginterrupt``): a C library's read is not cut.
    SIGHUP (a closed terminal) stays ignored, as the forkserver starts us (``forkstart``)."""
    for sig in STOPS:
        signal.signal(sig, _dropped)
        signal.siginterrupt(sig, False)
    os.register_at_fork(after_in_child=_default_stops)


def _dropped(signum: int, frame: object) -> None:
    pass


def _default_stops() -> None:
    for sig in STOPS:
        signal.signal(sig, signal.SIG_DFL)


def watch_trainer(pid: int, socket_path: str | None) -> None:
    """End this process once the trainer ``pid`` has ended, and remove its forkserver's
    socket ``socket_path`` (:func:`~rltrain.runtime.process.forkstart.remove_socket`).

    A trainer that exits without stopping its children (SIGKILL, the OOM killer, a second
    Ctrl-C's ``os._exit``) would otherwise leave them running for good: a policy worker or an
    actor inside a long call reads no pipe, so sees no EOF. The forkserver is their parent,
    not the trainer (``getppid`` says nothing), and its ``parent_sentinel`` is at EOF from the
    start (CPython passes the read end of the pipe the parent has already closed). A pidfd
    (Linux 5.3) becomes readable when the process ends; elsewhere a poll each second. The
    trainer's ``pymp-*`` directory (the forkserver's socket) is removed by its finalizers,
    which such an exit skips: whichever child sees it first removes it."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone
        fd = -1
    except (AttributeError, OSError):  # no pidfd here (not Linux, or refused): poll
        fd = -1
        while _alive(pid):
            time.sleep(1.0)
    if fd >= 0:
        ended = select.poll()
        ended.register(fd, select.POLLIN)
        while not ended.poll():
            pass
    remove_socket(socket_path)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or someone else's reused pid
        return False
    return True


def _tell(calls: Channel, *message: Any) -> None:
    """Send one message to the trainer; if it is gone (stopped while this process was still
    being built, or since), go too, quietly: nobody is left to read a traceback."""
    try:
        calls.send(*message)
    except (BrokenPipeError, OSError):
        os._exit(0)
