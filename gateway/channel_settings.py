"""Per-channel settings: what each channel (web, Telegram, Slack, Discord, WhatsApp) is configured with."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_ED25519_HEX = re.compile(r"[0-9a-fA-F]{64}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChannelBase(_Strict):
    """Settings shared by every channel."""

    enabled: bool = True
    api_base: str | None = None
    respond_in_groups: Literal["mention", "always"] = "mention"
    greeting: str | None = None
    # Show the reply while it is generated, by editing a message (channels that can edit: Telegram,
    # Slack, Discord). See gateway/streaming.py.
    stream: bool = False


class WebChannel(ChannelBase):
    """The built-in web chat and widget."""

    max_message_chars: int = 4000
    # Messages one client address may send to this bot's web chat per minute (None: no limit). The
    # web chat's contact is a session id the caller picks, so a per-contact limit alone bounds nobody.
    per_address_per_minute: int | None = Field(default=60, ge=1)


class TelegramChannel(ChannelBase):
    token: str = ""
    webhook_secret: str = ""
    mode: Literal["webhook", "polling"] = "webhook"


class SlackChannel(ChannelBase):
    bot_token: str = ""
    signing_secret: str = ""
    app_token: str | None = None
    operator_channel: str | None = None


class DiscordChannel(ChannelBase):
    token: str = ""
    public_key: str | None = None
    gateway_url: str | None = None

    @field_validator("public_key")
    @classmethod
    def _ed25519_hex(cls, value: str | None) -> str | None:
        # The adapter decodes it at start; a typo would otherwise crash `serve` there.
        if value and not _ED25519_HEX.fullmatch(value):
            raise ValueError("an Ed25519 public key is 64 hex characters (the application's Public Key "
                             "in the Discord developer portal)")
        return value


class WhatsAppChannel(ChannelBase):
    account_sid: str = ""
    auth_token: str = ""
    from_number: str = ""
    public_url: str = ""
    content_sid: str | None = None


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
        for channel, keys in self._REQUIRED.items():
            cfg = getattr(self, channel)
            if cfg is None or not cfg.enabled:
                continue
            for key in keys:
                if not getattr(cfg, key):
                    raise ValueError(f"{channel}.{key} is required when {channel} is enabled (set it from the environment)")
        # Telegram sends the secret with every webhook update; without one every update gets 401.
        telegram = self.telegram
        if telegram is not None and telegram.enabled and telegram.mode == "webhook" and not telegram.webhook_secret:
            raise ValueError("telegram.webhook_secret is required when telegram is enabled in webhook mode "
                             "(set it from the environment, or use mode: polling)")
        return self

