"""Each argument the model passes to a tool, checked against the JSON type (and `enum`) its schema
declares for it, and each key of an object against the `properties` its schema lists. A tool reads what it
declared: a customer who talks the model into `{"email": {"$ne": null}}` must not hand an object to code (or
an API) that takes a string, nor `{"filter": {"email": …, "$where": …}}` a key it never declared."""

from __future__ import annotations

from typing import Any

_JSON_TYPES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
               "array": "an array", "object": "an object", "null": "null"}


def json_type(value: Any) -> str:
    """The JSON type of a decoded JSON value (a bool is a boolean, not an integer)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _fits(value: Any, declared: str) -> bool:
    got = json_type(value)
    return got == declared or (declared == "number" and got == "integer") or (
        declared == "integer" and got == "number" and float(value).is_integer())


def same_json(a: Any, b: Any) -> bool:
    """JSON Schema's equality of two decoded JSON values, which `==` is not: `True == 1` in Python, but a
    boolean is no number in JSON; 1 and 1.0 are one number; arrays and objects are equal item by item."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


def argument_problem(arguments: dict[str, Any], schema: dict[str, Any], path: str = "") -> str | None:
    """Why an argument is not of the `type` its property in `schema` declares or not among its `enum`, or
    None; an object's own `properties` and an array's `items` are checked the same way, at any depth
    (`{"filter": {"email": {"$ne": null}}}`). A property without either (or a type this check does not
    know) takes anything, as before; and `null` for one that is not `required` is no value given (models
    write it for an optional field)."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    for name, value in arguments.items():
        declared = properties.get(name)
        if isinstance(declared, dict) and not (value is None and name not in required):
            if problem := _value_problem(value, declared, f"{path}.{name}" if path else name):
                return problem
    return None


def _value_problem(value: Any, schema: dict[str, Any], where: str) -> str | None:
    declared = schema.get("type")
    types = [t for t in ([declared] if isinstance(declared, str) else declared if isinstance(declared, list) else [])
             if isinstance(t, str) and t in _JSON_TYPES]
    if types and not any(_fits(value, t) for t in types):
        wanted = " or ".join(_JSON_TYPES[t] for t in types)
        return f"{where!r} must be {wanted}, not {_JSON_TYPES[json_type(value)]}"
    choices = schema.get("enum")
    if isinstance(choices, list) and not any(same_json(value, choice) for choice in choices):
        return f"{where!r} must be one of {', '.join(map(repr, choices))}"
    if isinstance(value, dict):
        return _undeclared_key(value, schema, where) or argument_problem(value, schema, where)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        for index, item in enumerate(value):
            if problem := _value_problem(item, items, f"{where}[{index}]"):
                return problem
    return None


# Where keys are declared or let in in a way this does not follow: an object whose schema says one takes any key.
_NOT_FOLLOWED = ("patternProperties", "$ref", "dependentSchemas", "if")
_BRANCHES = ("allOf", "anyOf", "oneOf")


def _undeclared_key(value: dict[str, Any], schema: dict[str, Any], where: str) -> str | None:
    """Why a key of an object is not one its schema's `properties` declare, or None. As a tool's own
    undeclared parameters are refused (`BotTools._call`), so are an object's at any depth: `{"filter": {"email":
    …, "$where": …}}` handed a query operator to the API. `additionalProperties` (true, or a schema the
    other values are checked against) or `patternProperties` lets other keys in; an object whose schema
    lists no `properties` takes any. A key an `allOf`/`anyOf`/`oneOf` branch declares is declared (it was
    refused, and the tool could not be called), and no other: a branch that only says which key is required
    let every key in. One whose keys come from where this does not follow (`$ref`, `if`, `dependentSchemas`)
    takes any."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or (declared := _declared_keys(schema)) is None:
        return None
    extra = schema.get("additionalProperties", False)
    for name, item in value.items():
        if name in declared or extra is True:
            continue
        if isinstance(extra, dict):
            if problem := _value_problem(item, extra, f"{where}.{name}"):
                return problem
            continue
        return f"{f'{where}.{name}'!r} is not a property {where!r} declares"
    return None


def _declared_keys(schema: dict[str, Any], *, branch: bool = False) -> set[str] | None:
    """The keys `schema` and its `allOf`/`anyOf`/`oneOf` branches declare; None when any key may be let in
    by what this does not follow (or, in a branch, by its `additionalProperties`)."""
    properties = schema.get("properties", {})
    if any(key in schema for key in _NOT_FOLLOWED) or not isinstance(properties, dict) or \
            (branch and schema.get("additionalProperties", False) is not False):
        return None
    keys = set(properties)
    for word in _BRANCHES:
        branches = schema.get(word, [])
        if not isinstance(branches, list):
            return None
        for sub in branches:
            more = _declared_keys(sub, branch=True) if isinstance(sub, dict) else None
            if more is None:
                return None
            keys |= more
    return keys
