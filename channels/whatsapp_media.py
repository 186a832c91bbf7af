"""What a WhatsApp message carries besides its Body, from Twilio's webhook fields: media, a shared
location, a shared contact card, the ad a customer came from.

A location (`Latitude`, `Longitude`, and for a named place `Label` and `Address`) and a contact card (a
`text/vcard` medium) are things a customer says, not pictures: they become a line of the message's text
("Shared location: …", "Shared a contact card"; channels/shared_content.py, as on Telegram), which the
pipeline answers and operators read, with the values themselves in `shared`. The gateway never downloads
media, so a card is named, not read. A first message sent from a click-to-WhatsApp ad ("Can I get more
information about this?") is about the ad (`ReferralHeadline`, `ReferralBody`): a line names it, or "this"
meant nothing to the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from channels.shared_content import bounded, cards_line, location_line, place, with_shared
from gateway.models import Attachment

MAX_MEDIA = 10  # Twilio delivers at most 10 media per message
VCARD_TYPES = frozenset({"text/vcard", "text/x-vcard", "text/directory"})


def attachments(form: Mapping[str, str]) -> tuple[Attachment, ...]:
    """Media (`NumMedia`, `MediaUrl{i}`, `MediaContentType{i}`) and a shared location, as metadata."""
    found: list[Attachment] = []
    try:
        count = int(form.get("NumMedia") or 0)
    except ValueError:
        count = 0
    for i in range(min(count, MAX_MEDIA)):
        url = form.get(f"MediaUrl{i}")
        mime = form.get(f"MediaContentType{i}") or None
        # Counted in NumMedia with no MediaUrl: media Twilio could not fetch, or a form that lost the field. Still
        # something the customer sent, which the bot cannot read (`missing`): it was dropped, and the photo got
        # the greeting an empty message gets.
        found.append(Attachment(kind=_kind(mime), url=url, mime_type=mime) if url else Attachment(kind="other", mime_type=mime))
    place = location(form)
    if place is not None:
        found.append(Attachment(kind="location", url=f"geo:{place['latitude']},{place['longitude']}",
                                caption=place.get("label") or place.get("address") or None))
    return tuple(found)


def missing(found: tuple[Attachment, ...]) -> int:
    """How many of the media `attachments` found came without a URL (Twilio could not fetch them)."""
    return sum(1 for a in found if a.kind == "other" and a.url is None)


def location(form: Mapping[str, str]) -> dict[str, Any] | None:
    """The shared location (`Latitude`, `Longitude`, `Label`, `Address`), as `shared_content.place`."""
    return place(form.get("Latitude"), form.get("Longitude"), label=form.get("Label"), address=form.get("Address"))


def readable(form: Mapping[str, str], body: str, found: tuple[Attachment, ...]) -> tuple[str, dict[str, Any]]:
    """The message's text with what the customer shared, and the values for its `meta.shared`: the ad it
    came from before the Body (which stays last, so a question still ends the text), a location or contact
    card after it."""
    before: list[str] = []
    after: list[str] = []
    values: dict[str, Any] = {}
    ad = {key: value for key, field in (("headline", "ReferralHeadline"), ("body", "ReferralBody"),
                                        ("source_url", "ReferralSourceUrl"))
          if (value := bounded(form.get(field)))}
    if ad.get("headline") or ad.get("body"):
        before.append("(Sent from the ad: " + " - ".join(ad[k] for k in ("headline", "body") if k in ad) + ")")
        values["ad"] = ad
    where = location(form)
    if where is not None:
        after.append(location_line(where))
        values["location"] = where
    cards = sum(1 for a in found if (a.mime_type or "").split(";", 1)[0].strip().lower() in VCARD_TYPES)
    if cards:
        after.append(cards_line(cards))
        values["contact_cards"] = cards
    return with_shared(body, before=before, after=after), values


def _kind(mime: str | None) -> str:
    major = (mime or "").split("/", 1)[0]
    if mime == "image/webp":
        return "sticker"  # WhatsApp stickers arrive as WebP images
    if major in ("image", "audio", "video"):
        return major
    if major in ("application", "text"):
        return "document"
    return "other"
