"""How the process runtime starts its children and serves their requests.

A forkserver imports torch, the envs and the algorithms once (:data:`PRELOAD`), then forks
each child from that state; the trainer answers each child's server and replay requests in a
thread of its own (:func:`serve`), where a pull sends only parameters newer than the child
holds.
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

from rltrain.ps.server import ShardedServer
from rltrain.replay.local import LocalReplay
from rltrain.runtime.process import child
from rltrain.runtime.process.forkstart import PRELOAD, context

__all__ = ["PRELOAD", "context", "no_main", "serve", "service_names"]


def service_names(args: Sequence[Any], services: dict[str, Any]) -> tuple:
    """The call's arguments with the server, the replay memory and any object that names
    itself a service (a ``service_name`` class attribute: the batched policy) replaced by
    references (``services`` learns the objects they stand for)."""
    out = []
    for a in args:
        name = getattr(type(a), "service_name", None)
        name = "server" if isinstance(a, ShardedServer) else name
        name = "replay" if isinstance(a, LocalReplay) else name
        if name is not None:
            services[name] = a
            a = child.ServiceRef(name)
        out.append(a)
    return tuple(out)


def serve(conn: Connection, services: dict[str, Any]) -> None:
    """The trainer's side of one child's service pipe: run each request on the object it
    names, answer it, until the pipe closes (the child died or ended)."""
    channel = child.Channel(conn)
    try:
        _answer(channel, services)
    finally:
        channel.close()


def _answer(channel: child.Channel, services: dict[str, Any]) -> None:
    sent = None  # the parameters last sent to this child: a pull sends only newer ones
    while True:
        try:
            msg = channel.read()
        except (EOFError, OSError):
            return
        try:
            name, method, args = channel.inbox.unpack(msg)
            target = services[name]
            if name == "server" and method == "pull":
                have = sent if sent is not None and sent.version == args[0] else None
                p = target.pull(have)
                value, sent = (None, sent) if p is have else (p, p)
            else:
                value = getattr(target, method)(*args)
                if name == "server" and method == "exchange":
                    sent = value[1]
            reply: tuple[str, Any, str | None] = ("ok", value, None)  # kind, value, traceback
        except BaseException as e:
            import traceback

            reply = ("raised", *child.exception_message(e, traceback.format_exc()))
        try:
            channel.send(*reply)
        except (BrokenPipeError, OSError):
            return


@contextlib.contextmanager
def no_main() -> Iterator[None]:
    """Start a child without the parent's ``__main__``. multiprocessing's children import the
    parent's main script (as ``__mp_main__``) so that its functions can be unpickled; ours
    run only rltrain's classes and ``imports`` modules, and a user's script without an
    ``if __name__ == "__main__":`` guard (``rltrain.train(...)`` at its top level) would run
    its training again in every child. A stand-in module, for the start only, gives them
    nothing to import; what the script's classes made (the options section of an algorithm
    it defines, in the run's config) travels by value (:func:`by_value`), for the start only:
    multiprocessing's table of reductions is the process's, and a user's own pool or queue
    keeps its own ways after it."""
    with MAIN_LOCK:  # starts from several threads (restarts) must not interleave the swap
        main = sys.modules["__main__"]
        mine = [v for v in list(vars(main).values()) if isinstance(v, type)]
        table = ForkingPickler._extra_reducers  # type: ignore[attr-defined]  # (register fills it)
        had = {c: table.get(c) for c in mine if c.__module__ == "__main__"}  # (its top level)
        for cls in had:
            ForkingPickler.register(cls, by_value)
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main
            for cls, was in had.items():
                if was is None:
                    table.pop(cls, None)
                else:
                    table[cls] = was


MAIN_LOCK = threading.Lock()


def by_value(obj: Any) -> tuple[Any, tuple[bytes]]:
    """The reduction of an instance of a class the main script defined: by value, with its
    class, pickled by cloudpickle (as the extensions are), where the child has no module to
    find the class in by name. A copy: tensors it holds are copied, not shared, and a
    connection or a file it holds does not travel."""
    import cloudpickle

    return pickle.loads, (cloudpickle.dumps(obj),)
