"""The WhatsApp (Twilio) adapter: real signatures, every fixture, the real SDK against a local fake."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlencode

import pytest
import structlog
from twilio.request_validator import RequestValidator

from channels.base import ChannelAdapter, RawRequest
from channels.whatsapp import WhatsAppAdapter, to_whatsapp, within_window
from gateway.errors import BadRequest, SignatureInvalid
from gateway.models import ConversationRef
from gateway.settings import WhatsAppChannel

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "whatsapp"
FIXTURE_FILES = sorted(FIXTURES.rglob("*.json"))
ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "wa-test-auth-token-0123456789"
PUBLIC_URL = "https://bots.example.org/"
WEBHOOK_URL = "https://bots.example.org/webhooks/support/whatsapp"
CUSTOMER = ConversationRef(channel="whatsapp", workspace="whatsapp:+15550001111", chat="whatsapp:+491511234567")


def _settings(api_base: str | None = None, **overrides: str) -> WhatsAppChannel:
    values = {"account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from_number": "+15550001111",
              "public_url": PUBLIC_URL, "api_base": api_base, **overrides}
    return WhatsAppChannel(**values)


def _signed(form: dict[str, str], *, url: str = WEBHOOK_URL, token: str = AUTH_TOKEN, query: str = "") -> RawRequest:
    """A webhook exactly as Twilio sends it: form-encoded and signed over the public URL."""
    signed_url = f"{url}?{query}" if query else url
    signature = RequestValidator(token).compute_signature(signed_url, form)
    return RawRequest(
        # The gateway sits behind a proxy: the URL it sees is not the one Twilio signed.
        url=f"http://127.0.0.1:8000/webhooks/support/whatsapp{'?' + query if query else ''}",
        headers={"content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature},
        query=dict(pair.split("=", 1) for pair in query.split("&")) if query else {},
        body=urlencode(form).encode(),
    )


@pytest.fixture
def adapter() -> WhatsAppAdapter:
    return WhatsAppAdapter("support", _settings())


# -- verification ---------------------------------------------------------------------------


def test_whatsapp_adapter_satisfies_the_contract(adapter: WhatsAppAdapter) -> None:
    assert isinstance(adapter, ChannelAdapter)
    assert adapter.capabilities.max_length == 1600


def test_whatsapp_verify_accepts_a_real_signature(adapter: WhatsAppAdapter) -> None:
    adapter.verify(_signed({"MessageSid": "SM1", "From": "whatsapp:+1", "Body": "hi"}))


def test_whatsapp_verify_signs_the_query_string_too(adapter: WhatsAppAdapter) -> None:
    adapter.verify(_signed({"MessageSid": "SM1", "Body": "hi"}, query="tenant=a"))


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(_signed({"MessageSid": "SM1", "Body": "hi"}, token="another-token"), id="wrong-token"),
        pytest.param(_signed({"MessageSid": "SM1", "Body": "hi"}, url="https://evil.example/x"), id="wrong-url"),
        pytest.param(
            RawRequest(url=WEBHOOK_URL, headers={}, query={}, body=b"MessageSid=SM1&Body=hi"), id="missing"
        ),
    ],
)
def test_whatsapp_verify_rejects_bad_or_missing_signature(adapter: WhatsAppAdapter, request_: RawRequest) -> None:
    with pytest.raises(SignatureInvalid):
        adapter.verify(request_)


def test_whatsapp_a_signature_over_another_url_names_the_url_checked(adapter: WhatsAppAdapter) -> None:
    # The log line was "does not match" alone; a public_url unlike Twilio's is the usual cause (whatsapp.md).
    other = _signed({"MessageSid": "SM1", "Body": "hi"}, url="http://bots.example.org/webhooks/support/whatsapp")
    with pytest.raises(SignatureInvalid, match=f"checked against {WEBHOOK_URL}: whatsapp.public_url must be"):
        adapter.verify(other)


class _Repeated(dict):
    """Form fields with a repeated key, as Twilio's validator reads a multi-valued form (`getall`)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs

    def getall(self, key: str) -> list[str]:
        return [v for k, v in self.pairs if k == key]


def test_whatsapp_verify_signs_every_value_of_a_repeated_key(adapter: WhatsAppAdapter) -> None:
    # Twilio signs each value of a key that comes more than once; only the last was checked, so such a request
    # was refused as forged (and one signed over the last value alone passed).
    pairs = [("MessageSid", "SM1"), ("Body", "hi"), ("Tag", "a"), ("Tag", "b")]
    signature = RequestValidator(AUTH_TOKEN).compute_signature(WEBHOOK_URL, _Repeated(pairs))
    headers = {"content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature}
    adapter.verify(RawRequest(url=WEBHOOK_URL, headers=headers, query={}, body=urlencode(pairs).encode()))
    last_only = RequestValidator(AUTH_TOKEN).compute_signature(WEBHOOK_URL, dict(pairs))
    with pytest.raises(SignatureInvalid):
        adapter.verify(RawRequest(url=WEBHOOK_URL, headers=headers | {"x-twilio-signature": last_only}, query={},
                                  body=urlencode(pairs).encode()))


def test_whatsapp_verify_rejects_a_tampered_body(adapter: WhatsAppAdapter) -> None:
    good = _signed({"MessageSid": "SM1", "Body": "hi"})
    tampered = RawRequest(url=good.url, headers=good.headers, query={}, body=b"MessageSid=SM1&Body=refund+me")
    with pytest.raises(SignatureInvalid):
        adapter.verify(tampered)


def test_whatsapp_a_recut_replay_verifies_but_is_refused(adapter: WhatsAppAdapter) -> None:
    """Twilio's signature joins the fields with no separator: moving the boundary between MessageSid
    and the next field keeps it valid, and would make a new message id for the same message."""
    sid = "SM" + "c" * 32
    form = {"AccountSid": ACCOUNT_SID, "Body": "refund me", "From": "whatsapp:+491511234567", "MessageSid": sid,
            "NumMedia": "0", "SmsMessageSid": sid, "SmsSid": sid, "To": "whatsapp:+15550001111"}
    original = _signed(form)
    recut = {k: v for k, v in form.items() if k != "NumMedia"} | {"MessageSid": sid + "NumMedia0"}
    forged = RawRequest(url=original.url, headers=original.headers, query={}, body=urlencode(recut).encode())
    adapter.verify(forged)  # the same signed string: it verifies
    assert adapter.parse(original).messages[0].external_id == sid
    with pytest.raises(BadRequest, match="differ"):
        adapter.parse(forged)
    # The copies folded into key names too (review): one id is left, carrying the next field along.
    folded = {k: v for k, v in form.items() if k not in ("MessageSid", "NumMedia", "SmsMessageSid", "SmsStatus")} | {
        "MessageSid" + sid + "NumMedia": "0", "SmsMessageSid": sid + "SmsSid" + sid}
    folded.pop("SmsSid")
    assert sorted_concat(folded) == sorted_concat(form)
    forged = RawRequest(url=original.url, headers=original.headers, query={}, body=urlencode(folded).encode())
    adapter.verify(forged)
    with pytest.raises(BadRequest, match="34 characters"):
        adapter.parse(forged)
    # Or cut short, its last digit and every later field folded into one key (review).
    rest = {k: v for k, v in form.items() if k > "MessageSid"}
    short = {k: v for k, v in form.items() if k < "MessageSid"} | {"MessageSid": sid[:-1]}
    tail = "".join(k + rest[k] for k in sorted(rest))
    short[sid[-1] + tail[: -len(rest["To"])]] = rest["To"]
    assert sorted_concat(short) == sorted_concat(form)
    forged = RawRequest(url=original.url, headers=original.headers, query={}, body=urlencode(short).encode())
    adapter.verify(forged)
    with pytest.raises(BadRequest, match="34 characters"):
        adapter.parse(forged)


def sorted_concat(form: dict[str, str]) -> str:
    """What Twilio signs after the URL: the fields sorted by name, each name followed by its value."""
    return "".join(k + form[k] for k in sorted(form))


# -- every fixture --------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_whatsapp_parse_every_fixture(adapter: WhatsAppAdapter, path: Path) -> None:
    form = json.loads(path.read_text(encoding="utf-8"))
    request = _signed(form)
    adapter.verify(request)  # the fixture survives a real signing round trip
    result = adapter.parse(request)
    handled = len(result.messages) + len(result.status_updates) + len(result.ignored)
    assert handled == 1, result
    sid = form.get("MessageSid") or form["SmsSid"]
    for message in result.messages:
        assert message.external_id == sid
        assert message.conversation.chat == form["From"]
        assert "\x00" not in message.text
        # The Body, with a line for what was shared (a location after it, the ad it came from before it).
        assert form.get("Body", "").replace("\x00", "") in message.text
        assert (message.text == form.get("Body", "").replace("\x00", "")) != ("shared" in message.raw)
        assert message.text.strip() or message.attachments
        assert message.sender.display_name == form.get("ProfileName", "")
    for update in result.status_updates:
        assert update.provider_message_id == sid
        assert update.status == form["MessageStatus"]
        assert update.error_code == form.get("ErrorCode")
    for reason in result.ignored:
        assert sid in reason


def test_whatsapp_parse_fixture_outcomes(adapter: WhatsAppAdapter) -> None:
    def parse(name: str):
        return adapter.parse(_signed(json.loads(next(FIXTURES.rglob(name)).read_text())))

    assert parse("inbound_quote_reply.json").messages[0].reply_to == "someUniqueSid"
    assert parse("inbound_text_message.json").messages[0].sender.external_id == "491511234567"
    assert parse("null_bytes_in_body.json").messages[0].text == "remove null bytes"
    assert parse("whatsapp_brazil_number_profile_name_nonascii.json").messages[0].sender.display_name == "João Silva"
    failed = parse("status_callback_failed.json").status_updates[0]
    assert (failed.status, failed.error_code) == ("failed", "60228")
    assert parse("empty_body.json").ignored and not parse("empty_body.json").messages
    media = parse("sms_with_multiple_media_attachments.json").messages[0].attachments
    assert [(a.kind, a.mime_type, a.url) for a in media] == [
        ("image", "image/png", "https://chatwoot-assets.local/sample.png"),
        ("image", "image/jpeg", "https://chatwoot-assets.local/sample.jpg"),
    ]
    ad = parse("whatsapp_ctwa_referral.json").messages[0]
    assert ad.text == ("(Sent from the ad: German citizenship lawyer - Fast-track your German citizenship)\n"
                       "Hallo! Kann ich hierzu mehr Informationen erhalten?")
    assert ad.raw["shared"]["ad"]["source_url"] == "https://fb.me/4tBfhWhjr"
    location = parse("location_message.json").messages[0]
    assert location.text == "Shared location: (12.160894393921, 75.265205383301)"
    assert [(a.kind, a.url) for a in location.attachments] == [("location", "geo:12.160894393921,75.265205383301")]


@pytest.mark.parametrize("body", ["", "   "])
def test_whatsapp_parse_blank_body_is_a_message(adapter: WhatsAppAdapter, body: str) -> None:
    # The pipeline answers it with the greeting, as a bare mention on the other channels.
    form = {"MessageSid": "SM700", "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": body,
            "NumMedia": "0"}
    (message,) = adapter.parse(_signed(form)).messages
    assert message.text == body and not message.attachments


@pytest.mark.parametrize(("body", "opt_out_type", "command"), [
    ("STOP", "", "opt_out"), (" Stop! ", "", "opt_out"), ("unsubscribe", "", "opt_out"), ("START", "", "opt_in"),
    ("help", "", "help"),  # Twilio answered none of these (no Advanced Opt-Out): the gateway confirms them
    ("BAJA", "STOP", "opt_out_answered"), ("yes", "START", "opt_in_answered"), ("STOP", "STOP", "opt_out_answered"),
    ("HELP", "HELP", "help_answered"),  # Advanced Opt-Out: Twilio has answered it
    # Typed to a support bot these are answers or questions, unless Twilio says they were keywords.
    ("cancel", "", None), ("yes", "", None), ("stop my subscription", "", None), ("end", "", None),
])
def test_whatsapp_parse_flags_opt_out_keywords(adapter: WhatsAppAdapter, body: str, opt_out_type: str,
                                               command: str | None) -> None:
    form = {"MessageSid": "SM701", "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": body,
            "NumMedia": "0"} | ({"OptOutType": opt_out_type} if opt_out_type else {})
    (message,) = adapter.parse(_signed(form)).messages
    assert message.raw.get("command") == command and message.text == body


def test_whatsapp_parse_media_without_caption_is_a_message_with_empty_text(adapter: WhatsAppAdapter) -> None:
    form = {"MessageSid": "SM9", "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": "",
            "NumMedia": "1", "MediaUrl0": "https://api.twilio.com/media/ME1", "MediaContentType0": "audio/ogg"}
    (message,) = adapter.parse(_signed(form)).messages
    assert message.text == ""
    assert message.attachments[0].kind == "audio"


@pytest.mark.parametrize("fields", [{"NumMedia": "1"}, {"NumMedia": "2", "MediaContentType1": "image/jpeg"},
                                    {"NumMedia": "1", "MediaUrl0": ""}], ids=["no-url", "stripped-form", "blank-url"])
def test_whatsapp_parse_media_twilio_could_not_fetch_is_media_we_cannot_read(adapter: WhatsAppAdapter,
                                                                             fields: dict[str, str]) -> None:
    # NumMedia said media came, but no MediaUrl{i} (Twilio could not fetch it, or a form stripped on the way):
    # no attachment and no text, so the customer who sent a photo got the greeting as if they had said nothing.
    form = {"MessageSid": "SM" + "9a" * 16, "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": "",
            **fields}
    with structlog.testing.capture_logs() as logs:
        (message,) = adapter.parse(_signed(form)).messages
    count = int(fields["NumMedia"])
    assert message.text == "" and [a.kind for a in message.attachments] == ["other"] * count
    assert all(a.url is None for a in message.attachments)
    [logged] = [e for e in logs if e["event"] == "whatsapp.media_missing"]
    assert (logged["sid"], logged["missing"], logged["log_level"]) == (form["MessageSid"], count, "warning")


def test_whatsapp_parse_media_with_urls_logs_nothing_missing(adapter: WhatsAppAdapter) -> None:
    form = {"MessageSid": "SM" + "9b" * 16, "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": "",
            "NumMedia": "1", "MediaUrl0": "https://api.twilio.com/media/ME1", "MediaContentType0": "image/png"}
    with structlog.testing.capture_logs() as logs:
        (message,) = adapter.parse(_signed(form)).messages
    assert [a.kind for a in message.attachments] == ["image"]
    assert not [e for e in logs if e["event"] == "whatsapp.media_missing"]


def test_whatsapp_parse_ignores_our_own_number(adapter: WhatsAppAdapter) -> None:
    result = adapter.parse(_signed({"MessageSid": "SM2", "From": "whatsapp:+15550001111", "Body": "echo"}))
    assert not result.messages and "own message" in result.ignored[0]


def test_whatsapp_parse_ignores_untracked_statuses(adapter: WhatsAppAdapter) -> None:
    result = adapter.parse(_signed({"MessageSid": "SM3", "MessageStatus": "queued", "SmsStatus": "queued"}))
    assert not result.status_updates and "queued" in result.ignored[0]
    undelivered = adapter.parse(_signed({"MessageSid": "SM4", "MessageStatus": "undelivered", "ErrorCode": "63016"}))
    assert undelivered.status_updates[0].status == "failed"
    assert undelivered.status_updates[0].error_code == "63016"


def test_whatsapp_parse_refuses_a_body_without_message_sid(adapter: WhatsAppAdapter) -> None:
    with pytest.raises(BadRequest):
        adapter.parse(_signed({"From": "whatsapp:+1", "Body": "hi"}))


# -- rendering ------------------------------------------------------------------------------


def test_whatsapp_to_whatsapp_converts_markdown() -> None:
    text = "# Title\n\nA **bold** and *soft* ~~old~~ word, see [the docs](https://ex.com/d).\n\n```py\nx = 1\n```"
    assert to_whatsapp(text) == (
        "*Title*\n\nA *bold* and _soft_ ~old~ word, see the docs (https://ex.com/d).\n\n```\nx = 1\n```"
    )
    assert to_whatsapp("- a\n- b\n\n1. c\n2. d") == "- a\n- b\n\n1. c\n2. d"


def test_whatsapp_to_whatsapp_keeps_text_in_angle_brackets_as_typed() -> None:
    # WhatsApp is plain text: what looks like an HTML tag is the answer's own words.
    assert to_whatsapp("Type <your email> in the field") == "Type <your email> in the field"
    assert to_whatsapp("press <Enter> to confirm") == "press <Enter> to confirm"
    assert to_whatsapp("<your email>\n**Note**: required") == "<your email>\n*Note*: required"
    assert to_whatsapp("<div>hi</div> and <b>this</b>") == "<div>hi</div> and <b>this</b>"
    assert to_whatsapp("| a | b |\n|---|---|\n| x<br/>y | <z> |") == "a | b\nx\ny | <z>"
    assert to_whatsapp("See <https://ex.com/d>.") == "See https://ex.com/d."


def test_whatsapp_window_is_24_hours_less_a_margin() -> None:
    now = datetime(2026, 11, 29, 12, tzinfo=timezone.utc)
    assert within_window(now - timedelta(hours=23, minutes=49), now)
    # A reply computed in the last minutes would reach WhatsApp after the window closed.
    assert not within_window(now - timedelta(hours=23, minutes=51), now)
    assert not within_window(now - timedelta(hours=24), now)
    assert not within_window(None, now)
    assert within_window((now - timedelta(hours=1)).replace(tzinfo=None), now)  # SQLite gives naive UTC


def test_whatsapp_one_customer_is_one_contact_with_or_without_waid(adapter: WhatsAppAdapter) -> None:
    """`WaId` gave `14155550123`, `From` alone `+14155550123`: one person, two contacts, and the demo
    invoice owned by `whatsapp:+14155550123` was nobody's (review). The WaId form stays: stored contacts have it."""
    sid = "SM" + "d" * 32
    form = {"MessageSid": sid, "From": "whatsapp:+14155550123", "To": "whatsapp:+15550001111", "Body": "my invoice?"}
    with_waid = adapter.parse(_signed(form | {"WaId": "14155550123"})).messages[0]
    without = adapter.parse(_signed(form)).messages[0]
    assert with_waid.sender.external_id == without.sender.external_id == "14155550123"
    invoices = json.loads((Path(__file__).parents[2] / "examples/tools/invoices.json").read_text())["invoices"]
    owners = {i["owner"]["contact_external_id"] for i in invoices if i["owner"]["channel"] == "whatsapp"}
    assert owners == {"14155550123"}


@pytest.mark.parametrize(("fields", "text"), [
    ({"Latitude": "-33.8568", "Longitude": "151.2153", "Label": "Opera House", "Address": "Bennelong Point"},
     "Shared location: Opera House, Bennelong Point (-33.8568, 151.2153)"),
    ({"Latitude": "1.5", "Longitude": "2", "Address": "Main St 1"}, "Shared location: Main St 1 (1.5, 2.0)"),
    ({"Latitude": "1.5", "Longitude": "2", "Label": "Shop", "Address": "Shop"}, "Shared location: Shop (1.5, 2.0)"),
    # Not coordinates: nothing was shared (and no `geo:` attachment built from them).
    ({"Latitude": "91", "Longitude": "2"}, "where?"), ({"Latitude": "nan", "Longitude": "2"}, "where?"),
    ({"Latitude": "1", "Longitude": "inf"}, "where?"), ({"Latitude": "north", "Longitude": "2"}, "where?"),
])
def test_whatsapp_parse_a_shared_location_as_text(adapter: WhatsAppAdapter, fields: dict[str, str], text: str) -> None:
    form = {"MessageSid": "SM701", "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": "", **fields}
    if text == "where?":
        form["Body"] = text
    (message,) = adapter.parse(_signed(form)).messages
    assert message.text == text
    assert bool(message.attachments) == (text != "where?") == ("shared" in message.raw)


def test_whatsapp_parse_a_contact_card_names_it_and_keeps_the_caption(adapter: WhatsAppAdapter) -> None:
    form = {"MessageSid": "MM702", "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": "my wife",
            "NumMedia": "2", "MediaUrl0": "https://api.twilio.com/m0", "MediaContentType0": "text/vcard",
            "MediaUrl1": "https://api.twilio.com/m1", "MediaContentType1": "text/x-vcard; charset=utf-8"}
    (message,) = adapter.parse(_signed(form)).messages
    assert message.text == "my wife\nShared 2 contact cards"
    assert message.raw["shared"] == {"contact_cards": 2}
    long_place = {"MessageSid": "SM703", "From": "whatsapp:+1555", "To": "whatsapp:+15550001111", "Body": "",
                  "Latitude": "1", "Longitude": "2", "Label": "x" * 5000}
    (place,) = adapter.parse(_signed(long_place)).messages
    assert len(place.raw["shared"]["location"]["label"]) == 200
