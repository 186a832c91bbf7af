"""A config's validation error as one `ConfigError` naming its key (`bots[0].sytem_prompt: unknown key; did you
mean system_prompt?`)."""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.errors import ConfigError


def _format_location(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out



def config_error(exc: ValidationError, schema: type[BaseModel] | None = None) -> ConfigError:
    """The `ConfigError` naming the key of the first validation error; with the `schema` validated
    against, an unknown key names the known one it is closest to."""
    err = exc.errors()[0]
    key = _format_location(tuple(err["loc"]))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
        near = difflib.get_close_matches(str(err["loc"][-1]), _keys_at(schema, err["loc"][:-1]), n=1, cutoff=0.75)
        if near:  # `sytem_prompt` was only "unknown key", which sends a reader to the README's tables
            msg += f"; did you mean {near[0]}?"
        elif parent := _parent_of(schema, err["loc"][:-1], str(err["loc"][-1])):
            # An indentation slip: `telegram:` beside `channels:`, not under it.
            msg += f"; it goes under {parent}: ({_format_location((*err['loc'][:-1], parent, err['loc'][-1]))})"
    elif err["type"] in ("literal_error", "enum") and isinstance(err.get("input"), str | int | float):
        msg += f"; got {str(err['input'])[:60]!r}"  # `type: dir` is one source among many: show the word
    elif err["type"] == "list_type" and isinstance(err.get("input"), str | int | float):
        msg += f"; got {str(err['input'])[:60]!r}: write a list, as [{str(err['input'])[:60]}] (or one item a line, each starting with -)"
    elif err["type"] == "list_type" and isinstance(err.get("input"), dict):  # a list's item written without its "- "
        msg += "; got a mapping: write a list, its items each starting with -"
        if dashed := next((k for k in err["input"] if isinstance(k, str) and re.match(r"-[^\s-]", k)), None):
            msg += f" and a space (- {dashed[1:]}, not {dashed})"  # `-name: acme` is a key named "-name"
    if not key and ": " in msg and msg.split(": ", 1)[0].replace(".", "").replace("[", "").replace("]", "").replace("_", "").isalnum():
        key, msg = msg.split(": ", 1)
    return ConfigError(key, msg)


def _keys_at(schema: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The keys the model at `loc` under `schema` takes (none when the path leaves the models)."""
    model = _model_at(schema, loc)
    return [field.alias or name for name, field in model.model_fields.items()] if model is not None else []


def _model_at(schema: type[BaseModel] | None, loc: tuple) -> type[BaseModel] | None:
    """The model at `loc` under `schema` (None when the path leaves the models)."""
    model = schema
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):  # a list's item: the field's annotation named the item's model already
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
    return model


def _parent_of(schema: type[BaseModel] | None, loc: tuple, key: str) -> str | None:
    """The key at `loc` whose own model takes `key` (`channels` for `telegram` under a bot), if one does."""
    fields = _model_at(schema, loc)
    for name, field in (fields.model_fields.items() if fields is not None else ()):
        annotation = field.annotation
        if any(typing.get_origin(a) is list for a in (annotation, *typing.get_args(annotation))):
            continue  # `bots[N].name`: an item of a list, not a key under it
        child = _model_in(annotation)
        if child is not None and key in [f.alias or n for n, f in child.model_fields.items()]:
            return field.alias or name
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds: itself, or the one in `list[M]`, `M | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None
