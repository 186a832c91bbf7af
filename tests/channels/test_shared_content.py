"""A shared contact's vCard read for its e-mail address, organization and website (channels/shared_content.py)."""

from __future__ import annotations

from channels.shared_content import EMAIL_CHARS, URL_CHARS, vcard_fields


def test_a_vcards_long_website_and_address_are_kept_whole_or_not_at_all() -> None:
    """Each value was cut at a name's 200 characters before its own bound: a 300-character link (a tracking
    query) was kept cut short, a link to nowhere shown to operators; one past its bound is no link at all."""
    url = "https://acme.example/team?" + "ref=" + "a" * 300
    email = "j" * 60 + "@" + "acme-" * 30 + "example.com"
    card = f"BEGIN:VCARD\r\nVERSION:3.0\r\nEMAIL:{email}\r\nURL:{url}\r\nEND:VCARD"
    assert len(email) <= EMAIL_CHARS and vcard_fields(card) == {"email": email, "url": url}
    too_long = f"BEGIN:VCARD\r\nEMAIL:{'j' * 250}@acme.example\r\nURL:https://a.example/{'b' * URL_CHARS}\r\nEND:VCARD"
    assert vcard_fields(too_long) == {}
