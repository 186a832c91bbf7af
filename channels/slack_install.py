"""What a Slack installation can do: the scopes its bot token holds, the workspace it answers in, and
whether it is still installed. Pure: read from auth.test's answer and from event envelopes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Scopes the bot token should hold, and what goes wrong without each. Only `chat:write` is needed to
# answer; the history scopes let a post whose answer was lost (a timeout) be found instead of repeated.
SCOPE_EFFECTS = {
    "chat:write": "no reply can be posted",
    "channels:history": "a reply or operator header in a public channel whose post timed out may be posted twice",
    "groups:history": "the same in private channels",
    "im:history": "the same in direct messages",
}
# Only for a bot with an `operator_channel`: its operators' names (gateway/operators/slack_names.py).
OPERATOR_SCOPE_EFFECTS = {"users:read": "the operator console shows Slack operators by their member id, not their name"}


def missing_scopes(headers: Mapping[str, Any], *, operators: bool = False) -> dict[str, str]:
    """`SCOPE_EFFECTS` entries the token lacks (and `OPERATOR_SCOPE_EFFECTS`' with `operators`), read from
    Slack's `x-oauth-scopes` response header; none when the header is absent (a proxy dropped it, or another
    token type): unknown is not missing."""
    header = next((str(value) for name, value in headers.items() if name.lower() == "x-oauth-scopes"), "")
    granted = {scope.strip() for scope in header.split(",") if scope.strip()}
    needed = SCOPE_EFFECTS | (OPERATOR_SCOPE_EFFECTS if operators else {})
    return {scope: effect for scope, effect in needed.items() if granted and scope not in granted}


def foreign_workspace(body: dict[str, Any], *, team_id: str | None, enterprise_id: str | None = None,
                      enterprise_install: bool = False) -> str | None:
    """The workspace of an event that the bot token (of `team_id`, from auth.test) cannot answer, or None.

    Slack sends the events of every workspace an app is installed in to its one Request URL (or socket),
    all signed with the app's one secret; a reply posted there with this workspace's token fails with
    `channel_not_found`, after the model was paid to write it. The envelope's `authorizations` names the
    installation the event is for. Unknown is not foreign: no team learned yet, no authorizations, or a
    channel shared with another organisation (Slack then lists only one of the installations that see it)."""
    authorizations = [a for a in body.get("authorizations") or () if isinstance(a, dict)]
    if not team_id or not authorizations or body.get("is_ext_shared_channel"):
        return None
    for authorization in authorizations:
        if authorization.get("team_id") == team_id:
            return None
        if enterprise_install and enterprise_id and authorization.get("enterprise_id") == enterprise_id:
            return None  # an org-wide installation's token answers in every workspace of the organisation
    return str(authorizations[0].get("team_id") or authorizations[0].get("enterprise_id") or body.get("team_id") or "?")


def token_gone(body: dict[str, Any], *, bot_user_id: str | None, team_id: str | None = None,
               enterprise_id: str | None = None, enterprise_install: bool = False) -> str | None:
    """Why no reply can be posted any more, for an `app_uninstalled` event or a `tokens_revoked` that names
    the bot user (or any bot token while the bot user is unknown); else None. Not for another workspace's
    installation: these events come without `authorizations` (none is left), so `foreign_workspace` lets
    them through, and an app removed from a second workspace said this token was gone."""
    if _another_installation(body, team_id=team_id, enterprise_id=enterprise_id, enterprise_install=enterprise_install):
        return None
    event = body.get("event") or {}
    kind = event.get("type")
    revoked = {str(user) for user in ((event.get("tokens") or {}).get("bot") or ())}
    if kind == "app_uninstalled" or (kind == "tokens_revoked" and revoked and (not bot_user_id or bot_user_id in revoked)):
        return (f"{kind} in workspace {body.get('team_id') or '?'}: no reply can be posted until the app is "
                "installed again and its new bot_token configured")
    return None


def _another_installation(body: dict[str, Any], *, team_id: str | None, enterprise_id: str | None,
                          enterprise_install: bool) -> bool:
    """Whether the envelope's own `team_id` (or, for an org-wide token, `enterprise_id`) is another
    installation's than the token's; unknown on either side is not another."""
    if enterprise_install and enterprise_id:
        return bool(body.get("enterprise_id")) and body.get("enterprise_id") != enterprise_id
    return bool(team_id and body.get("team_id")) and body.get("team_id") != team_id
