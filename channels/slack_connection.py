"""The Slack channel's long-lived side: auth.test at start (the bot's identity), Socket Mode opened and
opened again after Slack was unreachable, what `/readyz` says of them, and the stop. A mixin of `SlackAdapter`,
whose attributes it uses (`channels.slack`)."""

from __future__ import annotations

import asyncio

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError

from channels.base import Deliver
from channels.slack_errors import TOKEN_REFUSED, auth_test_error, token_refused
from channels.slack_install import missing_scopes
from channels.slack_socket import open_socket_mode as _open_socket_mode
from gateway.background import cancel
from gateway.backoff import doubling
from gateway.errors import ChannelSendError

# Same logger name as the adapter: these events are the Slack channel's, wherever the code lives.
log = structlog.get_logger("channels.slack")


class SlackConnection:
    """`SlackAdapter.start`, `stop` and `connection_status`."""

    # ---- long-lived connection ---------------------------------------------------------------

    async def start(self, deliver: Deliver) -> None:
        """Learn the bot's user id; with an app token, also open Socket Mode and deliver its events."""
        try:
            identity = await self.client.auth_test()
        except (SlackApiError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("slack.auth_test_failed", bot=self.bot, error=auth_test_error(exc, self.api_base))
            if isinstance(exc, SlackApiError) and exc.response.get("error") in TOKEN_REFUSED:  # in /readyz from the start
                self._uninstalled = token_refused("auth.test", exc.response.get("error"))
            elif not isinstance(exc, SlackApiError):  # a wrong api_base, no network: in /readyz too, not healthy
                self._unreached = auth_test_error(exc, self.api_base)[:200]
        else:
            self.bot_user_id = identity.get("user_id")
            self.team_id = identity.get("team_id")
            self._enterprise = (identity.get("enterprise_id"), bool(identity.get("is_enterprise_install")))
            for scope, effect in missing_scopes(identity.headers, operators=bool(self.settings.operator_channel)).items():
                log.warning("slack.missing_scope", bot=self.bot, scope=scope, effect=effect)
        if not self.settings.app_token:
            return
        try:
            self._socket = await _open_socket_mode(self, deliver)
        except ChannelSendError as exc:
            if exc.permanent:  # a rejected app token: no retry fixes it
                raise
            # Slack unreachable at start: opened again in the background, as Discord's login is, so a blip
            # at boot does not leave the channel deaf until a restart (/readyz's `connections` says so meanwhile).
            self._socket_failed(exc, failures=1)
            self._socket_task = asyncio.create_task(self._reopen_socket(deliver), name=f"slack-socket:{self.bot}")
        else:
            self._unreached = None  # Socket Mode opened: Slack is reachable

    def _socket_failed(self, exc: ChannelSendError, *, failures: int) -> None:
        self._socket_problem = f"connecting again after {exc}"[:200]
        log.warning("slack.socket_mode_failed", bot=self.bot, error=str(exc)[:200], failures=failures)

    async def _reopen_socket(self, deliver: Deliver) -> None:
        failures = 1
        while True:
            await self._sleep(doubling(failures, first=2.0, cap=60.0))
            try:
                self._socket = await _open_socket_mode(self, deliver)
            except ChannelSendError as exc:
                if exc.permanent:
                    self._socket_problem = f"stopped: {exc}"[:200]
                    log.error("slack.socket_mode_stopped", bot=self.bot, error=self._socket_problem)
                    return
                failures += 1
                self._socket_failed(exc, failures=failures)
            else:
                self._socket_problem = self._unreached = None
                return

    @property
    def connection_status(self) -> str | None:
        """Socket Mode, for `/readyz` (None without an app token: the Events API holds no connection)."""
        if self._uninstalled is not None:
            return self._uninstalled
        if self.settings.app_token and self._socket_problem is not None:
            return self._socket_problem
        if self._unreached is not None:  # auth.test at start; Events API too
            return self._unreached
        if not self.settings.app_token:
            return None
        return "connected" if self._socket is not None else "not started"

    async def stop(self) -> None:
        """Close Socket Mode, if open."""
        if self._socket_task is not None:
            await cancel([self._socket_task])
            self._socket_task = None
        if self._socket is not None:
            await self._socket.close()
            self._socket = None

