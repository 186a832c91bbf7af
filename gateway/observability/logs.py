"""Structured logs (structlog): one renderer for our records and every library's, with secrets redacted."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import TextIO

import structlog

from gateway.errors import IN_RUN_ERRORS, SKIPPED_FILES
from gateway.url_secrets import REDACTED

_SECRET_PATTERNS: list[re.Pattern[str]] = []
_SECRETS: list[str] = []
_PASSWORDS: frozenset[str] = frozenset()
"""Secrets a person chose (a database's password, a `*_PASSWORD` variable), often led by a word (`postgres-…`)."""
_CUT_SECRET_START: re.Pattern[str] | None = None
CUT_SECRET_CHARS = 6
"""A field cut short (`error=str(exc)[:200]`) that ends in this many characters of a secret or more ends inside it."""


def configure_logging_for(settings, *, level: str | None = None, fmt: str | None = None,
                          log_file: Path | str | None = None) -> None:
    """`configure_logging` with the config's level and format (or the command's own) and every secret it
    holds to redact: a CLI command that prints a run's errors (`ingest`, `ingest-runs`) shows them redacted
    as /readyz and the server's log do."""
    from gateway.config_file import secret_values
    from gateway.pipeline.tools import http_tool_secrets
    from gateway.url_secrets import connection_secrets, model_secrets, source_url_secrets

    configure_logging(level=level or settings.log_level, fmt=fmt or settings.log_format,
                      secrets=[value for _, value in secret_values(settings.model_dump())] + http_tool_secrets(settings)
                      + source_url_secrets(settings) + model_secrets(settings), passwords=connection_secrets(settings),
                      log_file=log_file)


# The provider credentials LiteLLM and its callbacks read from the environment (OPENAI_API_KEY, HF_TOKEN,
# WATSONX_APIKEY, LANGFUSE_SECRET_KEY, AWS_SECRET_ACCESS_KEY, …), for `embedding.model: litellm/…` and a model without
# `api_key`, and any other credential there (DB_PASSWORD, a signing secret): no config key names them, and a 401 or a
# driver's error may quote one. By the name's last word(s): not MAX_TOKENS, GITHUB_TOKEN_FILE (a path), LANGFUSE_PUBLIC_KEY.
_PROVIDER_ENV_KEY = re.compile(
    r"(^|_)(API_?KEY|SECRET(_ACCESS)?_KEY|PRIVATE_KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE)$", re.IGNORECASE)
# Shorter is a local server's placeholder (`ollama`, `lm-studio`, `sk-1234`), a word that names the model and
# server too, not a key: no provider issues one that short (30 characters and more).
MIN_ENV_SECRET_CHARS = 16
_PASSWORD_ENV_KEY = re.compile(r"(^|_)(PASSWORD|PASSWD|PASSPHRASE)$", re.IGNORECASE)


def provider_env_secrets() -> list[str]:
    """The values of the environment's variables named like a provider's credential (a placeholder's left)."""
    import os

    return [value.strip() for name, value in os.environ.items()
            if _PROVIDER_ENV_KEY.search(name) and len(value.strip()) >= MIN_ENV_SECRET_CHARS]


def configure_logging(*, level: str = "INFO", fmt: str = "console", secrets: list[str] | tuple[str, ...] = (),
                      passwords: list[str] | tuple[str, ...] = (), log_file: Path | str | None = None) -> None:
    """Route stdlib and structlog output through one renderer; redact configured secrets everywhere, and
    `passwords` (and the environment's `*_PASSWORD`s) too, whose leading word alone does not read as one cut
    short. A warning is also relayed to the caller whose work logged it, if any (`gateway.observability.relay`).

    The lines go to stderr, or with `log_file` appended to that file (`gateway chat` with the bot loaded
    here, whose warnings, `llm.call_failed`, were printed between the prompts); a later call without it
    sends them to stderr again."""
    import os

    from gateway.observability.relay import RELAY, relay_structlog

    global _SECRET_PATTERNS, _SECRETS, _CUT_SECRET_START, _PASSWORDS
    env_passwords = [value.strip() for name, value in os.environ.items() if _PASSWORD_ENV_KEY.search(name)]
    _PASSWORDS = frozenset(passwords).union(env_passwords).difference(secrets)
    secrets = [*secrets, *passwords, *provider_env_secrets()]
    _SECRETS = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)
    _SECRET_PATTERNS = [re.compile(re.escape(s)) for s in _SECRETS]
    _CUT_SECRET_START = re.compile("|".join(sorted({re.escape(s[:CUT_SECRET_CHARS]) for s in _SECRETS}))) \
        if _SECRETS else None
    renderer = {"json": structlog.processors.JSONRenderer(), "cli": _cli_line}.get(fmt) \
        or structlog.dev.ConsoleRenderer(colors=False)
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # A traceback keeps its lines, but its exception's message may quote what others wrote too.
    shown_trace = [] if fmt == "json" else [_trace_obeyed_by_no_terminal]
    structlog.configure(
        processors=[relay_structlog, *shared, structlog.processors.format_exc_info, _redact, *shown_trace, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(output := _Output(_opened(log_file))),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(output)
    # Standard-library records (rag/, uvicorn, libraries) go through the same renderer, with their
    # `extra=` fields: a plain Formatter dropped them ("ingest.done" without its counts) and wrote
    # text lines into a JSON log.
    # The console prints a record's message as it is, and a library formats into it what others wrote (a
    # provider's answer): on one line, as its fields are (`_cli_line` does so for the whole line).
    one_line = [] if fmt in ("json", "cli") else [_event_on_one_line]
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder(), _drop_record_noise],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    _redact, *one_line, *shown_trace, renderer],
    ))
    handler.addFilter(_RedactFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler, RELAY]
    root.setLevel(level.upper())
    # twilio's client writes every request's headers at INFO: 8 lines a send, half of a busy log; at DEBUG,
    # markdown-it writes a line per parser rule and block of every reply rendered (20 for one sentence).
    # coredis (the rate limits' Redis client) writes each retry against a Redis that is down at INFO, 6 lines a
    # check, where `ratelimit.unavailable` says the outage once.
    for noisy in ("httpx", "httpcore", "litellm", "aiosqlite", "asyncio", "urllib3", "twilio", "markdown_it", "coredis"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # pypdf warns, without the file's name, about each broken structure it reads past; a PDF that
    # cannot be read is reported by the ingest with its name, and one that can is fine.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    # Alembic names each plugin it loads at INFO when the schema's revision is read: 7 lines before
    # `gateway forget`'s own answer. Its migration lines (alembic.runtime.migration) stay.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").addFilter(_FORCED_STOP)  # the same object: added once
    adopt_litellm_loggers()


LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def _cli_line(_logger, _name, event_dict) -> str:
    """`fmt="cli"`: `warning: <event> key=value …`, as a command prints its own notes (and as `gateway
    ingest` prints the warnings a server's ingest streams back); no timestamp, no logger name."""
    level, event = event_dict.pop("level", "info"), event_dict.pop("event", "")
    for meta in ("timestamp", "logger", "logger_name"):
        event_dict.pop(meta, None)
    trace = event_dict.pop("exception", None)
    line = " ".join([f"{level}: {event}", *(f"{key}={value}" for key, value in event_dict.items())])
    line = one_terminal_line(line)
    return f"{line}\n{trace}" if trace else line


# C0 and C1 control characters but the tab and the newline: an escape sequence (ESC, CSI) is a command to
# the terminal (OSC 52 writes the clipboard), and a carriage return overwrites what the line showed.
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f"
_TERMINAL_CONTROL = re.compile(f"[{_CONTROL}\n]")
_CONTROL_BUT_NEWLINE = re.compile(f"[{_CONTROL}]")


def one_terminal_line(text: str) -> str:
    """`text` as one line a terminal shows and obeys none of: each control character written out as an
    escape (`\\x1b`, `\\n`). A field may hold what others wrote (a sitemap's URL on another site): an
    escape sequence in it was a command to the reader's terminal, and a newline began a forged line."""
    return _TERMINAL_CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


TRACEBACK = "Traceback (most recent call last):\n"


def _event_on_one_line(_logger, _name, event_dict):
    if isinstance(event := event_dict.get("event"), str):
        if event.startswith(TRACEBACK) and "exception" not in event_dict:
            # uvicorn logs a failed start's traceback as a message: shown as a traceback, on its lines.
            event_dict["event"], event_dict["exception"] = TRACEBACK.strip(), event[len(TRACEBACK):].rstrip("\n")
        else:
            event_dict["event"] = one_terminal_line(event)
    return event_dict


def _trace_obeyed_by_no_terminal(_logger, _name, event_dict):
    if isinstance(trace := event_dict.get("exception"), str):
        event_dict["exception"] = _CONTROL_BUT_NEWLINE.sub(lambda m: repr(m.group())[1:-1], trace)
    return event_dict


def printable(text: object) -> str:
    """`text` as a terminal shows it and obeys none of it, its lines kept: control characters taken out
    (`gateway chat`: a reply quotes the knowledge base, and an operator writes what they like)."""
    return _CONTROL_BUT_NEWLINE.sub("", str(text))


def adopt_litellm_loggers() -> None:
    """Route LiteLLM's loggers through our handler only, at WARNING.

    Why: LiteLLM attaches a colored text handler to each of its loggers when it is imported, so every
    record came out twice, once as a raw text line inside a JSON log. Called by `configure_logging` and
    again where LiteLLM is imported (`gateway.llm`), whichever comes first."""
    for name in LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
        logger.setLevel(logging.WARNING)


def enable_langfuse(enabled: bool) -> bool:
    """Turn LiteLLM's Langfuse callback on (keys from LANGFUSE_* in the environment). Returns whether it is on."""
    import litellm

    for attr in ("success_callback", "failure_callback"):
        callbacks = [c for c in (getattr(litellm, attr, None) or []) if c != "langfuse"]
        if enabled:
            callbacks.append("langfuse")
        setattr(litellm, attr, callbacks)
    return enabled


def _opened(path: Path | str | None) -> TextIO | None:
    """The file at `path` opened to append the log lines to (its folder made), or None for stderr."""
    if path is None:
        return None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (open for the process's life)


class _Output:
    """Where the log lines go: `file`, else whatever `sys.stderr` is now (test capture and daemons swap it after
    configuration), not the one at configuration time."""

    def __init__(self, file: TextIO | None) -> None:
        self.file = file

    def write(self, text: str) -> int:
        return (self.file or sys.stderr).write(text)

    def flush(self) -> None:
        (self.file or sys.stderr).flush()


def redact(text: str) -> str:
    """Replace every configured secret in `text` with a marker, the password of any URL
    (`postgresql://billing:s3cret@db/…` in a tool's or a driver's exception) that is not configured (and
    the user of one with an empty password, `https://sk_live_…:@api…`, which is a key), and
    a phone number but its last 4 digits (`whatsapp:+…4567`: a WhatsApp chat, or Twilio's error text), and a
    Discord interaction's token in its follow-up's URL."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(REDACTED, text)
    text = _without_cut_secret(text)
    if "+" in text:  # logs hold ids, not phone numbers (docs/data.md); the conversation id names the chat
        text = _PHONE.sub(r"\1…\2", text)
    text = without_session_ids(text)
    if "/webhooks/" in text:  # a Discord interaction's token, in its follow-up's URL: posts as the bot
        text = _INTERACTION_TOKEN.sub(rf"\1{REDACTED}", text)
    return _URL_KEY_AS_USER.sub(rf"\1{REDACTED}\2", _URL_PASSWORD.sub(rf"\1{REDACTED}@", text)) if "://" in text else text


def _without_cut_secret(text: str) -> str:
    """`text` without the first part of a secret it ends with (before a `…`), left where a field was cut
    short inside the secret: that part no longer matched it. A text that is only such a part (the bot's id,
    which begins a Telegram token) was not cut, and is kept; so is a password's leading word alone (a line
    ending "connect to postgres", with a password `postgres-prod-…`), but not a cut past it (`postgres-pr`)."""
    body = text.removesuffix("…")
    # Most fields end in no secret's start: one search of the tail, not a look per secret (per field of every line).
    if _CUT_SECRET_START is None or _CUT_SECRET_START.search(body, max(0, len(body) - len(_SECRETS[0]))) is None:
        return text
    for secret in _SECRETS:
        start = body.rfind(secret[:CUT_SECRET_CHARS], max(0, len(body) - len(secret)))
        if start > 0 and secret.startswith(body[start:]) and not (secret in _PASSWORDS and body[start:].isalpha()):
            return body[:start] + REDACTED + text[len(body):]
    return text


def without_session_ids(text: str) -> str:
    """`text` with each web chat session id in a transcript path masked (`/v1/bots/acme/sessions/…/messages`):
    a session id is all it takes to read the conversation and write as the visitor (README: Tools)."""
    return _SESSION_PATH.sub(r"\1…", text) if "/sessions/" in text else text


_INTERACTION_TOKEN = re.compile(r"(/webhooks/\d+/)[A-Za-z0-9_.-]{20,}")  # not the gateway's /webhooks/{bot}/discord
_SESSION_PATH = re.compile(r"(/v1/bots/[^/\s]+/sessions/)[^/\s?#]+")
_URL_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")
# A key given as HTTP Basic's user with an empty password (`https://sk_live_…:@api…`, as Stripe documents it).
_URL_KEY_AS_USER = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s:/@]+(:@)")
_PHONE = re.compile(r"(?<![\w+])(\+)\d{3,11}(\d{4})(?!\d)")  # E.164: "+" and 7-15 digits


def _redact(_logger, _name, event_dict):
    for key, value in list(event_dict.items()):
        event_dict[key] = _redacted(value)
    return event_dict


def _redacted(value, depth: int = 0):
    """`value` with `redact` applied to every text in it: a field may be a list or a dict of texts too
    (`ingest.done`'s `errors`, "<url>: answered 503"), which the renderer prints whole."""
    if isinstance(value, str):
        return redact(value)
    if depth >= 20:  # deeper than any field we log: a rendering of it, redacted as text
        return redact(repr(value))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_redacted(item, depth + 1) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {key: _redacted(item, depth + 1) for key, item in value.items()}
    return value


# Attributes libraries set on every record, not fields of the line: uvicorn's ANSI-coloured copy of
# the message, and LiteLLM's marker object.
_RECORD_NOISE = frozenset({"color_message", "litellm_redacted", IN_RUN_ERRORS, SKIPPED_FILES})  # those two are for filters


def _drop_record_noise(_logger, _name, event_dict):
    for key in _RECORD_NOISE & event_dict.keys():
        del event_dict[key]
    return event_dict


def record_fields(record: logging.LogRecord) -> dict:
    """A stdlib record's `extra=` fields, as the log line shows them beside its event (`ExtraAdder`,
    without the attributes libraries set on every record)."""
    fields = structlog.stdlib.ExtraAdder()(None, "", {"_record": record})
    fields.pop("_record")
    return _drop_record_noise(None, "", fields)


class _RedactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = ()
        return True


class _ForcedStopFilter(logging.Filter):
    """A second Ctrl-C makes uvicorn skip the lifespan's shutdown, and asyncio then cancels it: Starlette sent
    that traceback as `lifespan.shutdown.failed`, which uvicorn logged at error after gateway.stopped. One line."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg).rstrip()
        if text.startswith("Traceback") and text.endswith("CancelledError"):
            record.msg, record.args, record.exc_info, record.exc_text = (
                "stopped at once (a second Ctrl-C or signal): the graceful stop was cut short", (), None, None)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_FORCED_STOP = _ForcedStopFilter()
