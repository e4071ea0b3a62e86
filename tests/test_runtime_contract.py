"""The runtime contract (rltrain.runtime.contract): every registered runtime (Ray's, the process
runtime, the thread runtime, and one a user adds) has the same names, with the same
parameters, as the trainer uses them."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

from rltrain import runtime
from rltrain.config import ConfigError, from_dict
from rltrain.runtime import contract
from rltrain.runtime.config import RuntimeConfig
from rltrain.runtime.registry import RuntimeEntry, runtime_entry

RUNTIMES = [runtime_entry(name).module for name in runtime.runtime_names()]


def protocol_members(proto: type) -> dict[str, Any]:
    """A Protocol's methods and attributes (its own, not object's or Protocol's)."""
    names = set(getattr(proto, "__annotations__", {}))
    names |= {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}
    names |= {"__len__"} if "__len__" in vars(proto) else set()
    return {n: getattr(proto, n, None) for n in names}


def params(fn: Any) -> list[tuple[str, Any]]:
    """Parameter names and kinds, ``self`` left out."""
    sig = inspect.signature(fn)
    return [(p.name, p.kind) for p in sig.parameters.values() if p.name != "self"]


def compatible(want: Any, have: Any) -> bool:
    """``have`` accepts every call ``want`` describes: the same named parameters in order, or
    a ``*args`` / ``**kwargs`` that takes the rest."""
    w, h = params(want), params(have)
    takes_rest = any(k is inspect.Parameter.VAR_POSITIONAL for _, k in h)
    names = [n for n, k in h if k not in (inspect.Parameter.VAR_POSITIONAL,)]
    for i, (name, kind) in enumerate(w):
        if kind is inspect.Parameter.VAR_POSITIONAL:
            return True  # the rest: each runtime's own (Ray's placement arguments)
        if i < len(h) and h[i][0] == name:
            continue
        if not (takes_rest or name in names):
            return False
    return True


@pytest.mark.parametrize("module", RUNTIMES)
def test_each_runtime_module_has_every_member_of_the_contract(module: str) -> None:
    rt = importlib.import_module(module)
    for name, want in protocol_members(contract.Runtime).items():
        assert hasattr(rt, name), f"{module} lacks {name}"
        if callable(want) and name not in contract.MEMBERS:
            assert compatible(want, getattr(rt, name)), (
                f"{module}.{name}{inspect.signature(getattr(rt, name))}"
            )


@pytest.mark.parametrize("module", RUNTIMES)
@pytest.mark.parametrize("member", sorted(contract.MEMBERS))
def test_each_runtime_class_satisfies_its_protocol(module: str, member: str) -> None:
    cls = getattr(importlib.import_module(module), member)
    proto = contract.MEMBERS[member]
    for name, want in protocol_members(proto).items():
        if callable(want):
            assert callable(getattr(cls, name, None)), f"{module}.{member} lacks {name}()"
            assert compatible(want, getattr(cls, name)), f"{module}.{member}.{name}"


class Idle:
    pass


def test_instances_carry_the_attributes_the_driver_reads() -> None:
    """Attributes set in constructors: checked on live objects of the runtimes without Ray."""
    from rltrain.runtime import local, process

    for rt in (local, process):
        r = rt.Remote(Idle, role="actor", index=3)
        try:
            for name in ("role", "index", "actor_id", "cpus", "restarted_by"):
                assert hasattr(r, name), f"{rt.__name__}.Remote has no {name}"
            assert r.index == 3 and r.role == "actor"
            assert isinstance(rt.Pool().calls, dict)
        finally:
            r.kill()
    process.shutdown()


def test_the_built_in_runtimes_are_registered() -> None:
    assert set(RUNTIMES) >= {
        "rltrain.runtime.ray",
        "rltrain.runtime.process",
        "rltrain.runtime.local",
    }


def test_a_runtime_is_one_package_plus_its_registration() -> None:
    """A user's runtime (here the thread runtime under another name): registered, it is a value
    of runtime.backend, backend() returns its module, and the contract's checks accept it;
    unregistered, the name is refused in one line naming the others."""
    mine = RuntimeEntry("mythreads", "rltrain.runtime.local", "a user's runtime")
    runtime.register_runtime(mine)
    try:
        cfg = from_dict(RuntimeConfig, {"backend": "mythreads"})
        rt = runtime.backend(cfg)
        assert rt is importlib.import_module("rltrain.runtime.local")
        test_each_runtime_module_has_every_member_of_the_contract(mine.module)
        with pytest.raises(ValueError, match="registered already"):
            runtime.register_runtime(RuntimeEntry("mythreads", "elsewhere", "another"))
    finally:
        runtime.unregister_runtime("mythreads")
    with pytest.raises(ConfigError, match="backend='mythreads': allowed values are auto, process"):
        from_dict(RuntimeConfig, {"backend": "mythreads"})
    with pytest.raises(ValueError, match="built in"):
        runtime.unregister_runtime("process")
