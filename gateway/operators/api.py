"""The operator REST API (bearer token per operator) and its live event stream.

    GET  /v1/escalations?state=open,claimed&bot=acme     list
    GET  /v1/escalations/stream                           server-sent events (opened, claimed, reply, …)
    GET  /v1/escalations/{id}?before=&limit=              newest messages, passages, summary, history
    POST /v1/escalations/{id}/claim {"take_over"?} | /release | /resolve | /notes {"text"}
    POST /v1/escalations/{id}/reply {"text", "message_id"?}   201; a repeated message_id: 200, sent once
    POST /v1/conversations/{id}/claim                     take over a conversation that never escalated
    GET  /v1/operators/me                                 who this token signs in as

Lists, escalations and live events carry `operator_names`: the Slack name of each Slack operator
(`slack:U…`) they mention (`gateway/operators/slack_names.py`); the ids stay what identifies them.

A wrong or missing token gets 401, before anything else about the request is looked at (its body
included); an escalation of a bot the operator may not serve gets 404, the same as one that does not
exist, so ids of other teams' conversations leak nothing; so does a list's `bot` filter naming such a bot.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import select
from sse_starlette.sse import EventSourceResponse

from gateway.errors import BadRequest, Conflict, NotFound
from gateway.events import ESCALATIONS_TOPIC
from gateway.http.deps import MAX_ID, RowId, error, services, utc_iso
from gateway.http.json_body import JsonRoute
from gateway.observability.logs import redact
from gateway.operators.attachments import kinds, shown
from gateway.operators.auth import Operator
from gateway.operators.bodies import ClaimBody, NoBody, ReplyBody, ResolveBody, TextBody
from gateway.operators.edits import replaced_words
from gateway.operators.summary import summarize, summary_messages
from storage import repositories as repo
from storage.models import ESCALATION_STATES, Contact, Conversation, Escalation

UNAUTHORIZED = "a valid operator token is required (Authorization: Bearer <token>)"
TRANSCRIPT_PAGE = 200  # messages per page of GET /v1/escalations/{id}, newest first
LIST_PAGE = 200  # open escalations (the longest waiting) and resolved ones (the newest) in GET /v1/escalations


class OperatorRoute(JsonRoute):
    """Authenticates before anything else: a request without a valid token gets 401, whatever its
    path parameters or body (no 422 telling a stranger what a valid body looks like)."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def authenticated(request: Request) -> Response:
            operator = _operator(request)
            if operator is None:
                return error(401, UNAUTHORIZED)
            request.state.operator = operator
            return await handler(request)

        return authenticated


router = APIRouter(tags=["operators"], route_class=OperatorRoute)  # token first, then bodies capped


def _operator(request: Request) -> Operator | None:
    auth = services(request).operator_auth
    return auth.authenticate(request.headers.get("authorization")) if auth is not None else None


async def _guarded(request: Request, action: Callable[[Operator], Awaitable[Any]], *, status: int = 200) -> Response:
    operator = getattr(request.state, "operator", None) or _operator(request)
    if operator is None:
        return error(401, UNAUTHORIZED)
    try:
        result = await action(operator)
        return result if isinstance(result, Response) else JSONResponse(result, status_code=status)
    except NotFound as exc:
        return error(404, str(exc))
    except Conflict as exc:
        return error(409, str(exc))
    except BadRequest as exc:
        return error(422, str(exc))


async def operator_names(request: Request, pairs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """The readable names of the Slack operators (`slack:U…`) among the (bot, operator) `pairs`, as
    `operator_names`. All of them in one call: their look-ups go side by side, each bot's and every one's."""
    names = services(request).slack_names
    return await names.names(pairs) if names is not None else {}


def escalation_dict(escalation: Escalation, conversation: Conversation | None = None,
                    contact: Contact | None = None) -> dict[str, Any]:
    """The JSON shape of an escalation in lists and events."""
    body = {
        "id": escalation.id, "bot": escalation.bot, "state": escalation.state, "reason": escalation.reason,
        "operator": escalation.operator, "conversation_id": escalation.conversation_id,
        "notes": escalation.notes or [],
        "created_at": utc_iso(escalation.created_at),
        # When the current wait for a claim began: the escalation's opening, or its last release.
        "waiting_since": utc_iso(escalation.waiting_since or escalation.created_at),
        "claimed_at": utc_iso(escalation.claimed_at),
        "resolved_at": utc_iso(escalation.resolved_at),
    }
    if conversation is not None:
        body.update(channel=conversation.channel, conversation_state=conversation.state)
    if contact is not None:
        body["customer"] = contact.display_name or contact.external_id
    return body


@router.get("/v1/escalations")
async def list_escalations(request: Request, state: str | None = None, bot: str | None = None) -> Response:
    """Escalations the operator may serve, newest first; filter by `state` (comma-separated) and `bot`. Every
    claimed one, the LIST_PAGE open ones waiting longest and the newest LIST_PAGE resolved; `counts` has them all."""
    svc = services(request)

    async def action(op: Operator) -> dict[str, Any]:
        states = [s.strip() for s in (state or "").split(",") if s.strip()]
        unknown = sorted(set(states) - set(ESCALATION_STATES))
        if unknown:
            # "waiting" is a conversation's state, not an escalation's: it matched nothing, silently.
            raise BadRequest(f"unknown state {', '.join(map(repr, unknown))}: an escalation is "
                             f"{', '.join(ESCALATION_STATES)} (a waiting conversation's escalation is open)")
        served = svc.escalations.servable(op.bots)
        if bot and bot not in served:
            # One answer for a bot that does not exist and one the operator does not serve (nor any
            # longer configured): whether another team's bot exists is not theirs to learn here. Named
            # with the bots they do serve, so a typo ("acmee") is seen at once.
            raise NotFound(f"no bot {bot!r} among the bots you serve ({', '.join(sorted(served)) or 'none'})")
        asked = ",".join(states) or None
        rows = await svc.escalations.find(bots=op.bots, state=asked, bot=bot, limit=LIST_PAGE)
        counts = await svc.escalations.counts(bots=op.bots, state=asked, bot=bot)
        async with svc.sessions() as session:
            conversations = {c.id: c for c in (await session.execute(select(Conversation).where(
                Conversation.id.in_([r.conversation_id for r in rows])))).scalars()}
            contact_ids = [c.contact_id for c in conversations.values() if c.contact_id]
            contacts = {c.id: c for c in (await session.execute(select(Contact).where(
                Contact.id.in_(contact_ids)))).scalars()} if contact_ids else {}
            # Every web chat customer is "Web visitor" and most reasons read "customer asked: 'talk to a
            # human'": what they last wrote tells the queue's escalations apart without opening each.
            last = await repo.last_customer_messages(session, conversation_ids=list(conversations))
        out = []
        for row in rows:
            conversation = conversations.get(row.conversation_id)
            contact = contacts.get(conversation.contact_id) if conversation and conversation.contact_id else None
            said = last.get(row.conversation_id)
            out.append({**escalation_dict(row, conversation, contact), "last_customer_message": {
                "text": (said.text or "")[:200], "at": utc_iso(said.created_at),
                "attachments": kinds(said.attachments)} if said else None})
        # One call for every bot's: bot after bot, a slow Slack made the list wait 2 s per bot.
        return {"escalations": out, "counts": counts,
                "operator_names": await operator_names(request, [(r.bot, r.operator) for r in rows])}

    return await _guarded(request, action)


@router.get("/v1/escalations/stream")
async def stream_escalations(request: Request) -> Response:
    """Server-sent events for the operator's bots: opened, claimed, reply, customer_message, note, resolved,
    and the others the README lists (released, taken_over, stale_claim, reply_failed)."""
    operator = getattr(request.state, "operator", None) or _operator(request)
    if operator is None:
        return error(401, UNAUTHORIZED)
    svc = services(request)

    async def events():
        async with svc.bus.subscribe(ESCALATIONS_TOPIC) as queue:
            yield {"event": "ready", "data": json.dumps({"operator": operator.name})}
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=15)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return
                    continue
                if event.get("bot", "") in svc.escalations.servable(operator.bots):  # configured, as every route
                    # Who took or released it, by name: the console says so at once, before it reads anything.
                    named = await operator_names(request, [(event.get("bot", ""), event.get(key))
                                                           for key in ("operator", "previous_operator")])
                    event = {**event, "operator_names": named} if named else event
                    yield {"event": event.get("type", "update"), "data": json.dumps(event)}

    return EventSourceResponse(events(), ping=15)


@router.get("/v1/operators/me")
async def whoami(request: Request) -> Response:
    """The operator this token signs in as, and the bots they serve (`["*"]`: every bot)."""

    async def action(op: Operator) -> dict[str, Any]:
        return {"name": op.name, "bots": ["*"] if op.bots is None else sorted(op.bots)}

    return await _guarded(request, action)


@router.get("/v1/escalations/{escalation_id}")
async def get_escalation(escalation_id: RowId, request: Request,
                         before: int | None = Query(default=None, ge=1, le=MAX_ID),
                         limit: int = Query(default=TRANSCRIPT_PAGE, ge=1, le=500)) -> Response:
    """One escalation with its newest `limit` messages (before message `before`, to page back; with
    citations, retrieved passages and the tool calls behind a reply), `has_more` when older ones exist,
    its history and a summary."""
    svc = services(request)

    async def action(op: Operator) -> dict[str, Any]:
        escalation = await svc.escalations.get(escalation_id, bots=op.bots)
        async with svc.sessions() as session:
            conversation = await session.get(Conversation, escalation.conversation_id)
            if conversation is None:  # erased since `get` (`gateway forget`, retention): its escalation with it
                raise NotFound(f"no escalation {escalation_id}")
            contact = await session.get(Contact, conversation.contact_id) if conversation.contact_id else None
            # `history` leaves out ignored messages and returns the newest, oldest first; one more tells
            # whether an older page exists.
            messages = await repo.history(session, conversation_id=conversation.id, before_id=before,
                                          limit=limit + 1)
            has_more = len(messages) > limit
            messages = messages[-limit:] if has_more else messages
            # The summary always reads the newest messages, whichever page is shown.
            recent = await summary_messages(session, conversation_id=conversation.id)
            # A customer's edit of a held message (`meta.edit_of`): the words it replaces, shown with it.
            replaces = {m.id: await replaced_words(session, m.id) for m in messages if (m.meta or {}).get("edit_of")}
        events = await svc.escalations.events(escalation_id)
        bot = svc.settings.bot(escalation.bot)  # configured: `get` finds no escalation of a removed bot
        return {
            **escalation_dict(escalation, conversation, contact),
            "summary": await summarize(svc.llm, bot, recent, reason=escalation.reason, budget=svc.budget,
                                       conversation_id=conversation.id),
            "has_more": has_more,
            "messages": [{
                "id": m.id, "direction": m.direction, "author": m.author, "text": m.text, "status": m.status,
                "citations": m.citations or [], "retrieved": m.retrieved or [],
                # The customer's files, by kind: a photo alone has no text (the console showed an empty message).
                "attachments": shown(m.attachments),
                # What the bot looked up or did for this reply (a ticket it opened, an interrupted call).
                "tool_calls": m.tool_calls or [],
                "created_at": utc_iso(m.created_at),
                # Why a reply never reached the customer (blocked the bot, outside WhatsApp's 24 hours),
                # or has not yet (`pending`: its send failed, a retry is due): the operator must know their
                # answer did not arrive.
                # Redacted as read too: an older gateway stored a platform's words whole (a token in a URL).
                "error": redact(m.error) if m.error and m.direction == "out" and m.status in ("failed", "pending", "sending")
                else None,
                # Where the customer came from: a Telegram deep link's `/start order123`, whose text is empty.
                **({"start_payload": (m.meta or {})["start_payload"]} if (m.meta or {}).get("start_payload") else {}),
                **({"replaces": replaces[m.id]} if replaces.get(m.id) is not None else {}),
            } for m in messages],
            "events": [{"kind": e.kind, "from_state": e.from_state, "to_state": e.to_state, "actor": e.actor,
                        "reason": e.reason, "at": utc_iso(e.created_at)} for e in events],
            "operator_names": await operator_names(request, [(escalation.bot, operator) for operator in (
                escalation.operator, *(e.actor for e in events),
                *(n.get("author") for n in escalation.notes or [] if isinstance(n, dict)))]),
        }

    return await _guarded(request, action)


@router.post("/v1/escalations/{escalation_id}/claim")
async def claim(escalation_id: RowId, request: Request, body: ClaimBody | None = None) -> Response:
    """Take the escalation; 409 naming the holder when another operator holds it, unless
    `{"take_over": true}`: then the claim passes to you (recorded, and the holder's console is told)."""
    svc = services(request)

    async def action(op: Operator) -> dict[str, Any] | Response:
        try:
            return escalation_dict(await svc.escalations.claim(
                escalation_id, operator=op.name, bots=op.bots, take_over=bool(body and body.take_over),
                reason=body.reason if body else ""))
        except Conflict as exc:
            return _held_by_another(escalation_id, op, exc)

    return await _guarded(request, action)


def _held_by_another(escalation_id: int, op: Operator, exc: Conflict) -> Response:
    """A claim (of an escalation or of its conversation), reply or resolve refused because another operator holds
    it: the 409 with a `hint` naming `{"take_over": true}`, which an API caller had to find in the README. A field of its own: the error's text
    is what the console and Slack show, where Take over is a button or no option at all. Worded from the state
    the refusal carries (`conflict_now`), as its text is: a second read of the row, after the claim passed on
    or was released, named another holder than the error, or left the hint out of "already claimed by sam"."""
    if exc.state != "claimed" or exc.operator in (None, op.name):
        raise exc
    return error(409, str(exc), hint=f"to take it over from {exc.operator}, "
                                     f'POST /v1/escalations/{escalation_id}/claim with {{"take_over": true}}')


@router.post("/v1/escalations/{escalation_id}/release")
async def release(escalation_id: RowId, request: Request, body: ResolveBody | None = None) -> Response:
    """Give your claim back: the escalation is open again for any operator; 409 when you do not hold it."""
    svc = services(request)

    async def action(op: Operator) -> dict[str, Any]:
        return escalation_dict(await svc.escalations.release(
            escalation_id, operator=op.name, bots=op.bots, reason=body.reason if body else ""))

    return await _guarded(request, action)


@router.post("/v1/escalations/{escalation_id}/reply")
async def reply(escalation_id: RowId, body: ReplyBody, request: Request) -> Response:
    """Send `text` to the customer through their own channel: 201 `{"message_id", "status"}`. With
    `message_id`, a repeat of it answers 200 with the reply stored the first time (its status now), sent
    once; the same `message_id` with another text is 409."""
    svc = services(request)

    async def action(op: Operator) -> Response:
        try:
            sent = await svc.escalations.send_reply(escalation_id, operator=op.name, text=body.text, bots=op.bots,
                                                    message_id=body.message_id)
        except Conflict as exc:  # handed back: say how to reach the customer again, not only that it is over
            # Worded from the state the refusal was raised on: read again, a customer asking for a person in
            # between made the way back follow a message saying the bot answers them (or the reverse).
            if exc.state != "resolved":
                return _held_by_another(escalation_id, op, exc)
            if exc.asked_again:  # the customer asked for a person again: the message names that escalation
                raise
            raise Conflict(f"{exc}; to write to them, take the conversation back: "
                           f"POST /v1/conversations/{exc.conversation_id}/claim") from None
        async with svc.sessions() as session:
            status = (await session.get(type(sent.message), sent.message.id)).status
        return JSONResponse({"message_id": sent.message.id, "status": status}, status_code=201 if sent.created else 200)

    return await _guarded(request, action)


@router.post("/v1/escalations/{escalation_id}/resolve")
async def resolve(escalation_id: RowId, request: Request, body: ResolveBody | None = None) -> Response:
    """Hand the conversation back to the bot; the customer is told."""
    svc = services(request)

    async def action(op: Operator) -> dict[str, Any] | Response:
        try:
            return escalation_dict(await svc.escalations.resolve(
                escalation_id, operator=op.name, bots=op.bots, reason=body.reason if body else ""))
        except Conflict as exc:
            return _held_by_another(escalation_id, op, exc)

    return await _guarded(request, action)


@router.post("/v1/escalations/{escalation_id}/notes")
async def add_note(escalation_id: RowId, body: TextBody, request: Request) -> Response:
    """An internal note, visible to operators only."""
    svc = services(request)

    async def action(op: Operator) -> dict[str, Any]:
        return await svc.escalations.add_note(escalation_id, operator=op.name, text=body.text, bots=op.bots)

    return await _guarded(request, action, status=201)


@router.post("/v1/conversations/{conversation_id}/claim")
async def claim_conversation(conversation_id: RowId, request: Request, body: NoBody | None = None) -> Response:
    """Take over a conversation whether or not it escalated (no fields; `body` only refuses a malformed one)."""
    svc = services(request)

    async def action(op: Operator) -> dict[str, Any] | Response:
        try:
            return escalation_dict(await svc.escalations.claim_conversation(
                conversation_id, operator=op.name, bots=op.bots))
        except Conflict as exc:  # its escalation is held: the way to take it over, as for an escalation's claim
            if exc.escalation_id is None:
                raise
            return _held_by_another(exc.escalation_id, op, exc)

    return await _guarded(request, action)
