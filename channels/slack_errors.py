"""What a Slack Web API error from a send says: whose fault, and whether trying again can help."""

from __future__ import annotations

import asyncio
import socket

from slack_sdk.errors import SlackApiError

from gateway.backoff import asked_wait

# The recipient (a channel, a member) cannot be reached: the reply fails for this conversation only.
UNREACHABLE = {
    "channel_not_found", "not_in_channel", "is_archived", "user_not_found",
    "user_disabled", "cannot_dm_bot", "restricted_action", "team_access_not_granted", "ekm_access_denied",
}
# Our own token refused, whoever the recipient: `account_inactive` is "the token is for a deleted user or
# workspace" (an app removed, a workspace closed), so it was blamed on each customer in turn while no
# reply could reach anyone.
TOKEN_REFUSED = {"account_inactive", "token_revoked", "invalid_auth", "not_authed", "token_expired"}
TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}


def token_refused(method: str, error: str) -> str:
    """Why no reply can be posted, for /readyz: the token is refused whatever the recipient."""
    return (f"{error} from {method}: Slack refuses this bot's token (app uninstalled, workspace or app deactivated); "
            "no reply can be posted until a working bot_token is configured")


def rate_limit_wait(exc: SlackApiError) -> float | None:
    """The seconds Slack asks to wait (`Retry-After`, 1 when it names none or no finite number ≥ 0) when `exc` is a rate limit; else None."""
    data = exc.response.data if isinstance(exc.response.data, dict) else {}
    if exc.response.status_code != 429 and data.get("error") != "ratelimited":
        return None
    return asked_wait(exc.response.headers.get("Retry-After"))


def auth_test_error(exc: Exception, api_base: str = "") -> str:
    """auth.test's failure in one line: the SDK's own was two, and did not say which token was refused."""
    if not isinstance(exc, SlackApiError):
        return f"cannot reach Slack at {api_base} (api_base) for auth.test: {unreached_cause(exc)}"
    error = exc.response.get("error")
    if error in TOKEN_REFUSED:
        return f"Slack refused the bot_token (xoxb-…): {error} from auth.test"
    return f"auth.test failed: {error} (HTTP {exc.response.status_code})"


def unreached_cause(exc: BaseException | None) -> str:
    """Why no answer came, in the words of `llm.call_failed`'s `failure`: the exception's text named no cause."""
    os_error = getattr(exc, "os_error", None)
    if exc is None:
        return "connection failed"
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    if isinstance(os_error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(os_error, socket.gaierror):
        return "host not found"
    return f"connection failed ({type(exc).__name__})"
