"""Whether a Ray head answers at ``--address``, in seconds (Ray itself retries for a
minute), and what to say where a join fails although one answers."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from rltrain.runtime.ray.errors import RayStartError


def token_file() -> Path:
    """Where Ray keeps a token of its own (`ray start` writes one where none was given)."""
    return Path.home() / ".ray" / "auth_token"


def _why(error: str, address: str = "") -> str:
    """What to do about a join that failed although a gRPC server answers at the address (a
    Ray head): Ray says only "Failed to connect" (or the client's "timeout") after 20 s of
    retries where the head refused this shell's token, as a head with token authentication
    (Ray's default since 2.52) refuses a missing or another token; or where the address
    gave the Ray Client's port without ray://, or the head's with it (both were said to be
    a refused token)."""
    if "failed to connect" not in error.lower() and "timeout" not in error.lower():
        return ""  # Ray's own words say what it was (a version mismatch, ...)
    client, (host, _, port) = address.startswith("ray://"), address.rpartition(":")
    host = host.removeprefix("ray://")
    if port == str(CLIENT_PORT) and not client:
        return f"; {port} is the Ray Client's port: join it as ray://{host}:{port}"
    if port == str(GCS_PORT) and client:
        return (
            f"; {port} is the Ray head's own port: give {host}:{port} without ray://, or "
            f"ray://{host}:{CLIENT_PORT}, the Ray Client's"
        )
    return f"; a Ray head answers there, so it most likely {_refused()}: {_advice()}"


def _refused() -> str:
    """What a head with token authentication refused from this process, in words (Ray sends
    a token only where RAY_AUTH_MODE=token)."""
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() != "token":
        return "wants a token, and none was sent (RAY_AUTH_MODE is not token)"
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "refused this shell's RAY_AUTH_TOKEN"
    if token_file().is_file():
        return "refused ~/.ray/auth_token's token (RAY_AUTH_TOKEN is unset)"
    return "wants a token, and none was sent (RAY_AUTH_TOKEN is unset)"


def _advice() -> str:
    """What to export. `ray start` turns tokens on by itself and keeps its own in
    ~/.ray/auth_token: there RAY_AUTH_MODE=token alone sends it (explore99: the advice asked
    for a token the user never chose)."""
    sending = os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "token"
    if not sending and not os.environ.get("RAY_AUTH_TOKEN") and token_file().is_file():
        return (
            "export RAY_AUTH_MODE=token (Ray then sends ~/.ray/auth_token's, the token `ray "
            "start` made on this machine; another cluster's: RAY_AUTH_TOKEN=<its token> too; "
            "docs/cluster.md)"
        )
    return (
        "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<the token the cluster was started with> "
        "(docs/cluster.md)"
    )


HEAD_ANSWER_S = 10.0
"""How long :func:`check_head` waits for the head's cluster id: a live head answers in
milliseconds; Ray's own client waits about 40 s on a server that accepts and never answers."""


def check_head(address: str) -> None:
    """Ask the head at HOST:PORT for its cluster id once, as ``ray.init`` does (it retries for
    20 s, a warning line a second, then says only "Failed to connect"): a head that refuses
    this process's token, or a gRPC server that is no Ray head (the Ray Client's port), fails
    in a second with one line. Anything else, a head silent for :data:`HEAD_ANSWER_S`
    included, is left for ``ray.init`` to say."""
    answer = _ask(address)
    if isinstance(answer, BaseException) and (refusal := _refusal(answer, address)):
        raise RayStartError(refusal) from None


def check_client_port(address: str) -> None:
    """``ray://HOST:PORT`` where PORT is a head's own port, which answers the head's calls
    (or refuses this process's token, as only a head does): Ray's client waited 31 s there,
    then blamed the token (explore99: the head ran on 6391, so the 6379 rule missed it)."""
    hostport = address.removeprefix("ray://")
    with _quiet_stderr():  # (a client server's "Method not found!" is the answer that passes)
        answer = _ask(hostport)
    if answer is None or type(answer).__name__ == "AuthenticationError":
        host, _, port = hostport.rpartition(":")
        raise RayStartError(
            f"--address {address}: {port} is the Ray head's own port: give {hostport} "
            f"without ray://, or ray://{host}:{CLIENT_PORT} (the Ray Client's port by default)"
        )


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Descriptor 2 to /dev/null while Ray's C++ client asks a Ray Client's port for a head's
    cluster id: it logs the refusal, which is the expected answer there, as a warning
    (explore109: every ray:// run began with "gcs_client.cc: Failed to get cluster ID ...
    Method not found!"). Python's own stderr is flushed first and kept."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 (a daemon's): nothing to quiet
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _ask(address: str) -> BaseException | None | str:
    """The head at HOST:PORT asked for its cluster id: None where it answered, the error it
    raised, or "silent" where none came within :data:`HEAD_ANSWER_S` (or Ray has no client
    of its own here)."""
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # (Ray's own; private)
    except ImportError:
        return "silent"
    said: list[BaseException | None] = []

    def ask() -> None:
        try:
            GcsClient(address=address)
        except Exception as e:  # noqa: BLE001 - sorted by the callers
            said.append(e)
        else:
            said.append(None)

    # A daemon thread: the client releases the GIL while it waits, and one left waiting on a
    # silent server ends with its own timeout.
    asking = threading.Thread(target=ask, name="rltrain-check-head", daemon=True)
    asking.start()
    asking.join(HEAD_ANSWER_S)
    return said[0] if said else "silent"


def _refusal(e: BaseException, address: str) -> str:
    """The line for a failed ask that is a refusal (a token, or no Ray head), else ""."""
    from ray.exceptions import AuthenticationError, RpcError

    if isinstance(e, AuthenticationError):
        return (
            f"cannot join the Ray cluster at --address {address}: its head {_refused()}; "
            f"{_advice()}"
        )
    # gRPC's UNIMPLEMENTED (12): a server that knows no such call, or an HTTP/2 server that
    # answers 404 (explore109: 43 s of Ray's retries, then blamed on a token)
    unknown = getattr(e, "rpc_code", None) == UNIMPLEMENTED or "method not found" in str(e).lower()
    if isinstance(e, RpcError) and unknown:
        return (
            f"--address {address}: a gRPC server answers there, but not a Ray head's "
            f"(it does not know the head's calls): for the Ray Client's port give "
            f"ray://{address}, else the head's port (`ray start --head --port`, "
            f"{GCS_PORT} by default)"
        )
    return ""  # ray.init retries and says what it was


UNIMPLEMENTED = 12
"""gRPC's status code for a call the server does not have."""

GCS_PORT, CLIENT_PORT = 6379, 10001
"""The ports `ray start --head` opens by default: the head's own (HOST:PORT) and the Ray
Client's (ray://HOST:PORT)."""

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""A gRPC client's first bytes (RFC 9113 3.4: the preface, then an empty SETTINGS frame);
a gRPC server, as Ray's GCS and its client server are, answers with a SETTINGS frame."""


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds, not after Ray's minute of retries, when nothing listens at address,
    or something other than Ray does (Ray would retry it without end)."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayStartError(f"--address {address}: expected 'auto', HOST:PORT or ray://HOST:PORT")
    try:
        # an IPv6 host is written in brackets ([::1]:6379); the socket takes it without
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
            answer = _first_frame(conn) if not os.environ.get("RAY_USE_TLS") else None
    except OSError as e:
        raise RayStartError(
            f"cannot join the Ray cluster at --address {address}: nothing answers at "
            f"{host}:{port} ({e.strerror or e}); start one with `ray start --head`, "
            "or leave --address out to run on this machine"  # (cluster_address.LEAVE_OUT)
        ) from None
    if answer is not None and (len(answer) < 4 or answer[3] != 4):  # not SETTINGS
        said = f"it answered {answer!r}" if answer else "it did not answer as gRPC does"
        raise RayStartError(
            f"--address {address}: {host}:{port} is not a Ray head ({said}); give the head's "
            "port (`ray start --head --port`, 6379 by default) or ray://HOST:10001 (Ray Client)"
        )


def _first_frame(conn: socket.socket) -> bytes:
    """The first bytes a server sends back to :data:`HTTP2_PREFACE` (up to a frame header)."""
    conn.sendall(HTTP2_PREFACE)
    answer = b""
    with contextlib.suppress(TimeoutError, OSError):
        while len(answer) < 9 and (chunk := conn.recv(9 - len(answer))):
            answer += chunk
    return answer
