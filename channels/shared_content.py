"""What a customer shares besides words, read the same on every channel that carries it (WhatsApp, Telegram): a
location or a named place, a contact. Each is something said, not a picture: a line of the message's text
("Shared location: …", "Shared a contact card…"), which the pipeline answers and operators read, with the
values themselves for the message's `meta.shared`. Platform fields are untrusted: coordinates are checked for
range, texts are cut to a bound.
"""

from __future__ import annotations

import math
import quopri
import re
from collections.abc import Iterator, Sequence
from typing import Any

NAME_CHARS = 200  # a place's name or address, a contact's name; the platforms' own are far shorter
PHONE_CHARS = 32  # E.164 is at most 15 digits; room for a "+", spaces and dashes as the customer's app wrote them
EMAIL_CHARS = 254  # the longest address SMTP carries
URL_CHARS = 2048
VCARD_CHARS = 8192  # Telegram's `vcard` is at most 2,048 bytes; past this much of any other, nothing more is read
_VCARD_FIELDS = {"EMAIL": "email", "ORG": "organization", "URL": "url"}
_EMAIL = re.compile(r"[^@\s<>\"(),;:]+@[^@\s<>\"(),;:]+\.[^@\s<>\"(),;:]+")
_FOLD = re.compile(r"\r?\n[ \t]")  # a line starting with a space or tab continues the one before
_ESCAPED = re.compile(r"\\(.)")


def bounded(value: Any, limit: int = NAME_CHARS) -> str:
    """`value` as one line of at most `limit` characters; "" for anything but a string."""
    return " ".join(value.split())[:limit] if isinstance(value, str) else ""


def place(latitude: Any, longitude: Any, *, label: Any = None, address: Any = None) -> dict[str, Any] | None:
    """A shared location: `latitude` and `longitude` as numbers, `label` and `address` when the customer picked
    a named place; None without a valid pair of coordinates (numbers, or the text of numbers, on the globe)."""
    if isinstance(latitude, bool) or isinstance(longitude, bool):
        return None
    try:
        lat, lon = float(latitude), float(longitude)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(lat) and math.isfinite(lon) and -90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    found: dict[str, Any] = {"latitude": lat, "longitude": lon}
    for key, value in (("label", label), ("address", address)):
        if text := bounded(value):
            found[key] = text
    return found


def location_line(where: dict[str, Any]) -> str:
    """ "Shared location: Label, Address (lat, lon)", an address that repeats the label said once."""
    named = ", ".join(where[k] for k in ("label", "address") if k in where and
                      (k == "label" or where[k] != where.get("label")))
    coordinates = f"({where['latitude']}, {where['longitude']})"
    return f"Shared location: {named} {coordinates}" if named else f"Shared location: {coordinates}"


def contact(*, first_name: Any, last_name: Any = None, phone: Any = None, user_id: Any = None,
            vcard: Any = None) -> dict[str, Any] | None:
    """A shared contact: its `name`, `phone` and the platform's `user_id` when given, and the `email`,
    `organization` and `url` of its `vcard`; None when it names nobody and no number. The customer chose to
    give these to the business, so they are kept and shown."""
    name = bounded(" ".join(p for p in (first_name, last_name) if isinstance(p, str)))
    number = bounded(phone, PHONE_CHARS)
    card = vcard_fields(vcard)
    if not name and not number and not card:
        return None
    found: dict[str, Any] = {"name": name} if name else {}
    if number:
        found["phone"] = number
    if isinstance(user_id, int) and not isinstance(user_id, bool):
        found["user_id"] = user_id
    return found | card


def contact_line(who: dict[str, Any]) -> str:
    """ "Shared a contact card: Name, phone, email, organization, url"."""
    return "Shared a contact card: " + ", ".join(
        who[k] for k in ("name", "phone", "email", "organization", "url") if k in who)


def vcard_fields(card: Any) -> dict[str, str]:
    """A vCard's (2.1, 3.0 or 4.0) first usable `email`, `organization` ("Name (Unit)") and `url` (http or
    https only). Untrusted: an address must look like one, every value is one bounded line."""
    found: dict[str, str] = {}
    if not isinstance(card, str):
        return found
    for line in _vcard_lines(card[:VCARD_CHARS]):
        name, colon, value = line.partition(":")
        kind, *params = name.split(";")
        field = _VCARD_FIELDS.get(kind.rsplit(".", 1)[-1].strip().upper())  # "item1.EMAIL": Apple's groups
        if not colon or field is None or field in found:
            continue
        options = {p.strip().upper() for p in params}
        if options & {"ENCODING=QUOTED-PRINTABLE", "QUOTED-PRINTABLE"}:  # vCard 2.1, as Android writes non-ASCII
            value = quopri.decodestring(value.encode()).decode("utf-8", errors="replace")
        limit = {"email": EMAIL_CHARS, "url": URL_CHARS}.get(field, NAME_CHARS)
        parts = [bounded(_ESCAPED.sub(_unescape, part), limit + 1) for part in re.split(r"(?<!\\);", value)]
        if field == "organization" and (units := [p for p in parts[1:] if p]) and parts[0]:
            text = bounded(f"{parts[0]} ({', '.join(units)})")
        else:
            text = bounded(";".join(parts).removeprefix("mailto:"), limit + 1)
            if len(text) > limit and field != "organization":
                continue  # an address or a link cut short is another's: none is better
            text = text[:limit]
        if (field == "organization" and text) or (field == "email" and _EMAIL.fullmatch(text)) or (
                field == "url" and text.lower().startswith(("https://", "http://")) and " " not in text):
            found[field] = text
    return found


def _vcard_lines(card: str) -> Iterator[str]:
    """The card's logical lines: folded ones joined, and a quoted-printable value's soft breaks ("=" at a line's
    end) too."""
    pending = ""
    for line in _FOLD.sub("", card).splitlines():
        pending += line
        if pending.endswith("=") and "QUOTED-PRINTABLE" in pending.partition(":")[0].upper():
            pending = pending[:-1]
            continue
        yield pending
        pending = ""
    if pending:
        yield pending


def _unescape(match: re.Match[str]) -> str:
    return " " if match.group(1) in "nN" else match.group(1)


def cards_line(count: int) -> str:
    """Contact cards that are named, not read (WhatsApp's vCard media, which the gateway never downloads)."""
    return "Shared a contact card" if count == 1 else f"Shared {count} contact cards"


def with_shared(body: str, *, before: Sequence[str] = (), after: Sequence[str] = ()) -> str:
    """The message's text with the lines of what was shared around its own words (`body` stays between, so a
    question still ends the text when only lines before it are added)."""
    if not before and not after:
        return body
    return "\n".join([*before, body, *after] if body.strip() else [*before, *after])
