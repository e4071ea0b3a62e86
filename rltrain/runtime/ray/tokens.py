"""Ray's token authentication where ``--address auto`` joins a cluster on this machine:
whether the run sends ~/.ray/auth_token's token, and taking back what it set at its end."""

from __future__ import annotations

import os

from rltrain.runtime.ray.reach import _ask, _quiet_stderr, token_file


def token_note(address: str, found: str | None) -> str:
    """What to know where ``--address auto`` will send a token the user never chose: Ray
    (2.6x) turns token authentication on for a driver that joins a cluster found on this
    machine while ~/.ray/auth_token exists and RAY_AUTH_MODE is unset, and that file is
    written by any local ``ray.init`` (a ``runtime.backend=ray`` run's included). A cluster
    started before the file existed has no tokens, and refuses every process of the run
    ("Missing authorization header"), which then dies as it starts (explore109).

    So the head is asked first, without a token: one that answers has no tokens, and the run
    sends none (RAY_AUTH_MODE=disabled, this process's: the cluster's own mode); one that
    wants a token gets the file's, as Ray would send it (review88: a note on every join)."""
    if address != "auto" or "RAY_AUTH_MODE" in os.environ or not token_file().is_file():
        return ""
    if found is None:  # (the address auto resolves to: startup.cluster_here)
        return ""
    with _quiet_stderr():  # (a head that wants a token logs its refusal)
        answer = _ask(found)
    if answer is not None:  # it wants a token (Ray sends the file's), or could not be asked
        return ""
    os.environ["RAY_AUTH_MODE"] = _AUTH_SET[0] = "disabled"  # (undone by shutdown)
    return (
        "; the cluster has no token authentication, so this run sends no token (Ray would "
        "have sent ~/.ray/auth_token's, which such a cluster refuses)"
    )


_AUTH_SET: list[str | None] = [None]
"""The RAY_AUTH_MODE :func:`token_note` set for this session, to undo at its end (a notebook's
next local Ray would start without tokens, a next join send none: review88b)."""


def undo_auth() -> None:
    """Take back the RAY_AUTH_MODE :func:`token_note` set, if it is still the one set."""
    if _AUTH_SET[0] is not None and os.environ.get("RAY_AUTH_MODE") == _AUTH_SET[0]:
        del os.environ["RAY_AUTH_MODE"]
    _AUTH_SET[0] = None
