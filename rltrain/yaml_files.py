"""Reading YAML config files: ``yaml.safe_load``'s rules, no key twice, one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rltrain.errors import ConfigError


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, except that a key written twice in one mapping is an error
    (PyYAML keeps the last one silently: a second ``env:`` section replaced the first); the
    keys a merge key (``<<: *base``) brings in may still be overridden."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        if id(node) not in self.checked:  # once, before merged keys join the node's own
            self.checked.add(id(node))
            lines: dict[Any, int] = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    key, line = self.construct_object(k), k.start_mark.line + 1
                    if key in lines:
                        why = f"duplicate key '{key}', first at line {lines[key]}; keep one"
                        raise yaml.constructor.ConstructorError(None, None, why, k.start_mark)
                    lines[key] = line
        super().flatten_mapping(node)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping as ``yaml.safe_load`` does (:class:`UniqueKeyLoader`: no key twice);
    a missing or malformed file is a ConfigError."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p} is a folder; give a YAML file (see configs/)")
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}; give a YAML file (see configs/)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a YAML text file (not UTF-8); give a YAML config") from None
    except OSError as e:
        raise ConfigError(f"config file {p}: cannot read it ({e.strerror or e})") from None
    try:
        data = yaml.load(text, UniqueKeyLoader)  # safe_load's, no key twice
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or "").split())
        why = f" ({problem})" if problem else ""
        raise ConfigError(f"{p}: not valid YAML{where}{why}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: expected a mapping of config keys (key: value lines) at the top level, "
            f"got a {type(data).__name__}"
        )
    return data
