"""Warnings relayed to the caller whose work logged them: `gateway ingest` through a running server
prints the warnings of its run as a local ingest prints them on its terminal.

The caller sets `relay_to` in the context of the task that does its work (`gateway.http.admin` for a
streamed ingest); the threads it starts with `asyncio.to_thread` copy that context, every other task
has none. Every logger's warnings are relayed, stdlib's (`RelayWarnings`, on the root logger) and
structlog's (`relay_structlog`, a processor): only `rag`'s were, so a library's warning or one of
`gateway.knowledge` (a run left `running` by a killed process, marked interrupted) reached the server's
log alone. Errors a run records are left out: the CLI prints them from the run, as its `!` lines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar

from gateway.errors import IN_RUN_ERRORS
from gateway.observability.logs import record_fields, redact

relay_to: ContextVar[Callable[[str, str], None] | None] = ContextVar("relayed_warnings", default=None)
"""(level, message) -> None, set by the caller to whom this context's warnings go."""
_LEVELS = {"warn": "warning", "exception": "error", "fatal": "critical"}
_NOT_FIELDS = frozenset({"event", "exc_info", "stack_info", IN_RUN_ERRORS})


class RelayWarnings(logging.Handler):
    """Relays a stdlib record of WARNING and above to this context's caller, with its `extra=` fields,
    as the log line shows them beside its event (`ingest.points_missing missing=3 …`)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        relay = relay_to.get()
        if relay is None or getattr(record, IN_RUN_ERRORS, False):
            return
        relay(record.levelname.lower(), _line(record.getMessage(), record_fields(record)))


RELAY = RelayWarnings()
"""The one relay handler, on the root logger: `install` puts it there, and `configure_logging` keeps it."""


def install() -> None:
    """Put `RELAY` on the root logger, once (the admin routes do, as they are imported)."""
    root = logging.getLogger()
    if RELAY not in root.handlers:
        root.addHandler(RELAY)


def relay_structlog(_logger, method: str, event_dict: dict) -> dict:
    """A structlog processor: relays a warning or worse to this context's caller, before the context's
    own fields (a trace id) join it."""
    level = _LEVELS.get(method, method)
    relay = relay_to.get()
    if relay is not None and level in ("warning", "error", "critical") and not event_dict.get(IN_RUN_ERRORS):
        relay(level, _line(str(event_dict.get("event", "")), {k: v for k, v in event_dict.items() if k not in _NOT_FIELDS}))
    return event_dict


def _line(event: str, fields: dict) -> str:
    """`event key=value …`, secrets redacted as on the server's own log (a sitemap URL may carry a password):
    each value on its own too, as a field cut inside a secret ends its value, not this line."""
    return redact(" ".join([event, *(f"{key}={redact(str(value))}" for key, value in fields.items())]).strip())
