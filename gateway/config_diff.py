"""What one configuration differs in from another, key by key, in words: `gateway ingest` refused by a
running server that loaded another one said only that it had, and the user had to find what changed."""

from __future__ import annotations

from typing import Any

ABSENT = object()
"""The value of a key on the side that does not have it."""


class _Name(str):
    """The name of an entry of a list of named entries: written `[name]` in a key."""


def differences(theirs: Any, ours: Any, *, key: str = "") -> list[tuple[str, Any, Any]]:
    """(key, their value, our value) of every leaf that differs, keys written `embedding.model` and
    `bots[acme].sources[help].path`; a side without the key has `ABSENT`. Lists of named entries (bots,
    sources) are compared by name, so a source added reads as that source, not as every one after it moved."""
    theirs, ours = _by_name(theirs), _by_name(ours)
    if isinstance(theirs, dict) and ours == []:  # a bot with no sources beside one with some
        ours = {}
    if isinstance(ours, dict) and theirs == []:
        theirs = {}
    if not (isinstance(theirs, dict) and isinstance(ours, dict)):
        return [] if theirs == ours else [(key, theirs, ours)]
    found = []
    for name in [*theirs, *(k for k in ours if k not in theirs)]:
        sub = f"{key}[{name}]" if isinstance(name, _Name) else f"{key}.{name}" if key else name
        found += differences(theirs.get(name, ABSENT), ours.get(name, ABSENT), key=sub)
    return found


def said(found: list[tuple[str, Any, Any]], *, theirs: str, ours: str) -> str:
    """The differences, a clause each: `embedding.model: 'a' in the server, 'b' in the file`."""
    return "; ".join(f"{key}: only in {ours}" if a is ABSENT else f"{key}: only in {theirs}" if b is ABSENT else
                     f"{key}: {masked(a)!r} in {theirs}, {masked(b)!r} in {ours}" for key, a, b in found)


def masked(value: Any) -> Any:
    """`value` with the credentials of every URL in it masked as `[REDACTED]` (a source's `?access_token=`,
    `user:password@`), in its lists and mappings too. The server masks what it loaded before it sends it
    (the 409 of `/v1/admin/ingest`), and the CLI masks its own side the same way before it compares them,
    so that a URL with a credential differs only when the rest of it does."""
    from gateway.url_secrets import masked_url

    if isinstance(value, dict):
        return {key: masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [masked(item) for item in value]
    return masked_url(value) if isinstance(value, str) else value


def credential_keys(value: Any) -> list[str]:
    """The keys of `value` whose values carry a credential that `masked` hides."""
    return [key for key, _, _ in differences(masked(value), value)]


def _by_name(value: Any) -> Any:
    """A list of dicts that each have a `name`, none twice, as a dict by name (the name itself left out)."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        names = [str(v["name"]) for v in value]
        if len(set(names)) == len(names):
            return {_Name(n): {k: x for k, x in v.items() if k != "name"} for n, v in zip(names, value, strict=True)}
    return value
