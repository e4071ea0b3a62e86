"""``--address``: a Ray cluster to join, checked before anything is written (an unreachable
address, a service that is not Ray, a resumed run's own address where its cluster is gone)."""

from __future__ import annotations

from typing import Any

from rltrain.errors import RLTrainError, UserError


def check_address(address: str | None) -> None:
    """An unreachable Ray cluster fails here, in seconds, before any folder or file is written.

    ``auto`` is resolved the way ``ray.init(address="auto")`` does for a cluster started with
    ``ray start``: RAY_ADDRESS, else the address file ``ray start`` writes. Ray itself would
    retry a stale address for minutes, printing a warning every few seconds.
    """
    if address is None:
        return
    from rltrain.runtime import ray as ray_runtime

    if address != "auto":
        _check_address_form(address)
        ray_runtime.check_address(address)
        return
    found, source = ray_runtime.cluster_here()
    if found is None:
        raise UserError(
            f"--address auto: no Ray cluster was started on this machine ({source}); start one "
            f"with `ray start --head`, give --address HOST:PORT, or {LEAVE_OUT}"
        )
    try:
        _check_address_form(found)
        ray_runtime.check_address(found)
    except RLTrainError as e:
        raise UserError(f"--address auto: {source} names {found}: {e}") from None


LEAVE_OUT = "leave --address out to run on this machine"
"""The advice of a failed join (rltrain.runtime.ray.reach and check_address above)."""


def own_address(message: str, state: dict[str, Any] | None, address: str | None) -> str:
    """A failed join's ``message``, where the address is a resumed run's own (from its config,
    not ``--address``): leaving --address out would not change it, so the advice is how to
    run it on this machine instead."""
    saved = (state or {}).get("config") or {}
    if not address or (saved.get("runtime") or {}).get("address") != address:
        return message
    here = "run it on this machine with --set runtime.address=null (the run's own address)"
    return message.replace(LEAVE_OUT, here) if LEAVE_OUT in message else f"{message}; {here}"


def _check_address_form(address: str) -> None:
    scheme, sep, _ = address.partition("://")
    if sep and scheme != "ray":  # (the dashboard's http://HOST:8265 is the likely one)
        raise UserError(
            f"--address {address}: {scheme}:// is not a Ray address; expected 'auto', HOST:PORT "
            "(the head's `ray start --head --port`, 6379 by default) or ray://HOST:PORT"
        )
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(
            f"--address {address or repr(address)}: expected 'auto', HOST:PORT or "
            "ray://HOST:PORT (port 1-65535)"
        )
