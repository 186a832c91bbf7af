"""Running a round's tool calls: each distinct call (its tool and arguments) once a turn, again in a later round
when it failed (under the failed call's idempotency key; `MAX_FAILED_RUNS` in all) or only reads (an http GET:
what it read may have changed since), the outcome an earlier attempt at the message saved (gateway/pipeline/tool_journal.py) before a
real run, and every result bounded and stored as the model is shown it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from typing import Any

import structlog

from gateway.pipeline.tool_journal import ToolJournal, call_identity
from gateway.pipeline.tools import DEFAULT_RESULT_CHARS, BotTools, ToolOutcome

log = structlog.get_logger("gateway.answer")  # the tool loop's events, as before they moved here


MAX_FAILED_RUNS = 2
"""Runs of one call (tool and arguments) that fail, in one turn, after which it is given its failure unrun: a
model asking again for a tool that is down ran it in every round, waiting on the service each time."""


@dataclasses.dataclass(frozen=True, slots=True)
class Asked:
    """A distinct call's (tool, arguments) latest run in the turn: its round, its key, its outcome when done,
    and how many of its runs before this one failed."""

    round_no: int
    key: str | None
    outcome: asyncio.Future
    failed_before: int = 0


async def run_call(tools: BotTools, call, turn, journal: ToolJournal | None,
                   finished: dict[int, tuple[ToolOutcome, tuple[Any, str]]], index: int,
                   key: str | None, asked: dict[str, Asked], round_no: int) -> tuple[ToolOutcome, tuple[Any, str]]:
    """One call of a round, with what is stored of it (`_stored`): the outcome of the same call earlier in the
    turn (`asked`: in this round, or in an earlier one that neither failed, but `MAX_FAILED_RUNS` times, nor
    only read), else the one an earlier attempt at this message saved for it, else a real call, saved (as stored
    with the turn) as soon as it returns. `finished[index]` gets it too, so a round cut off by the turn's deadline still knows which of
    its calls returned, and with what."""
    arguments = loads(call.arguments)
    same = call_identity(call.name, arguments)
    failed = 0
    if (first := asked.get(same)) is not None:
        # Asked again in this round or a later one (a model losing track of what it did): its outcome, not a second
        # run, which opened a second ticket or posted twice.
        outcome, stored = await first.outcome
        failed = first.failed_before + bool(outcome.error)
        # In a later round, a read reads afresh (a cart read again after `add_to_cart` was given the cart as it was
        # before), and a call that failed (a timeout, an HTTP 5xx) may be tried again: up to its last allowed run.
        again = first.round_no < round_no and (tools.reads_only(call.name) or outcome.error)
        if not again or failed >= MAX_FAILED_RUNS:
            finished[index] = dataclasses.replace(outcome, replayed=False, repeated=True), stored
            return finished[index]
        if not tools.reads_only(call.name):  # under the failed call's key: a service that took it drops this one
            key = first.key
    asked[same] = Asked(round_no, key, asyncio.get_running_loop().create_future(), failed)
    try:
        finished[index] = await _run_first(tools, call, arguments, turn, journal, key)
    except BaseException:  # cut off by the turn's deadline: the same call waiting on it stops with it
        asked[same].outcome.cancel()
        raise
    asked[same].outcome.set_result(finished[index])
    return finished[index]


async def _run_first(tools: BotTools, call, arguments: Any, turn, journal: ToolJournal | None,
                     key: str | None) -> tuple[ToolOutcome, tuple[Any, str]]:
    """A call that runs (first asked in the turn, or asked again after it failed): the outcome an earlier attempt
    saved, else a real call, saved."""
    if journal is not None and (saved := journal.replay(call.name, arguments)) is not None:
        return with_stored(ToolOutcome(call.name, arguments, saved.get("result"), error=saved.get("error"),
                                       escalate=saved.get("escalate"), replayed=True), turn)
    outcome = await tools.call(call.name, call.arguments or "{}", identity=turn.identity, key=key)
    done = with_stored(outcome, turn, limit=tools.result_limit(call.name))
    if journal is not None:
        # The result as stored (bounded once, here): an error's stored form is the error itself.
        await journal.record(call.name, arguments, result=None if outcome.error else done[1][0],
                             error=outcome.error, escalate=outcome.escalate)
    return done


def with_stored(outcome: ToolOutcome, turn, *, limit: int = DEFAULT_RESULT_CHARS) -> tuple[ToolOutcome, tuple[Any, str]]:
    """The outcome with its stored form, computed once: a 3 MB result is serialized once, not per use."""
    return outcome, _stored(outcome, turn, limit=limit)


def _stored(outcome: ToolOutcome, turn, *, limit: int) -> tuple[Any, str]:
    """(what to store, its JSON for the model) of one call's outcome: its error or its bounded result. A
    replayed result was bounded when it was saved; a cut one would be cut again, nested."""
    stored = {"error": outcome.error} if outcome.error else outcome.result
    if outcome.replayed:  # saved in its stored form, JSON already
        return stored, json.dumps(stored, default=str)
    stored = as_json(stored)
    bounded = bounded_result(stored, limit=limit)
    if bounded[0] is not stored:
        log.warning("tool.result_truncated", tool=outcome.name, chars=len(json.dumps(stored, default=str)),
                    kept=limit, message_id=turn.message_id, conversation_id=turn.conversation_id)
    return bounded


def as_json(value: Any) -> Any:
    """`value` as JSON holds it, as the model is shown it: a datetime, a Decimal or a UUID as its text, a key
    that is no string (a date) as one, NaN and infinities (no JSON, refused by PostgreSQL's jsonb) as null.
    A python tool returning a database row kept its objects in the stored turn, which the JSON column
    could not write: the reply was never stored. A date as a key failed even the model's copy."""
    if isinstance(value, dict):
        return {_json_key(k): as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [as_json(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int)):
        return value
    return str(value)


def _json_key(key: Any) -> str:
    """A dict key as `json.dumps` writes it (`1`, `true`, `null`), or the text of a key it refuses (a date)."""
    return key if isinstance(key, str) else json.dumps(key) if key is None or isinstance(key, (int, float)) else str(key)


def call_record(round_no: int, call_id: str, outcome: ToolOutcome, payload: Any) -> dict[str, Any]:
    """One call as stored with the turn (and shown to operators)."""
    return {"round": round_no, "id": call_id, "name": outcome.name, "arguments": outcome.arguments,
            "result": payload, **({"replayed": True} if outcome.replayed else {}),
            **({"repeated": True} if outcome.repeated else {})}


def bounded_result(result: Any, *, limit: int = DEFAULT_RESULT_CHARS) -> tuple[Any, str]:
    """(what to store, its JSON for the model): `result`, or its first `limit` characters as text when it
    is longer, marked as cut so the model does not take a part for the whole. A 3 MB answer went whole
    into the prompt (which the provider refused, so the customer was told the assistant is down) and into
    the stored turn."""
    text = json.dumps(result, default=str)
    if len(text) <= limit:
        return result, text
    cut = {"truncated": f"the first {limit:,} of {len(text):,} characters; the rest was cut and is not shown",
           "text": text[:limit]}
    return cut, json.dumps(cut)


def loads(arguments: str | None) -> Any:
    """A call's arguments as the model wrote them: a JSON value, else the text itself."""
    try:
        return json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return arguments
