"""README.md names every log event, metric and config key the code has (README, Metrics and log events)."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

from pydantic import BaseModel

from gateway.observability.metrics import Metrics
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
EVENT = re.compile(r"[a-z0-9_]+\.[a-z0-9_.]+")


def _names(node: ast.AST) -> list[str]:
    """The event names an expression can be: a string, either branch of `a if c else b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and EVENT.fullmatch(node.value):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _names(node.body) + _names(node.orelse)
    return []


def _logged_events() -> set[str]:
    """Event names given as the first argument of a log call, or assigned to `event` for one."""
    found: set[str] = set()
    for package in ("gateway", "channels", "rag", "storage"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in LEVELS and node.args):
                    found.update(_names(node.args[0]))
                elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                      and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "event"):
                    found.update(_names(node.value))
    return found


def _config_keys(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """Every field name of `model` and of the models its fields hold, at any depth."""
    seen = seen if seen is not None else set()
    seen.add(model)
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        keys.add(name)
        stack = [field.annotation]
        while stack:
            kind = stack.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel) and kind not in seen:
                keys |= _config_keys(kind, seen)
            stack.extend(typing.get_args(kind))
    return keys


def test_readme_names_every_log_event_the_code_emits() -> None:
    events = _logged_events()
    assert len(events) > 200  # the walk found the log calls
    assert sorted(e for e in events if f"`{e}`" not in README) == []


def test_readme_names_every_metric() -> None:
    names = {m.name for m in Metrics().registry.collect()}
    names |= {name for name, _doc in Metrics().store.FAMILIES.values()}
    # prometheus_client drops a counter's `_total` from its family name.
    missing = [n for n in sorted(names) if n not in README and f"{n}_total" not in README]
    assert missing == []


def test_readme_names_every_config_key() -> None:
    keys = _config_keys(Settings) - {"config_path"}  # set by the loader, never written in a file
    # Where a key is written: in inline code (`llm.timeout`, `{per_contact_per_minute, …}`) or a code block.
    code = " ".join(re.findall(r"```.*?```|`[^`\n]+`", README, flags=re.S))
    assert sorted(k for k in keys if not re.search(rf"(?<![\w-]){k}(?![\w-])", code)) == []
