"""The Slack channel runs on slack-bolt: an AsyncApp per channel verifies, answers url_verification and
dispatches events to the listeners that parse them, the same results as the adapter's own `parse`."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import pytest
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.request_verification import RequestVerification
from slack_bolt.response import BoltResponse
from structlog.testing import capture_logs

from channels.base import DispatchingAdapter, RawRequest
from gateway.errors import SignatureInvalid
from tests.channels.slack_helpers import make_adapter
from tests.channels.test_slack_parse import FIXTURE_FILES, fixture_request, signed

MENTION = {"type": "event_callback", "event_id": "Ev9", "team_id": "T1", "event": {
    "type": "app_mention", "channel_type": "channel", "user": "U1", "text": "<@UBOT> hi", "channel": "C1",
    "ts": "1700000000.000100"}}


def test_each_slack_channel_has_its_own_bolt_app_with_its_client_and_answering_before_the_response():
    one, two = make_adapter(), make_adapter()
    assert isinstance(one.app, AsyncApp) and one.app is not two.app
    assert one.app.client is one.client and one.app.process_before_response
    assert isinstance(one, DispatchingAdapter)  # the webhook route's way to it


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
async def test_bolt_dispatch_gives_what_parse_gives_for_every_fixture(path: Path):
    adapter = make_adapter()
    request = fixture_request(path)
    assert _timeless(await adapter.dispatch(request)) == _timeless(adapter.parse(request))


def _timeless(result):
    """An edit's message is dated when parsed: two parses differ by their microseconds."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return dataclasses.replace(result, messages=tuple(dataclasses.replace(m, sent_at=epoch) for m in result.messages))


async def test_an_event_is_parsed_by_the_bolt_listener_and_url_verification_answered_by_bolt(monkeypatch):
    adapter = make_adapter()

    def not_called(raw: RawRequest):
        raise AssertionError("parsed outside bolt")

    monkeypatch.setattr(adapter, "parse", not_called)
    result = await adapter.dispatch(signed(json.dumps(MENTION).encode(), extra={"x-slack-retry-num": "1"}))
    assert [m.external_id for m in result.messages] == ["Ev9"] and result.extra["retry_num"] == "1"
    monkeypatch.setattr(adapter, "parse_payload", not_called)
    challenge = await adapter.dispatch(signed(b'{"type": "url_verification", "challenge": "c1"}'))
    assert json.loads(challenge.response.body) == {"challenge": "c1"}


def test_the_signature_is_checked_by_bolts_request_verification(monkeypatch):
    adapter = make_adapter()
    request = signed(json.dumps(MENTION).encode())
    adapter.verify(request)
    monkeypatch.setattr(RequestVerification, "process", lambda self, **kw: BoltResponse(status=401, body=""))
    with pytest.raises(SignatureInvalid, match="bad Slack signature"):
        adapter.verify(request)


@pytest.mark.parametrize("event", [[], {"type": 5}, {"type": ["message"]}], ids=["a-list", "a-number", "a-list-type"])
async def test_an_event_bolt_cannot_match_is_answered_as_parse_answers_it_not_as_a_400(event):
    """Bolt's own matchers raised on an event that is no object or whose type is no string (TypeError,
    AttributeError): dispatch raised it, and the route answered 400 where `parse` had answered 200, not handled."""
    adapter = make_adapter()
    request = signed(json.dumps({"type": "event_callback", "event_id": "EvOdd", "event": event}).encode())
    result = await adapter.dispatch(request)
    assert result.ignored == adapter.parse(request).ignored and "is not handled" in result.ignored[0]


async def test_bolt_logs_no_request_body_even_at_debug(caplog):
    """Bolt logs a refused signature with the whole body at INFO, an unhandled request with its payload at WARNING;
    logs hold ids, never what a customer wrote (docs/data.md): the gateway's own events say it without them."""
    caplog.set_level(logging.DEBUG)
    adapter = make_adapter()
    words = "my card number is 4111"
    body = json.dumps(MENTION | {"event": MENTION["event"] | {"text": f"<@UBOT> {words}"}}).encode()
    forged = dataclasses.replace(signed(body), headers=signed(body).headers | {"x-slack-signature": "v0=" + "0" * 64})
    with pytest.raises(SignatureInvalid):
        adapter.verify(forged)
    await adapter.dispatch(signed(body))
    click = {"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "a", "value": words}]}
    await adapter.dispatch(signed(urlencode({"payload": json.dumps(click)}).encode(),
                                  content_type="application/x-www-form-urlencoded"))
    assert not [r for r in caplog.records if words in r.getMessage()]



async def test_slack_oauth_env_vars_leave_our_authorize_and_touch_no_file(monkeypatch):
    """SLACK_CLIENT_ID and SLACK_CLIENT_SECRET make bolt build an OAuth flow with file stores on its own: events
    still go through our `authorize`, and nothing is written where those stores keep their files."""
    monkeypatch.setenv("SLACK_CLIENT_ID", "gateway-test-111.222")
    monkeypatch.setenv("SLACK_CLIENT_SECRET", "not-ours")
    adapter = make_adapter()
    assert adapter.app.oauth_flow is not None  # bolt's own, unasked for

    def not_called(raw: RawRequest):
        raise AssertionError("bolt's authorization refused it: parsed outside bolt")

    monkeypatch.setattr(adapter, "parse", not_called)
    result = await adapter.dispatch(signed(json.dumps(MENTION).encode()))
    assert [m.external_id for m in result.messages] == ["Ev9"]
    stores = [Path(adapter.app.installation_store.base_dir), Path(adapter.app.oauth_flow.settings.state_store.base_dir)]
    assert all(store.name == "gateway-test-111.222" and not store.exists() for store in stores)


async def test_slacks_app_rate_limited_notice_is_a_warning_naming_the_minute_whose_events_are_lost():
    """Past 30,000 events an hour in a workspace Slack stops delivering the app's events and posts `app_rate_limited`
    (no `event_callback`, never retried): the questions of that minute are never seen. It was one more info line,
    "envelope type 'app_rate_limited' is not handled", among every ignored reaction and join."""
    body = {"token": "x", "type": "app_rate_limited", "team_id": "T111", "minute_rate_limited": 1518467820,
            "api_app_id": "A111"}
    with capture_logs() as logs:
        result = await make_adapter().dispatch(signed(json.dumps(body).encode()))
    assert not result.messages and "Slack stopped delivering" in result.ignored[0]
    (warning,) = [e for e in logs if e["event"] == "slack.app_rate_limited"]
    assert warning["log_level"] == "warning" and warning["team"] == "T111"
    assert warning["minute"] == "2018-02-12T20:37:00+00:00"
