"""The Slack operator channel's buttons: `POST /webhooks/{bot}/slack/actions`, the Slack app's Interactivity URL.

A click arrives as a form post whose `payload` is a JSON `block_actions` object, signed with the bot's
Slack signing secret and verified by its Slack adapter. A signed payload of another shape than Slack's
(a list, a user or actions that are not objects, a value that is no escalation id, JSON nested too deeply
to parse) is a 400 naming what is wrong, and changes nothing: it was a 500, and an id past the database's
integers an overflow.

A well-formed click is acknowledged first and acted on after (`ClickWork`): Slack wants the answer within
3 seconds, and the click's database write and Slack posts (a rate-limit wait of up to 2 s among them) could
take longer, so the operator saw an error although the click had worked. A refusal reaches the member as
a message (ephemeral, or in the thread), never as the answer to the click.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from channels.base import RawRequest
from gateway.background import cancel, settle
from gateway.errors import BadRequest, GatewayError, SignatureInvalid
from gateway.http.deps import MAX_ID, error, services
from gateway.http.webhooks import CappedRoute, log_signature_invalid
from gateway.operators.slack_operator import CLAIM_ACTION, RESOLVE_ACTION, SlackOperatorChannel

log = structlog.get_logger("gateway.operators.slack")
router = APIRouter(tags=["operators"], route_class=CappedRoute)  # read capped, like every webhook, before its signature


@dataclass(frozen=True, slots=True)
class Click:
    """A click on an escalation header's Claim or Resolve button: who, which button, which escalation."""

    user_id: str
    action_id: str
    escalation_id: int
    header_ts: str | None = None  # the ts of the message the button is on (Slack's `container.message_ts`)


def first_click(payload: dict[str, Any]) -> Click | None:
    """The first Claim or Resolve click of a `block_actions` payload; None when it has none (another
    app's buttons). Raises `BadRequest` naming what is malformed."""
    user, actions = payload.get("user"), payload.get("actions")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        raise BadRequest("`user` must be an object with the clicking user's `id`")
    if not isinstance(actions, list) or not all(isinstance(action, dict) for action in actions):
        raise BadRequest("`actions` must be a list of objects")
    for action in actions:
        action_id, value = action.get("action_id"), action.get("value")
        if action_id not in (CLAIM_ACTION, RESOLVE_ACTION):
            continue
        # Digits first, and no more than an id has: int() refuses a string of over 4,300 digits with ValueError.
        if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= len(str(MAX_ID))
                and 1 <= int(value) <= MAX_ID):
            raise BadRequest(f"the {action_id} button's `value` must be an escalation id (got {value!r:.40})")
        container = payload.get("container")
        header_ts = container.get("message_ts") if isinstance(container, dict) else None
        return Click(user_id=user["id"], action_id=action_id, escalation_id=int(value),
                     header_ts=header_ts if isinstance(header_ts, str) else None)
    return None


@router.post("/webhooks/{bot}/slack/actions")
async def slack_actions(bot: str, request: Request) -> Response:
    """Slack interactivity (block_actions) for the operator channel's buttons."""
    svc = services(request)
    adapter = svc.adapters.get((bot, "slack"))
    if adapter is None or svc.slack_clicks is None:
        return error(404, f"bot {bot!r} has no slack channel")
    body = await request.body()
    raw = RawRequest(url=str(request.url), headers={k.lower(): v for k, v in request.headers.items()},
                     query=dict(request.query_params), body=body)
    try:
        adapter.verify(raw)
    except SignatureInvalid as exc:
        svc.metrics.signature_failures.labels(bot=bot, channel="slack").inc()
        log_signature_invalid(svc, log.bind(bot=bot), "slack_operator", (bot, "slack/actions"), reason=str(exc))
        return error(401, "invalid signature")
    try:
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8")).items()}
        payload = json.loads(form["payload"])
    except (UnicodeDecodeError, KeyError, json.JSONDecodeError):
        return error(400, "expected a form post with a JSON `payload`")
    except RecursionError:  # json.loads gives up past ~1,000 levels: a 500 was what Slack then retried
        return _malformed(bot, "`payload` is nested too deeply")
    if not isinstance(payload, dict):
        return _malformed(bot, "`payload` must be a JSON object")
    try:
        outcome = act_on(svc.slack_clicks, bot, payload)
    except BadRequest as exc:
        return _malformed(bot, str(exc))
    return JSONResponse({"ok": True, **({"ignored": outcome.removeprefix(IGNORED)} if outcome.startswith(IGNORED) else {})})


IGNORED = "ignored: "


class ClickWork:
    """The clicks acknowledged to Slack and still being acted on, awaited (or cancelled) at shutdown."""

    def __init__(self, operator: SlackOperatorChannel) -> None:
        self._operator = operator
        self._tasks: set[asyncio.Task] = set()

    def start(self, bot: str, click: Click) -> None:
        task = asyncio.ensure_future(self._act(bot, click))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _act(self, bot: str, click: Click) -> None:
        try:
            outcome = await self._operator.handle_action(bot, click)
        except GatewayError as exc:
            outcome = f"failed: {exc}"
        except Exception:  # nobody awaits this task: unlogged, the failure would vanish
            log.exception("slack_operator.action_failed", bot=bot, action=click.action_id,
                          escalation_id=click.escalation_id, user=click.user_id)
            return
        log.info("slack_operator.action", bot=bot, outcome=outcome)

    async def drain(self, *, timeout: float | None = None) -> None:
        """Wait for the clicks being acted on (tests and shutdown); with `timeout`, cancel and log what is left."""
        if pending := await settle(self._tasks, timeout=timeout):
            await cancel(pending)
            log.warning("slack_operator.actions_abandoned", count=len(pending), wait_s=timeout)


def act_on(clicks: ClickWork, bot: str, payload: dict[str, Any]) -> str:
    """Take a verified interactivity payload: from this route, or from Socket Mode, where Slack sends the
    same payload in an `interactive` envelope (`interactive_handler`). A click is acted on in the
    background (`ClickWork`), so the caller acknowledges at once; returns "acting" or why nothing is
    done. Raises `BadRequest` for a `block_actions` payload not in Slack's shape, and changes nothing then."""
    if payload.get("type") != "block_actions":
        outcome = f"{IGNORED}payload type {payload.get('type')!r:.60}"
        log.info("slack_operator.action", bot=bot, outcome=outcome)
        return outcome
    click = first_click(payload)
    if click is None:
        log.info("slack_operator.action", bot=bot, outcome="no action")
        return "no action"
    clicks.start(bot, click)
    return "acting"


def interactive_handler(clicks: ClickWork, bot: str) -> Callable[[Any], Awaitable[None]]:
    """What a bot's Slack adapter calls with a Socket Mode `interactive` payload (already authenticated by
    the app token's socket), before it acks: `act_on`, with a malformed payload logged as the route's 400 is."""
    async def on_interactive(payload: Any) -> None:
        if not isinstance(payload, dict):
            log.warning("slack_operator.bad_action", bot=bot, reason="`payload` must be a JSON object")
            return
        try:
            act_on(clicks, bot, payload)
        except BadRequest as exc:
            log.warning("slack_operator.bad_action", bot=bot, reason=str(exc))
    return on_interactive


def _malformed(bot: str, reason: str) -> Response:
    """400 for a signed payload that is not in Slack's shape; Slack is told not to send it again."""
    log.warning("slack_operator.bad_action", bot=bot, reason=reason)
    response = error(400, reason)
    response.headers["X-Slack-No-Retry"] = "1"
    return response
