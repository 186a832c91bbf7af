"""Readable names for Slack operators in the console and the operator API.

An operator who acts from a Slack operator channel is held as `slack:<user id>` (`slack_operator`): the id
is what stays the same, so claims, take-overs and the history keep it. People read a name, so the API
adds `operator_names`, each such id's Slack name as `users.info` gives it (the bot token needs the
`users:read` scope). A name is remembered for an hour, and an id Slack would not name (no scope, a
deleted member, Slack down or slow) for five minutes, shown as the id meanwhile: the console never waits
on Slack for longer than `LOOKUP_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog

log = structlog.get_logger("gateway.operators.slack")

SLACK_OPERATOR = re.compile(r"slack:([A-Z0-9]+)")
NAME_TTL_S = 3600.0
MISS_TTL_S = 300.0
LOOKUP_TIMEOUT_S = 2.0


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

    async def names(self, pairs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
        """`{"slack:U…": name}` for each (bot, operator) whose operator is a Slack member Slack names."""
        wanted = {(bot, match.group(1)) for bot, operator in pairs
                  if operator and (match := SLACK_OPERATOR.fullmatch(operator))
                  and (bot, "slack") in self._adapters}
        found = await asyncio.gather(*(self._name(bot, user) for bot, user in wanted))
        return {f"slack:{user}": name for (_, user), name in zip(wanted, found, strict=True) if name}

    async def _name(self, bot: str, user: str) -> str | None:
        key = (bot, user)
        known = self._known.get(key)
        if known is not None and known[0] > self._clock():
            return known[1]
        task = self._asking.get(key)
        if task is None:
            task = self._asking[key] = asyncio.ensure_future(self._look_up(bot, user))
            task.add_done_callback(lambda _: self._asking.pop(key, None))
        # Shielded: one request giving up (its client went away) does not cancel the others' look-up.
        return await asyncio.shield(task)

    async def _look_up(self, bot: str, user: str) -> str | None:
        try:
            answer = await asyncio.wait_for(self._adapters[(bot, "slack")].client.users_info(user=user),
                                            LOOKUP_TIMEOUT_S)
            name = _name_of(answer.get("user") or {})
        except Exception as exc:  # missing_scope, user_not_found, Slack down: the id is shown instead
            log.info("slack_operator.name_unknown", bot=bot, user=user, error=str(exc) or type(exc).__name__)
            name = None
        self._known[(bot, user)] = (self._clock() + (NAME_TTL_S if name else MISS_TTL_S), name)
        return name
