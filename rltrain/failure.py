"""What failed a run, for the one who reads it: summary.json's one line, the traceback kept in
the run folder's failure.log, and whose code raised (rltrain's, or the user's: a module the
config ``imports``, such as a loss, a rule or an env of one's own)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rltrain.errors import RLTrainError

FAILURE_LOG = "failure.log"
"""Where a run keeps the traceback of what failed it (an env's, :class:`EnvFailed`)."""


def failure_line(
    error: BaseException,
    run_dir: str | os.PathLike[str] | None = None,
    say: Callable[[str], None] | None = None,
) -> str:
    """The one line summary.json keeps for ``error`` (Ray's task error: the line of the error
    it wraps). An error with a ``detail`` (a traceback) leaves it in ``run_dir/failure.log``,
    and ``say`` says where."""
    cause = getattr(error, "cause", None)  # RayTaskError(EnvFailed): the EnvFailed
    error = cause if isinstance(cause, BaseException) else error
    detail = getattr(error, "detail", "")
    if detail and run_dir is not None:
        path = Path(run_dir) / FAILURE_LOG
        with contextlib.suppress(OSError):
            path.write_text(f"{error}\n\n{detail}")
            if say is not None:
                say(f"the traceback of what failed the run: {path}")
    return " ".join(str(error).split("\n")).strip() or type(error).__name__


def keep_traceback(
    run_dir: Path, error: BaseException, say: Callable[[str], None], imports: Sequence[str] = ()
) -> None:
    """A bug's traceback (an exception no part of the run expects) into ``run_dir``'s
    failure.log, said: a run whose output went through a pipe (``| head``) lost it. (Not a
    SystemExit or a KeyboardInterrupt outside the run's own handling, nor a one-line error
    of what the user asked for, which its folder is removed for.) One that passed through a
    module of ``imports`` (the config's: your algorithm, rule or env) is said to be in your
    code, not called rltrain's bug (explore86: a NameError in a loss of one's own)."""
    if not isinstance(error, Exception) or isinstance(error, RLTrainError):
        return
    keep_log(Path(run_dir) / FAILURE_LOG, error, say, imports)


def keep_log(
    path: Path, error: BaseException, say: Callable[[str], None], imports: Sequence[str] = ()
) -> None:
    """``error``'s traceback into ``path``, said: whose code it was in (:func:`keep_traceback`)."""
    import traceback

    with contextlib.suppress(OSError):
        path.write_text("".join(traceback.format_exception(error)))
        if mine := your_frame(error, imports):
            say(f"an error in your code{mine}: its traceback is in {path}")
        else:
            say(f"an internal error (a bug; please report it): its traceback is in {path}")


TRACEBACK = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$', re.M)


def _origin(error: BaseException) -> BaseException:
    """The exception ``error`` began as: its deepest ``__cause__`` (a child's traceback, as
    text; not ``__context__``: an error raised while handling another is its own)."""
    while isinstance(error.__cause__, BaseException):
        error = error.__cause__
    return error


def _frames(origin: BaseException) -> list[tuple[str, str, str]]:
    """(file, line, function) of ``origin``'s frames, outermost first: its own traceback, then
    the last traceback in its text (another process's, which the call crossed from)."""
    import traceback

    own = [(f.filename, str(f.lineno), f.name) for f in traceback.extract_tb(origin.__traceback__)]
    # (Ray's task error: the remote frames follow its first line, with no "Traceback")
    return own + FRAME.findall(_origin_text(str(origin)).rsplit(TRACEBACK, 1)[-1])


CAUSE = "The above exception was the direct cause of the following exception:"
CONTEXT = "During handling of the above exception, another exception occurred:"


def _origin_text(text: str) -> str:
    """The part of a formatted exception chain (oldest first) that the last one began as:
    back through its direct causes (a call that crossed two processes, a worker's call to a
    shard, carries the shard's traceback as its first), not through "during handling"."""
    parts = re.split(f"({re.escape(CAUSE)}|{re.escape(CONTEXT)})", text)
    i = len(parts) - 1  # parts: text, separator, text, ...
    while i >= 2 and parts[i - 1] == CAUSE:
        i -= 2
    return parts[i]


def _yours(path: str, imports: Sequence[str]) -> bool:
    """Whether ``path`` is a file of a module of ``imports``: by its name's path (the same on
    Ray's nodes, which run a shipped copy), ``a/b.py`` for ``a.b``, any file of package ``a``;
    or the script (or notebook) that runs rltrain: a loss or rule its ``__main__`` defines,
    which docs/extending.md allows (explore108: its errors were "a bug in rltrain")."""
    if _script(path):
        return True
    where = "/" + path.replace(os.sep, "/")
    for name in imports:
        rel = "/" + name.replace(".", "/")
        if where.endswith(rel + ".py") or rel + "/" in where:
            return "-packages/" not in where or path == _file(name)
    return False


SHIPPED = "<dynamic-code>"
"""The file a process child's frames name for code the script's ``__main__`` sent it by value
(cloudpickle's): the script's, with its lines."""


def _shown(path: str) -> str:
    """A frame's file as the user knows it: a shipped frame's is the running script's."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.basename(main if path == SHIPPED and main else path)


def _script(path: str) -> bool:
    """Whether ``path`` is the running script's file (not rltrain's own: ``python -m
    rltrain.cli``), code it shipped to a child (:data:`SHIPPED`), or a notebook cell's
    (IPython's ``ipykernel_*/N.py``, ``<ipython-input-``)."""
    if path == SHIPPED:
        return True
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main and os.path.abspath(path) == os.path.abspath(main):
        return os.path.dirname(os.path.abspath(main)) != os.path.dirname(__file__)
    return "/ipykernel_" in path.replace(os.sep, "/") or path.startswith("<ipython-input-")


def _file(name: str) -> str | None:
    return getattr(sys.modules.get(name), "__file__", None)


def your_frame(error: BaseException, imports: Sequence[str]) -> str:
    """`` (at myloss.py:38, in __call__)``: where ``error`` began, if in a module of
    ``imports``: its innermost frame that is yours or rltrain's decides (torch's and the
    standard library's are passed over: your loss's shape error raised in torch is yours;
    rltrain's code that your code called is rltrain's); "" if not yours."""
    for path, line, fn in reversed(_frames(_origin(error))):
        if _yours(path, imports):
            return f" (at {_shown(path)}:{line}, in {fn})"
        if "/rltrain/" in path.replace(os.sep, "/"):
            return ""
    return ""


def first_line(e: BaseException) -> str:
    """``NameError: name 'x' is not defined``: the type and the message's first line."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _exception_line(error: BaseException) -> str:
    """``NameError: name 'x' is not defined``: the exception's type and its message's first
    line (Ray's task error: of the error it wraps; a child's text: the line after its last
    frame)."""
    cause = getattr(error, "cause", None)
    top = cause if isinstance(cause, BaseException) else error
    text = str(top)
    if TRACEBACK not in text:
        return first_line(top)
    last = text.rsplit(TRACEBACK, 1)[1].splitlines()
    frame_lines = [i for i, line in enumerate(last) if FRAME.match(line)]
    after = last[frame_lines[-1] + 1 :] if frame_lines else last
    said = [line for line in after if line and not line[0].isspace()]
    return said[0].strip() if said else type(top).__name__


def your_error(error: BaseException, imports: Sequence[str]) -> str | None:
    """One line for an exception raised in the user's code (a module of ``imports``: a loss,
    a rule, an estimator), wherever it ran: ``an error in your code: NameError: name 'x' is
    not defined (at myloss.py:38, in __call__)``; None for any other (rltrain's bug). The
    run stops as by a fault (summary.json, exit code 1): a restart would fail alike."""
    if not isinstance(error, Exception) or isinstance(error, RLTrainError):
        return None
    mine = your_frame(error, imports)
    return f"an error in your code: {_exception_line(error)}{mine}" if mine else None
