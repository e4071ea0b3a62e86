"""Typed configs: YAML files and ``--set a.b=c`` overrides mapped onto frozen dataclasses.

Every config section is a frozen dataclass whose fields carry a docstring (the string literal
right after the field, read with :mod:`ast` for ``rltrain options``) and, where a value has a
range or a fixed set of choices, ``field(metadata=...)`` with ``choices``/``ge``/``gt``/``le``.
Loading checks every key, type and range *before* any process starts and raises
:class:`ConfigError` with a one-line message naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from rltrain import config_keys as keys
from rltrain.config_keys import homes_hint, moved_keys, read_by, type_at
from rltrain.errors import ConfigError, UnknownKey, shown
from rltrain.yaml_files import UniqueKeyLoader, read_layered
from rltrain.yaml_files import read_yaml as read_yaml  # re-exported: one reader of YAML

T = TypeVar("T")


def spec(
    *,
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    auto: bool = False,
    infinite: bool = False,
    unique: bool = False,
) -> dict[str, Any]:
    """Metadata for ``field(metadata=spec(...))``: allowed choices (or a function returning a
    registry's names, read at each check) and numeric bounds. ``infinite``: a float that also
    takes .inf/-.inf (within its bounds); without it only finite numbers (NaN never).
    ``unique``: a list whose items may not repeat."""
    return {
        "choices": choices if callable(choices) or not choices else tuple(choices),
        "ge": ge,
        "gt": gt,
        "le": le,
        "lt": lt,
        "auto": auto,  # an int that also takes "auto", read as 0
        "infinite": infinite,
        "unique": unique,
    }


def choices_of(meta: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The allowed values of a field's ``spec`` (None: any value of its type)."""
    choices = meta.get("choices")
    return tuple(choices()) if callable(choices) else choices


# ---------------------------------------------------------------------------------------------
# dict -> dataclass


def from_dict(
    cls: type[T], data: Mapping[str, Any] | None, prefix: str = "", base: Any = None
) -> T:
    """Build dataclass ``cls`` from a (possibly partial) mapping, checking every key and value.

    Keys left out keep ``base``'s values (a ``cls`` instance), else the field defaults. A
    section whose default differs from its class's (train's ``optimizer``: RMSProp, lr 7e-4,
    eps 0.1) is the base of that section when the section keeps its name: a partial section
    (``--set optimizer.lr=1e-3``) changes only the keys it names, while one that names
    another (``optimizer: {name: adam, lr: 1e-3}``) starts from that class's defaults."""
    try:
        return _build(cls, data, prefix, base)
    except UnknownKey as e:  # (as it leaves the whole config) a key of another section?
        if prefix:
            raise
        hinted = "did you mean" in str(e)  # (its section's near names: no others then)
        raise ConfigError(f"{e}{homes_hint(cls, e.key, misspelt=not hinted)}") from None


def _build(cls: type[T], data: Mapping[str, Any] | None, prefix: str, base: Any) -> T:
    data = {} if data is None else moved_keys(cls, data)
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{prefix.rstrip('.') or 'config'}: expected a mapping of keys, got {data!r}"
        )
    if hasattr(cls, "before_check"):  # e.g. import the modules that register choices
        cast(Any, cls).before_check(data)
    fields = {f.name: f for f in dataclasses.fields(cls) if keyed(f)}  # type: ignore[arg-type]
    holder, extra = _extra_sections(cls)
    fields.pop(holder, None)
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields and key not in extra:
            allowed, section = [*fields, *extra], bool(holder) and isinstance(data[key], Mapping)
            raise UnknownKey(keys.unknown_key(prefix + str(key), str(key), allowed, section), key)
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        held = getattr(base, name) if base is not None else field_default(f)
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], prefix + name, f.metadata, held)
        elif base is not None:
            kwargs[name] = held
    if holder:  # the sections a registry adds, each as a section of its own
        have = getattr(base, holder, {})
        kwargs[holder] = {
            n: from_dict(tp, data.get(n), f"{prefix}{n}.", have.get(n)) for n, tp in extra.items()
        }
    try:
        obj = cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:  # __post_init__ cross-field checks
        where = f"{prefix.rstrip('.')}: " if prefix else ""  # top-level checks name their keys
        raise ConfigError(f"{where}{e}") from None
    return obj


def keyed(f: dataclasses.Field) -> bool:
    """Whether a dataclass field is a config key: not one derived from another key (metadata
    ``derived``, e.g. ``env.imports``, set from the run's ``imports``)."""
    return f.init and not f.metadata.get("derived")


def _extra_sections(cls: type) -> tuple[str, dict[str, type]]:
    """A config class's sections from a registry: the field that holds them (``cls.SECTIONS``)
    and their classes by name (``cls.extra_sections()``); ("", {}) for most classes."""
    holder = getattr(cls, "SECTIONS", "")
    return (holder, cast(Any, cls).extra_sections()) if holder else ("", {})


def field_default(f: dataclasses.Field) -> Any:
    """A field's default value (``default_factory`` called), or None when it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _convert(tp: Any, value: Any, key: str, meta: Mapping[str, Any], held: Any = None) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        nullable = {**meta, "nullable": type(None) in args}  # said when a value is refused
        return _convert(inner[0], value, key, nullable, held)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if value is None:  # (explore102: `--set algo=null` trained a3c, the section's defaults)
            one = next(f.name for f in dataclasses.fields(tp) if keyed(f))
            raise ConfigError(f"{key}=null: a section; set its keys ({key}.{one}=...) or omit it")
        if isinstance(value, str) and "name" in {f.name for f in dataclasses.fields(tp)}:
            value = {"name": value}  # a section written as its name (`model: cnn`)
        # another name (optimizer: adam): that class's defaults, not RMSProp's eps 0.1
        name = getattr(held, "name", None)
        same = (
            isinstance(held, tp) and isinstance(value, Mapping) and value.get("name", name) == name
        )
        return from_dict(tp, value, key + ".", held if same else None)
    if origin is dict:  # free-form keyword arguments (env.kwargs): string keys, YAML values
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{key}={shown(value)}: expected a mapping of names to values")
        return dict(value)
    if origin is tuple:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            form = f"[{value}]" if isinstance(value, str) else "[a, b]"  # (explore106)
            raise ConfigError(f"{key}={shown(value)}: expected a list, as --set '{key}={form}'")
        items = tuple(_convert(args[0], v, f"{key}[{i}]", meta) for i, v in enumerate(value))
        twice = sorted({str(v) for v in items if items.count(v) > 1})
        if meta.get("unique") and twice:  # one row, column or run per item
            raise ConfigError(f"{key}: {', '.join(twice)} listed twice; list each once")
        return items
    if meta.get("auto") and isinstance(value, str):
        if value == "auto":
            return 0
        raise ConfigError(f"{key}={shown(value)}: expected an integer or auto")
    choices = choices_of(meta)
    if choices and tp is str and not isinstance(value, str):
        # YAML reads on/off/yes/no as booleans: name what is allowed, not only the type
        raise ConfigError(
            f"{key}={shown(value)}: allowed values are {', '.join(map(str, choices))}"
        )
    scalar = _scalar(tp, value, key, " or null" if meta.get("nullable") else "")
    return _check(_finite(scalar, key, meta), key, meta)


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _scalar(tp: Any, value: Any, key: str, or_null: str = "") -> Any:
    value = value.item() if getattr(value, "shape", None) == () else value  # np.float32(1.5)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={shown(value)}: expected true or false{or_null}")
    if tp is int:  # any Integral (not a bool); a float is refused, 2.0 too
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        raise ConfigError(f"{key}={shown(value)}: expected an integer{or_null}")
    if tp is float:  # any Real: int, Fraction, ...
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            return float(value)  # YAML 1.1 reads 1e-3 (no dot, no exponent sign) as a string
        raise ConfigError(f"{key}={shown(value)}: expected a number{or_null}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}={shown(value)}: expected a string{or_null}")
    raise ConfigError(f"{key}: unsupported config type {tp}")  # a bug in a config class


BOUNDS = (  # (spec's name, the check, its word): the checker's and `rltrain options`' bounds
    ("ge", lambda v, b: v >= b, ">="),
    ("gt", lambda v, b: v > b, ">"),
    ("le", lambda v, b: v <= b, "<="),
    ("lt", lambda v, b: v < b, "<"),
)


def _finite(value: Any, key: str, meta: Mapping[str, Any]) -> Any:
    """A float that is NaN, or infinite where its ``spec`` does not allow it, is refused:
    ``--set optimizer.lr=.inf`` would pass a lower bound and fail deep in a run."""
    if not isinstance(value, float) or math.isfinite(value):
        return value
    if meta.get("infinite") and not math.isnan(value):
        return value
    bounds = " and ".join(f"{w} {meta[b]}" for b, _, w in BOUNDS if meta.get(b) is not None)
    allowed = f"a finite number {bounds}".rstrip() + (", or null" if meta.get("nullable") else "")
    raise ConfigError(f"{key}={value!r}: must be {allowed}")


def _check(value: Any, key: str, meta: Mapping[str, Any]) -> Any:
    choices = choices_of(meta)
    if choices and value not in choices:
        raise ConfigError(keys.unknown_choice(key, value, choices, callable(meta.get("choices"))))
    for bound, ok, word in BOUNDS:
        b = meta.get(bound)
        if b is not None and not ok(value, b):
            also = " (or auto)" if meta.get("auto") else " (or null)" * bool(meta.get("nullable"))
            raise ConfigError(f"{key}={value!r}: must be {word} {b}{also}")
    return value


# ---------------------------------------------------------------------------------------------
# YAML files and --set overrides


def parse_overrides(items: Sequence[str], cls: type | None = None) -> dict[str, Any]:
    """Turn ``["a.b=3", "c=[1, 2]"]`` into a nested dict; values are parsed as YAML scalars.
    ``cls``: the config they apply to (see :func:`nested`)."""
    flat: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set optimizer.lr=0.01")
        try:
            value = yaml.load(raw, UniqueKeyLoader) if raw.strip() else ""
        except yaml.YAMLError as e:
            opener = raw.lstrip()[:1]
            if opener in ("[", "{"):  # meant as a list or mapping: never a plain word
                mark = getattr(e, "problem", None) or "not valid YAML"
                raise ConfigError(
                    f"--set {item!r}: the value is not a valid YAML "
                    f"{'list' if opener == '[' else 'mapping'} ({mark}); write it as "
                    f"{key.strip()}=[a, b] or {key.strip()}={{k: v}}, quoted for the shell"
                ) from None
            value = raw
        flat[key.strip()] = value
    return nested(flat, "--set ", cls)


def named_section(cls: type | None, path: Sequence[str]) -> bool:
    """Whether the key at ``path`` in config ``cls`` is a section with a ``name``, which may
    be written as its name alone (``model: cnn`` for ``model: {name: cnn}``)."""
    tp = type_at(cls, path)
    return dataclasses.is_dataclass(tp) and "name" in {f.name for f in dataclasses.fields(tp)}


class Whole(dict):
    """A mapping set whole (``--set env.kwargs={}``) for a key holding a mapping, not a section:
    it replaces the file's, so a key can be dropped (``env.kwargs.n=4`` merges one key)."""


def nested(flat: Mapping[str, Any], what: str = "", cls: type | None = None) -> dict[str, Any]:
    """``{"a.b": 3, "c": 1}`` as ``{"a": {"b": 3}, "c": 1}`` (dotted keys name sections).
    With the config ``cls``, a section with a name may also be set by its name, in any order
    with its keys (``model=cnn`` and ``model.stages=2``)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if not isinstance(key, str):
            raise ConfigError(f"{what}{key!r}: config keys are strings, e.g. 'optimizer.lr'")
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if isinstance(node.get(part), str) and named_section(cls, parts[: i + 1]):
                node[part] = {"name": node[part]}
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{what}{key!r}: '{part}' is set both as a value and a section")
        last = parts[-1]
        if (
            isinstance(node.get(last), dict)
            and isinstance(value, str)
            and named_section(cls, parts)
        ):
            node[last]["name"] = value
        elif isinstance(value, Mapping) and typing.get_origin(type_at(cls, parts)) is dict:
            node[last] = Whole(plain_copy(value))  # (a later dotted key of it fills it in)
        elif isinstance(node.get(last), dict) and isinstance(value, Mapping):
            # a.b=1 then a={c: 2}: both hold (the later wins a key set twice), as in a file
            node[last] = merge(node[last], plain_copy(value), cls, tuple(parts))
        else:  # a copy: later dotted keys fill it in, never the caller's own mapping
            node[last] = plain_copy(value)
    return out


def plain_copy(value: Any) -> Any:
    """A copy of a value's mappings (as dicts) and lists, its leaves shared."""
    if isinstance(value, Mapping):
        return {k: plain_copy(v) for k, v in value.items()}
    return [plain_copy(v) for v in value] if isinstance(value, list) else value


def merge(
    base: dict[str, Any], over: Mapping[str, Any], cls: type | None = None, at: tuple = ()
) -> dict[str, Any]:
    """Recursive dict merge: ``over`` wins; sections merge key by key. With the config ``cls``,
    a section with a name written as its name merges as ``{name: ...}`` (``model: cnn`` and
    ``--set model.stages=2`` give a cnn in 2 stages; ``--set optimizer=adam`` keeps the lr).
    Keys ``cls`` moved (:func:`moved_keys`) move on each side first: an old run's config.yaml
    and a new ``--set`` of the same key merge as one key, the ``--set`` winning."""
    if not at:
        base, over = moved_keys(cls, base), moved_keys(cls, over)
    out = dict(base)
    for k, v in over.items():
        held = out.get(k)
        if named_section(cls, (*at, k)):
            held = {"name": held} if isinstance(held, str) else held
            v = {"name": v} if isinstance(v, str) else v
        if isinstance(v, Mapping) and isinstance(held, Mapping) and not isinstance(v, Whole):
            out[k] = merge(dict(held), v, cls, (*at, k))
        else:
            out[k] = dict(v) if isinstance(v, Whole) else v
    return out


def read_config(path: str | Path, cls: type | None = None) -> dict[str, Any]:
    """A config file's keys, its ``base:`` file's beneath them (:func:`read_layered`)."""
    return read_layered(path, lambda under, over: merge(under, over, cls))


def load_config(cls: type[T], path: str | Path | None, overrides: Sequence[str] = ()) -> T:
    """Load ``cls`` from a YAML file plus ``--set`` overrides, fully validated."""
    data = read_config(path, cls) if path is not None else {}
    try:
        return from_dict(cls, merge(data, parse_overrides(overrides, cls), cls))
    except ConfigError as e:  # e.g. no stop: say the file gave nothing
        empty = path is not None and not data
        raise (ConfigError(f"{e} (config file {path} is empty)") if empty else e) from None


def to_dict(cfg: Any, command: str | None = None) -> dict[str, Any]:
    """A plain, YAML-safe dict of a config's keys (tuples become lists), without the keys only
    the other command reads (``command``, else train's or bench's for their configs; None:
    every key): a train run's config.yaml held server.n_push, which train refuses (explore101)."""
    out: dict[str, Any] = _keys_of(cfg, command or getattr(cfg, "COMMAND", None))
    holder = getattr(cfg, "SECTIONS", "")
    if holder:  # a registry's sections as top-level ones, where the holder stands
        out = {k2: v2 for k, v in out.items() for k2, v2 in (v if k == holder else {k: v}).items()}
    return out


def _keys_of(cfg: Any, command: str | None = None) -> Any:
    """``dataclasses.asdict`` of a config without its derived fields (:func:`keyed`), nor,
    with ``command``, those whose metadata ``only`` names another command."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        kept = [f for f in dataclasses.fields(cfg) if keyed(f) and read_by(f, command)]
        return {f.name: _keys_of(getattr(cfg, f.name), command) for f in kept}
    if isinstance(cfg, dict):
        return {k: _keys_of(v, command) for k, v in cfg.items()}
    if isinstance(cfg, tuple | list):
        return [_keys_of(v, command) for v in cfg]
    return cfg


def dump_yaml(cfg: Any) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
