"""What failed a run, for the one who reads it: summary.json's one line, the traceback kept in
the run folder's failure.log, and whose code raised (rltrain's, or the user's: a module the
config ``imports``, such as a loss, a rule or an env of one's own)."""

from __future__ import annotations

import contextlib
import os
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
    error = getattr(error, "cause", None) or error  # RayTaskError(EnvFailed): the EnvFailed
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

    text = "".join(traceback.format_exception(error))
    with contextlib.suppress(OSError):
        path.write_text(text)
        if mine := your_frame(text, imports):
            say(f"an error in your code{mine}: its traceback is in {path}")
        else:
            say(f"an internal error (a bug; please report it): its traceback is in {path}")


def your_frame(text: str, imports: Sequence[str]) -> str:
    """`` (at myloss.py:38, in __call__)``: the innermost frame of the traceback ``text``
    (another process's too: it crosses as text) in a module of ``imports``; "" if none."""
    import re

    files = {getattr(sys.modules.get(name), "__file__", None) for name in imports} - {None}
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)
    mine = [(path, line, fn) for path, line, fn in frames if path in files]
    if not mine:
        return ""
    path, line, fn = mine[-1]
    return f" (at {os.path.basename(path)}:{line}, in {fn})"


def your_error(error: BaseException, imports: Sequence[str]) -> str | None:
    """One line for an exception raised in the user's code (a module of ``imports``: a loss,
    a rule, an estimator), wherever it ran: ``an error in your code: NameError: name 'x' is
    not defined (at myloss.py:38, in __call__)``; None for any other (rltrain's bug). The
    run stops as by a fault (summary.json, exit code 1): a restart would fail alike."""
    import traceback

    if not isinstance(error, Exception) or isinstance(error, RLTrainError):
        return None
    mine = your_frame("".join(traceback.format_exception(error)), imports)
    if not mine:
        return None
    error = getattr(error, "cause", None) or error  # Ray's task error: the error it wraps
    # the exception's own last line (another process's traceback, as text, ends with it)
    lines = "".join(traceback.format_exception_only(error)).strip().splitlines()
    return f"an error in your code: {lines[-1] if lines else type(error).__name__}{mine}"
