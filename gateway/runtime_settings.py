"""The gateway's own settings beside its bots: operators, the worker, model calls and tracing."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from gateway.channel_settings import _Strict

SLACK_MEMBER_ID = re.compile(r"[UW][A-Z0-9]{2,}")


class OperatorSettings(_Strict):
    """A human operator: a bearer token, and the bots they may serve (`*` for all)."""

    name: str
    token: str
    # No default: an operator whose `bots` was left out served every bot. `["*"]` says so, written out.
    bots: list[str] = Field(default_factory=list)
    # Who this operator is in Slack: only these members may act in the operator channel of a bot they serve.
    slack_user_ids: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _named(cls, name: str) -> str:
        """The name is who claimed, replied and resolved in every escalation's history."""
        if not name.strip():
            raise ValueError("is empty; give the operator a name (an unset ${VAR}?)")
        return name

    @field_validator("token")
    @classmethod
    def _stripped(cls, token: str) -> str:
        """Without surrounding white space, as a sign-in reads the token it is sent: a secret file's
        trailing newline made a token no sign-in could match (and one two operators shared look unique)."""
        return token.strip()

    @field_validator("slack_user_ids", mode="before")
    @classmethod
    def _member_ids(cls, ids: object) -> object:
        """Slack member ids, as Slack sends them in a click's `user.id`: a name or a mention never matches."""
        if not isinstance(ids, list):
            raise ValueError(f"a list of Slack member ids, as [U0123ABCD] (got {ids!r:.40})")
        for member in ids:
            if not isinstance(member, str) or not SLACK_MEMBER_ID.fullmatch(member.strip()):
                raise ValueError(f"{member!r} is not a Slack member id (U or W then capital letters and digits, "
                                 "as U0123ABCD: a member's profile, ⋮, Copy member ID)")
        return [member.strip() for member in ids]


class WorkerSettings(_Strict):
    """The in-process worker. A dead worker's conversations are taken over after `lease_seconds`."""

    lease_seconds: float = Field(default=30.0, ge=1.0)
    concurrency: int = Field(default=8, ge=1, le=256)
    poll_interval: float = Field(default=1.0, gt=0.0)
    reply_timeout: float = Field(default=60.0, gt=0.0)
    # A turn still running after this many seconds is stopped and handed to a person (`replies.failure`).
    turn_timeout: float = Field(default=180.0, gt=0.0)
    # A customer's messages this close together are one question, answered once (gateway/burst.py). 0: off.
    burst_seconds: float = Field(default=1.5, ge=0.0, le=10.0)


class LLMSettings(_Strict):
    """Timeouts and retries of every model call (see `gateway.llm_retry.RetryPolicy`)."""

    timeout: float = Field(default=60.0, gt=0.0)
    num_retries: int = Field(default=2, ge=0, le=10)
    backoff_base: float = Field(default=0.5, ge=0.0)
    backoff_max: float = Field(default=8.0, ge=0.0)
    # After a model failed every attempt of a call (timeouts, 429, 5xx), calls in the next this many
    # seconds start at the next model of their chain instead of waiting out its retries again. 0: off.
    cooldown_seconds: float = Field(default=30.0, ge=0.0)


class TracingSettings(_Strict):
    """Optional OpenTelemetry export (gateway/observability/otel.py); off while `otlp_endpoint` is unset."""

    otlp_endpoint: str | None = None
    service_name: str = "bot-gateway"
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)

    @field_validator("otlp_endpoint")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        """The exporter posts to it as is: a typo ("localhost:4317", "htp://…") loaded, and every batch of
        spans then failed in the background, with tracing seemingly on."""
        if value is None or not value.strip():
            return None  # `${VAR}` left unset: tracing off
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL with a host: give the OTLP/HTTP collector's, "
                             "as http://otel-collector:4318/v1/traces")
        return value
