"""Slack on slack-bolt: one `AsyncApp` per Slack channel, with the channel's `AsyncWebClient` and signing secret.

Bolt does the Slack protocol; the gateway's webhook route keeps what is the gateway's (the body cap, the
inbox's dedup by `event_id`, 400 with `X-Slack-No-Retry` for a signed payload we cannot use, the logs):
- `verify_signature`: bolt's `RequestVerification` middleware checks X-Slack-Signature (HMAC-SHA256 over
  `v0:{ts}:{body}`) and its freshness (5 minutes) on the raw body, before bolt parses it, so an unsigned
  body that is not even JSON still gets 401, never 400.
- `dispatch`: `AsyncApp.async_dispatch` answers `url_verification` (bolt's UrlVerification) and routes
  every event to the one listener, which runs the adapter's `parse_payload`. `process_before_response=True`:
  the listener has run to its end when dispatch returns, so the route stores the message before Slack gets
  its 200 (nothing is lost between an ack and a store). What no listener takes (an interactive payload or a slash command posted to
  the Events URL, an envelope of another type) is answered by the adapter's `parse`, as "not handled".
- Socket Mode runs the same app (`channels.slack_socket`), through `run` as `dispatch` does.
No authorization call is made per request: `authorize` answers from what `auth.test` told the adapter at
start (the foreign workspace and the uninstalled token are the adapter's checks, with their own logs).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.middleware.request_verification import RequestVerification
from slack_bolt.request import BoltRequest
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from channels.base import ImmediateResponse, RawRequest, WebhookResult
from gateway.errors import SignatureInvalid

if TYPE_CHECKING:
    from channels.slack import SlackAdapter

STALE_AFTER_S = 5 * 60  # bolt's (slack_sdk's SignatureVerifier's) window; named here for the reason logged
_RESULT = "gateway_result"  # the listener's WebhookResult, in the request's bolt context
_PARSE_ERROR = "gateway_parse_error"  # what the listener's parse_payload raised, raised again by `run`
# Bolt's own logging (an info line with the whole body for each bad signature, "unhandled request" hints):
# the gateway logs these itself (webhook.signature_invalid, webhook.ignored), so only bolt's errors show.
BOLT_LOG = logging.getLogger("channels.slack.bolt")
BOLT_LOG.setLevel(logging.ERROR)
# What bolt may raise building a request from a body it cannot read (not JSON, not an object, odd fields).
_UNREADABLE = (UnicodeDecodeError, ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)


def build_app(adapter: SlackAdapter) -> AsyncApp:
    """The channel's bolt app: its one listener parses every event with `adapter.parse_payload` (`run` reads it)."""

    async def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, bot_user_id=adapter.bot_user_id,
                               bot_token=adapter.settings.bot_token or None)

    # With SLACK_CLIENT_ID and SLACK_CLIENT_SECRET set, bolt builds an OAuth flow (AsyncOAuthSettings, file stores) on
    # its own and offers no flag against it; harmless: `authorize` stays ours, the flow is reached only by bolt's
    # install/redirect request handlers, never by `async_dispatch`, and its stores touch no file until used.
    app = AsyncApp(
        name=f"gateway-slack-{adapter.bot}", logger=BOLT_LOG, client=adapter.client,
        signing_secret=adapter.settings.signing_secret, authorize=authorize,
        process_before_response=True,
        request_verification_enabled=False,  # done by `verify_signature`, before the body is parsed
        ssl_check_enabled=False,  # an unsigned ssl_check is refused as any unsigned request is
        ignoring_self_events_enabled=False,  # slack_events.parse_event ignores every bot's message, with its reason logged
        url_verification_enabled=True, attaching_function_token_enabled=False,
        attaching_conversation_kwargs_enabled=False,
    )

    async def on_error(error: Exception, request: AsyncBoltRequest) -> None:
        """What bolt itself raised (its matchers, on an event that is no object or whose type is no string): no
        result, so the caller's `parse` answers it as it answers any event it does not handle (bolt's 500 unsaid)."""

    async def on_event(ack: Any, body: dict[str, Any], context: Any) -> None:
        """Every event: messages and their edits, app_mention, and the rest (app_uninstalled, tokens_revoked,
        reactions…), which parse_payload ignores with a reason."""
        await ack()  # the HTTP response (or the socket's ack) is sent once this listener has returned
        try:
            context[_RESULT] = adapter.parse_payload(body)
        except Exception as exc:  # a payload of a shape parse_payload does not know: the route's 400
            context[_PARSE_ERROR] = exc

    app.error(on_error)
    app.event(re.compile(".*"))(on_event)
    return app


def verify_signature(signing_secret: str, raw: RawRequest, now: float) -> None:
    """Raise SignatureInvalid unless bolt's RequestVerification accepts the request; the reason says why."""
    timestamp = raw.header("x-slack-request-timestamp")
    signature = raw.header("x-slack-signature")
    if not timestamp or not signature:
        raise SignatureInvalid("missing X-Slack-Signature or X-Slack-Request-Timestamp")
    if not signing_secret.strip():
        raise SignatureInvalid("slack.signing_secret is not configured")
    request = BoltRequest(body="", headers={"x-slack-request-timestamp": timestamp, "x-slack-signature": signature})
    try:
        request.raw_body = raw.body.decode("utf-8")  # bolt verifies text; a body that is none is no signed body
        refused = RequestVerification(signing_secret, base_logger=BOLT_LOG).process(
            req=request, resp=BoltResponse(status=200, body=""), next=lambda: None)
    except (UnicodeDecodeError, ValueError, TypeError, OverflowError):
        # A timestamp that is no number, or of more digits than a float holds; a non-ASCII signature.
        refused = BoltResponse(status=401, body="")
    if refused is None:
        return
    try:
        age = abs(now - int(timestamp))
    except (ValueError, OverflowError):
        raise SignatureInvalid("malformed X-Slack-Request-Timestamp") from None
    if age > STALE_AFTER_S:
        raise SignatureInvalid(f"stale Slack request ({int(age)} s old)")
    raise SignatureInvalid("bad Slack signature")


async def run(app: AsyncApp, request: AsyncBoltRequest) -> tuple[WebhookResult | None, BoltResponse]:
    """Dispatch `request` (from the webhook route or the socket) through the channel's app: the listener's result, None
    when no listener took it (or bolt could not match it), and bolt's response. What parse_payload raised is raised."""
    response = await app.async_dispatch(request)
    if (error := request.context.get(_PARSE_ERROR)) is not None:
        raise error
    return request.context.get(_RESULT), response


async def dispatch(adapter: SlackAdapter, raw: RawRequest) -> WebhookResult:
    """Run a verified Events API request through the channel's bolt app; the parsed result, as `parse` gives."""
    try:
        request = AsyncBoltRequest(body=raw.body.decode("utf-8"), query=raw.query, headers=raw.headers)
    except _UNREADABLE:
        return adapter.parse(raw)  # a body bolt cannot read: parse says why (the route's 400), as it always did
    result, response = await run(adapter.app, request)
    if result is None:
        if request.body.get("type") == "url_verification" and response.status == 200:
            return WebhookResult(response=ImmediateResponse(body=response.body.encode()))
        return adapter.parse(raw)  # no listener for it, or bolt could not match it: "not handled", with its reason
    if retry := raw.header("x-slack-retry-num"):
        result.extra.update(retry_num=retry, retry_reason=raw.header("x-slack-retry-reason"))
    return result
