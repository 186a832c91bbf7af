"""The tool calls an earlier attempt at the same message finished, so that a retry does not run them again.

A message is answered again when the process answering it stopped before storing the reply (a
SIGTERM past the shutdown grace, a kill, a lost lease). Its model calls are redone, and so were its
tool calls, which may have side effects: a ticket created twice. Now each finished call is saved on
the inbound message (`meta.tool_runs`) as soon as it returns. A later attempt whose model asks for the
same tool with the same arguments gets the saved outcome, and the tool is not called again. The
journal is cleared when the message is finished (its reply stored): nothing retries it after that.

A call the process died DURING was never saved, so it runs again. For that case each call also gets
an idempotency key that is the same in every attempt at the message (`key`): the n-th call of a tool
with the same arguments. `http` tools send it as the `Idempotency-Key` header, which many APIs dedupe
on, and `python` tools read it with `gateway.pipeline.tools.idempotency_key()`.

Not covered, and said so in docs/reliability.md: a retry whose model words the arguments differently
(another ticket title) makes a different call, with another key.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

log = structlog.get_logger("gateway.tool_journal")

META_KEY = "tool_runs"
"""Where an inbound message keeps the calls its attempts finished."""


class ToolJournal:
    """The finished calls of earlier attempts at one message, and the saving of this attempt's."""

    def __init__(self, saved: list[dict[str, Any]] | None, *,
                 save: Callable[[list[dict[str, Any]]], Awaitable[None]], seed: str = "") -> None:
        """`seed` names the message across attempts and installs (its row id, time and platform id): two
        gateways with their own databases must not hand a shared API the same keys."""
        self._seed = seed
        self._occurrences: Counter[str] = Counter()
        self._entries: list[dict[str, Any]] = [e for e in saved or [] if isinstance(e, dict) and "name" in e]
        # Each earlier call answers one call of this attempt (a distinct call runs once a round, and once a turn
        # unless it failed or only reads: tool_runs.py).
        self._unused: dict[str, list[dict[str, Any]]] = {}
        for entry in self._entries:
            self._unused.setdefault(call_identity(entry["name"], entry.get("arguments")), []).append(entry)
        self._save = save

    def key(self, name: str, arguments: Any) -> str:
        """The idempotency key of this attempt's next call of `name` with these arguments: the same for
        the same call in every attempt, when the model asks in the same order (replayed calls count too)."""
        call = call_identity(name, arguments)
        self._occurrences[call] += 1
        return hashlib.sha256(f"{self._seed}\0{call}\0{self._occurrences[call]}".encode()).hexdigest()[:40]

    def replay(self, name: str, arguments: Any) -> dict[str, Any] | None:
        """The saved outcome of an earlier attempt's call of `name` with these arguments, used up; or None."""
        pending = self._unused.get(call_identity(name, arguments))
        return pending.pop(0) if pending else None

    async def record(self, name: str, arguments: Any, *, result: Any, error: str | None,
                     escalate: str | None) -> None:
        """Save a call that just returned. A failed save is logged, not raised: the call has run, and the
        answer does not depend on the journal (only a later retry would run it again)."""
        self._entries.append({"name": name, "arguments": arguments, "result": result, "error": error,
                              "escalate": escalate})
        try:
            await self._save(list(self._entries))
        except Exception:
            log.warning("tool.journal_failed", tool=name, exc_info=True)


def call_identity(name: str, arguments: Any) -> str:
    """One call's identity: its tool and its arguments, whatever order the model wrote their keys in."""
    return json.dumps([name, arguments], sort_keys=True, default=str)
