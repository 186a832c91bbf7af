"""What a customer shares besides words, read the same on every channel that carries it (WhatsApp, Telegram): a
location or a named place, a contact. Each is something said, not a picture: a line of the message's text
("Shared location: …", "Shared a contact card…"), which the pipeline answers and operators read, with the
values themselves for the message's `meta.shared`. Platform fields are untrusted: coordinates are checked for
range, texts are cut to a bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

NAME_CHARS = 200  # a place's name or address, a contact's name; the platforms' own are far shorter
PHONE_CHARS = 32  # E.164 is at most 15 digits; room for a "+", spaces and dashes as the customer's app wrote them


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


def contact(*, first_name: Any, last_name: Any = None, phone: Any = None, user_id: Any = None) -> dict[str, Any] | None:
    """A shared contact: its `name`, `phone` and the platform's `user_id` when given; None when it names
    nobody and no number. The customer chose to give these to the business, so they are kept and shown."""
    name = bounded(" ".join(p for p in (first_name, last_name) if isinstance(p, str)))
    number = bounded(phone, PHONE_CHARS)
    if not name and not number:
        return None
    found: dict[str, Any] = {"name": name} if name else {}
    if number:
        found["phone"] = number
    if isinstance(user_id, int) and not isinstance(user_id, bool):
        found["user_id"] = user_id
    return found


def contact_line(who: dict[str, Any]) -> str:
    """ "Shared a contact card: Name, phone"."""
    return "Shared a contact card: " + ", ".join(who[k] for k in ("name", "phone") if k in who)


def cards_line(count: int) -> str:
    """Contact cards that are named, not read (WhatsApp's vCard media, which the gateway never downloads)."""
    return "Shared a contact card" if count == 1 else f"Shared {count} contact cards"


def with_shared(body: str, *, before: Sequence[str] = (), after: Sequence[str] = ()) -> str:
    """The message's text with the lines of what was shared around its own words (`body` stays between, so a
    question still ends the text when only lines before it are added)."""
    if not before and not after:
        return body
    return "\n".join([*before, body, *after] if body.strip() else [*before, *after])
