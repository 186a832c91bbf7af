"""Readable names for Slack operators in the console and the operator API.

A claim made from a Slack operator channel before its members were mapped to operators (`slack_user_ids`;
now they act as their operator) is held as `slack:<user id>`: the id is what stays the same, so claims,
take-overs and the history keep it. People read a name, so the API
adds `operator_names`, each such id's Slack name as `users.info` gives it (the bot token needs the
`users:read` scope). A name is remembered for an hour, and an id Slack would not name (no scope, a
deleted member, Slack down or slow) for five minutes, shown as the id meanwhile: the console never waits
on Slack for longer than `LOOKUP_TIMEOUT_S`. At most `LOOKUPS_AT_ONCE` look-ups go to Slack at a time (a
list of 200 operators sent 200 at once, and Slack's rate limit refused most); those the wait did not see
end go on, so the next list or event names them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from gateway.operators.slack_text import SLACK_OPERATOR

log = structlog.get_logger("gateway.operators.slack")

NAME_TTL_S = 3600.0
MISS_TTL_S = 300.0
LOOKUP_TIMEOUT_S = 2.0
LOOKUPS_AT_ONCE = 8


def _name_of(user: dict[str, Any]) -> str | None:
    """The name Slack shows for a member: their display name, else their full name, else their handle."""
    profile = user.get("profile") or {}
    for name in (profile.get("display_name"), profile.get("real_name"), user.get("real_name"), user.get("name")):
        if isinstance(name, str) and name.strip():
            return name.strip()
    return None


class SlackOperatorNames:
    """Looks up and remembers the names of Slack operators, through each bot's own Slack client."""

    def __init__(self, adapters: dict, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._adapters = adapters
        self._clock = clock
        self._known: dict[tuple[str, str], tuple[float, str | None]] = {}  # (bot, user id) → (until, name)
        self._asking: dict[tuple[str, str], asyncio.Task[str | None]] = {}  # one look-up at a time per member
        self._slots = asyncio.Semaphore(LOOKUPS_AT_ONCE)

    async def names(self, pairs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
        """`{"slack:U…": name}` for each (bot, operator) whose operator is a Slack member Slack names."""
        wanted = {(bot, match.group(1)) for bot, operator in pairs
                  if operator and (match := SLACK_OPERATOR.fullmatch(operator))
                  and (bot, "slack") in self._adapters}
        names: dict[str, str] = {}
        asking: dict[tuple[str, str], asyncio.Task[str | None]] = {}
        for bot, user in wanted:
            known = self._known.get((bot, user))
            if known is not None and known[0] > self._clock():
                if known[1]:
                    names[f"slack:{user}"] = known[1]
            else:
                asking[bot, user] = self._asking_for(bot, user)
        if asking:
            # Not cancelled when the wait ends (nor when this request goes away): they are others' too,
            # and what they learn is remembered for the next list.
            await asyncio.wait(asking.values(), timeout=LOOKUP_TIMEOUT_S)
        for (_, user), task in asking.items():
            if task.done() and not task.cancelled() and (name := task.result()):
                names[f"slack:{user}"] = name
        return names

    def _asking_for(self, bot: str, user: str) -> asyncio.Task[str | None]:
        """The look-up of the member under way, or a new one."""
        key = (bot, user)
        task = self._asking.get(key)
        if task is None:
            task = self._asking[key] = asyncio.ensure_future(self._look_up(bot, user))
            task.add_done_callback(lambda _: self._asking.pop(key, None))
        return task

    async def _look_up(self, bot: str, user: str) -> str | None:
        try:
            async with self._slots:  # its own time limit starts once it has a slot
                answer = await asyncio.wait_for(self._adapters[(bot, "slack")].client.users_info(user=user),
                                                LOOKUP_TIMEOUT_S)
            name = _name_of(answer.get("user") or {})
        except Exception as exc:  # missing_scope, user_not_found, Slack down: the id is shown instead
            log.info("slack_operator.name_unknown", bot=bot, user=user, error=str(exc) or type(exc).__name__)
            name = None
        self._known[(bot, user)] = (self._clock() + (NAME_TTL_S if name else MISS_TTL_S), name)
        return name
