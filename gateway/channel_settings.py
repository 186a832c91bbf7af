"""Per-channel settings: what each channel (web, Telegram, Slack, Discord, WhatsApp) is configured with."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.config_file import SECRET_KEYS, secret_values

_CHANNEL_SECRETS_NEEDED: ContextVar[bool] = ContextVar("channel_secrets_needed", default=True)


@contextmanager
def without_channel_secrets() -> Iterator[None]:
    """Settings loaded inside need no channel secret (`slack.bot_token`, `telegram.token`, …): for `forget`, which
    uses no channel and refused on a deploy box without them (`db upgrade` reads `database_url` alone)."""
    token = _CHANNEL_SECRETS_NEEDED.set(False)
    try:
        yield
    finally:
        _CHANNEL_SECRETS_NEEDED.reset(token)


def secrets_allowed_empty(bots: list[Any]) -> set[str]:
    """Paths of the secrets production lets be empty: a polling bot's webhook secret, which Telegram is never sent,
    and every channel's secrets under `without_channel_secrets`."""
    allowed = {f"bots[{i}].channels.telegram.webhook_secret" for i, bot in enumerate(bots)
               if bot.channels.telegram and bot.channels.telegram.mode == "polling"}
    if not _CHANNEL_SECRETS_NEEDED.get():
        allowed |= {path for i, bot in enumerate(bots)
                    for path, _ in secret_values(bot.channels.model_dump(), f"bots[{i}].channels")}
    return allowed

_ED25519_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TELEGRAM_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what setWebhook's secret_token accepts


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChannelBase(_Strict):
    """Settings shared by every channel."""

    enabled: bool = True
    api_base: str | None = None
    respond_in_groups: Literal["mention", "always"] = "mention"
    greeting: str | None = None
    # Show the reply while it is generated, by editing a message (channels that can edit: Telegram,
    # Slack, Discord). See gateway/delivery/streaming.py.
    stream: bool = False

    @field_validator("api_base")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        """A typo here loaded, and then every send failed with the SDK's own error about a URL."""
        if value is not None and not value.strip():
            return None  # `${VAR}` left unset: the platform's own API root
        if value is not None:
            parts = urlsplit(value.strip())
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{value!r} is not an http(s) URL with a host: give the platform's API root, "
                                 "as https://api.telegram.org")
        return value


class WebChannel(ChannelBase):
    """The built-in web chat and widget."""

    max_message_chars: int = Field(default=4000, ge=1)  # 0 refused every message with 413
    # Messages one client address may send to this bot's web chat per minute (None: no limit). The
    # web chat's contact is a session id the caller picks, so a per-contact limit alone bounds nobody.
    per_address_per_minute: int | None = Field(default=60, ge=1)
    # The shortest session id the web chat takes (gateway.models.weak_session_id): a guessable one (`me-1`)
    # would let anyone read that visitor's transcript and write as them. None: no rule beyond CLIENT_ID (the
    # contract sets none; README recommends models.SESSION_ID_MIN_LENGTH, 16, where clients use random ids).
    # At most 36: the widget's own ids ('web-' and 32 hex digits); above, every widget request would be a 422.
    min_session_id_length: int | None = Field(default=None, ge=1, le=36)
    # Reads of a session's answers a minute (transcript GETs, retries of a stored message_id), per session and
    # per client address (None: no limit). The widget polls every 3 s, 20 a minute a tab: far below either.
    transcript_per_session_per_minute: int | None = Field(default=120, ge=1)
    transcript_per_address_per_minute: int | None = Field(default=600, ge=1)

    @property
    def session_id_min_length(self) -> int:
        """`min_session_id_length`, else 1: any id CLIENT_ID takes."""
        return self.min_session_id_length or 1


class TelegramChannel(ChannelBase):
    token: str = ""
    webhook_secret: str = ""
    mode: Literal["webhook", "polling"] = "webhook"

    @field_validator("webhook_secret")
    @classmethod
    def _telegram_accepts_it(cls, value: str) -> str:
        # Telegram refuses any other secret at setWebhook; `serve` would start and then get no update.
        if value and not _TELEGRAM_SECRET.fullmatch(value):
            raise ValueError("1-256 characters of A-Z, a-z, 0-9, _ and - (what Telegram accepts as a secret_token)")
        return value


class SlackChannel(ChannelBase):
    bot_token: str = ""
    signing_secret: str = ""
    app_token: str | None = None
    operator_channel: str | None = None

    @property
    def web_api_base(self) -> str:
        """The Web API's base URL as slack_sdk wants it: it appends the method name verbatim, so the slash matters."""
        return (self.api_base or "https://slack.com/api/").rstrip("/") + "/"


class DiscordChannel(ChannelBase):
    token: str = ""
    public_key: str | None = None
    gateway_url: str | None = None

    @field_validator("public_key", mode="before")
    @classmethod
    def _ed25519_hex(cls, value: object) -> object:
        # The adapter decodes it at start; a typo would otherwise crash `serve` there.
        if isinstance(value, int) and not isinstance(value, bool):  # all digits, unquoted: YAML read a number
            raise ValueError("write the key in quotes: YAML reads a key of only digits as a number")
        if isinstance(value, str) and value and not _ED25519_HEX.fullmatch(value):
            raise ValueError("an Ed25519 public key is 64 hex characters (the application's Public Key "
                             "in the Discord developer portal)")
        return value


class WhatsAppChannel(ChannelBase):
    account_sid: str = ""
    auth_token: str = ""
    from_number: str = ""
    public_url: str = ""
    content_sid: str | None = None

    @field_validator("public_url")
    @classmethod
    def _public_base_url(cls, value: str) -> str:
        # Twilio signs the URL it posted to, and the adapter rebuilds that URL as public_url +
        # /webhooks/{bot}/whatsapp: a URL without its scheme, or the webhook's own URL, makes every
        # signature fail later, each one a 401 and a warning.
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL: give the gateway's public base URL, "
                             "such as https://gw.example.com")
        if "/webhooks/" in f"{parts.path}/" or parts.query or parts.fragment:
            raise ValueError(f"{value!r} is the webhook's URL: give the gateway's public base URL "
                             "(https://gw.example.com); /webhooks/{bot}/whatsapp is added to it")
        return value


class ChannelsSettings(_Strict):
    web: WebChannel | None = Field(default_factory=WebChannel)
    telegram: TelegramChannel | None = None
    slack: SlackChannel | None = None
    discord: DiscordChannel | None = None
    whatsapp: WhatsAppChannel | None = None

    _REQUIRED = {
        "telegram": ("token",),
        "slack": ("bot_token", "signing_secret"),
        "discord": ("token",),
        "whatsapp": ("account_sid", "auth_token", "from_number", "public_url"),
    }

    @model_validator(mode="after")
    def _secrets_present(self) -> "ChannelsSettings":
        if not _CHANNEL_SECRETS_NEEDED.get():
            return self
        for channel, keys in self._REQUIRED.items():
            cfg = getattr(self, channel)
            if cfg is None or not cfg.enabled:
                continue
            for key in keys:
                if not getattr(cfg, key):
                    # Only a secret must come from the environment: a phone number or a URL may be written here.
                    hint = f" (write it as {env_name(channel, key)} and set that variable)" if key in SECRET_KEYS else ""
                    raise ValueError(f"{channel}.{key} is required when {channel} is enabled{hint}")
        # Telegram sends the secret with every webhook update; without one every update gets 401.
        telegram = self.telegram
        if telegram is not None and telegram.enabled and telegram.mode == "webhook" and not telegram.webhook_secret:
            raise ValueError("telegram.webhook_secret is required when telegram is enabled in webhook mode "
                             f"(write it as {env_name('telegram', 'webhook_secret')} and set that variable, "
                             "or use mode: polling)")
        return self


# The names README's examples use where `CHANNEL_KEY` is not the one (Twilio's own, a token the platform calls a bot's).
_EXAMPLE_ENV_NAMES = {("telegram", "token"): "TELEGRAM_BOT_TOKEN", ("discord", "token"): "DISCORD_BOT_TOKEN",
                      ("whatsapp", "auth_token"): "TWILIO_AUTH_TOKEN", ("whatsapp", "account_sid"): "TWILIO_ACCOUNT_SID"}


def env_name(channel: str, key: str) -> str:
    """The `${VAR}` a missing secret's hint suggests (`${TELEGRAM_WEBHOOK_SECRET}`), as README's examples name it."""
    return "${" + _EXAMPLE_ENV_NAMES.get((channel, key), f"{channel}_{key}".upper()) + "}"
