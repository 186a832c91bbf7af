"""One exception tree for the whole gateway.

    GatewayError
    ├── ConfigError                 bad config.yaml or environment; names the key
    ├── SignatureInvalid            a webhook whose signature is bad, missing or stale (HTTP 401)
    ├── BadRequest                  input we refuse with a clear 4xx (empty, too long, malformed)
    ├── NotFound                    unknown bot, session, escalation (HTTP 404)
    ├── Conflict                    a state transition lost a race (HTTP 409)
    ├── ChannelError
    │   ├── ChannelSendError        the platform refused or failed a send; may carry retry_after
    │   └── RecipientUnreachable    the recipient cannot be reached (blocked, outside a window)
    ├── LLMError                    every model in the chain failed
    ├── RetrievalError              the vector index is unavailable
    │   └── IndexBusy               the Qdrant folder is held by another process
    ├── EmbeddingError              an API embedding model's provider failed or could not be reached
    ├── SourceError                 a whole knowledge source could not be loaded
    ├── BodyTooLarge                a fetched body past its cap or compressed twice (gateway/capped_body.py)
    ├── ModelIntegrityError         a model file is missing or not the pinned one (rag/model_files.py)
    └── EvalFileError               the eval questions file breaks its format (rag/eval.py)
    UnknownBot (a KeyError)         no bot of that name in the config

Adapters translate SDK exceptions into these at the boundary; only the top of the worker
catches broadly.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """The configuration is invalid. `key` is the dotted path of the offending value."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}" if key else problem)


class SignatureInvalid(GatewayError):
    """A webhook failed signature verification."""


class BadRequest(GatewayError):
    """Input that is refused with a clear client error."""


class NotFound(GatewayError):
    """The addressed resource does not exist (or is not visible to the caller)."""


class Conflict(GatewayError):
    """A concurrent actor won the race for this resource. Raised on an escalation's state (`conflict_now`), it
    carries that state, so a caller wording what to do next reads the same state as the message: `state` (None
    when the escalation is gone or the conflict is no state's), its `conversation_id`, and `asked_again`, when a
    resolved one's customer asked for a person again since (the message names that escalation: `newer_id`), and
    the escalation's `escalation_id` and `operator`, who held or resolved it then."""

    def __init__(self, message: str, *, state: str | None = None, conversation_id: int | None = None,
                 asked_again: bool = False, newer_id: int | None = None, operator: str | None = None,
                 escalation_id: int | None = None) -> None:
        super().__init__(message)
        self.state = state
        self.operator = operator
        self.escalation_id = escalation_id
        self.conversation_id = conversation_id
        self.asked_again = asked_again
        self.newer_id = newer_id


class ChannelError(GatewayError):
    """A channel platform failed."""


class ChannelSendError(ChannelError):
    """A send failed; `retry_after` (seconds) is set when the platform asked us to wait, `rate_limited`
    when that is a rate limit (a 429: the platform is up, and this chat or method must slow down)."""

    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False,
                 rate_limited: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent
        self.rate_limited = rate_limited


class RecipientUnreachable(ChannelError):
    """The recipient cannot be reached on this channel right now."""


class RecipientOptedOut(RecipientUnreachable):
    """The recipient told the platform to stop sending (WhatsApp's STOP: Twilio 21610), until they opt in."""


class BotRemoved(RecipientUnreachable):
    """The platform says the bot was removed from the chat (kicked from a group, blocked by the person): the
    outbox stores it (storage/removed_chats.py), so later replies there fail without a call, until it is back."""


class LLMError(GatewayError):
    """Every model in the fallback chain failed."""


class RetrievalError(GatewayError):
    """Search could not run (index unavailable)."""


class IndexBusy(RetrievalError):
    """Qdrant local mode: the storage folder is held by another process."""


class EmbeddingError(GatewayError):
    """An API embedding model (`embedding.model: litellm/…`) failed: the provider refused the request
    or could not be reached. Says which model and what the provider said."""


class UnknownBot(KeyError):
    """No bot of that name is configured; `str()` says which ones are."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name, self.known = name, known

    def __str__(self) -> str:
        return f"unknown bot {self.name!r} (configured: {', '.join(self.known) or 'none'})"


class SourceError(GatewayError):
    """A whole source could not be loaded (missing folder, unreachable sitemap)."""


# The `extra=` key that marks a log record whose error is also one of its ingest run's `errors`, so a
# front end that prints those errors (`gateway ingest` in a terminal) leaves the record out instead
# of showing the same failure twice.
IN_RUN_ERRORS = "in_run_errors"
# The `extra=` key that marks a directory's `source.files_not_read` record (the file types not read), which
# `gateway eval` says itself (as a `note:`, or in its error when nothing was read).
SKIPPED_FILES = "skipped_files"
