"""A config file's YAML as `yaml.safe_load` reads it, but a key written twice in one mapping refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gateway.errors import ConfigError


def load_yaml(text: str, config_path: Path) -> Any:
    """`yaml.safe_load`, refusing a key written twice in one mapping: YAML keeps the last silently, so a
    second `bots:` appended to the file replaced the bot list (and the next ingest deleted the first
    list's knowledge)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, config_path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node: yaml.Node, config_path: Path, path: str = "",
                           seen: set[int] | None = None) -> None:
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias of a node already checked (or of one that holds it)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            sub = f"{path}.{key.value}" if path else str(key.value)
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if (key.tag, key.value) in first:
                    raise ConfigError(sub, f"duplicate key, at lines {first[key.tag, key.value]} and {line} of "
                                           f"{config_path}; YAML would keep only the last one, so write it once")
                first[key.tag, key.value] = line
            _refuse_duplicate_keys(value, config_path, sub, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, value in enumerate(node.value):
            _refuse_duplicate_keys(value, config_path, f"{path}[{i}]", seen)
