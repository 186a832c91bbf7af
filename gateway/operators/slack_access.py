"""Who may act in a bot's Slack operator channel.

A Slack member may claim, resolve or reply there only when an operator of the config names their member
id in `slack_user_ids`, serves the bot, and has a token (an operator whose token is unset is disabled,
in Slack too). Before, anyone who could post in the channel acted as an operator: a guest, an integration
user, a colleague from sales. A channel no operator is mapped to is closed: every click is refused.
A mapped member acts as their operator (holds, replies and resolves under the operator's name), as in
the web console.
"""

from __future__ import annotations

import structlog

from gateway.operators.slack_text import mention
from gateway.settings import OperatorSettings, Settings

log = structlog.get_logger("gateway.operators.slack")


def _acts_for(op: OperatorSettings, bot: str) -> bool:
    return bool(op.token) and ("*" in op.bots or bot in op.bots)


def operator_of_member(settings: Settings, bot: str, member: str) -> str | None:
    """The configured operator the Slack member `member` is for `bot`, or None when they may not act."""
    for op in settings.operators:
        if member in op.slack_user_ids and _acts_for(op, bot):
            return op.name
    return None


def mention_of(settings: Settings, operator: str) -> str:
    """An operator as a Slack mention, which notifies them: a configured operator by their first mapped
    member, a claim from before the mapping (`slack:U…`) by its id; anyone else by name."""
    member = next((op.slack_user_ids[0] for op in settings.operators if op.name == operator and op.slack_user_ids),
                  None)
    return f"<@{member}>" if member else mention(operator)


def not_an_operator(settings: Settings, bot: str, member: str) -> str:
    """What the refused member reads (an ephemeral message only they see): why, what to ask for, and their id.
    A member no operator names has no operator whose `slack_user_ids` an admin could extend."""
    refused = f"You are not an operator for this bot ({bot}), so nothing was changed or sent."
    index, mapped = next(((i, op) for i, op in enumerate(settings.operators) if member in op.slack_user_ids),
                         (None, None))
    if mapped is None:
        return (f"{refused} No operator in the gateway's config names your Slack member id {member}. To act "
                f"here, ask an admin to add it to the `slack_user_ids` of an operator who serves this bot and "
                "has a token.")
    missing = [] if "*" in mapped.bots or bot in mapped.bots else [f"to serve this bot (add {bot} to its `bots`)"]
    # The variable its token references, as `operator.disabled` names it: what the admin has to set.
    missing += [] if mapped.token else [f"a token ({settings.empty_secret_reason(f'operators[{index}].token')})"]
    return (f"{refused} Your Slack member id {member} is operator {mapped.name}'s, which would need "
            f"{' and '.join(missing)}: ask an admin to change that in the gateway's config.")


def _has_operator_channel(bot) -> bool:
    slack = bot.channels.slack
    return slack is not None and slack.enabled and bool(slack.operator_channel)


def unguarded_operator_channels(settings: Settings) -> dict[str, str]:
    """Bot → operator channel, for each Slack operator channel no enabled operator may act in."""
    unguarded: dict[str, str] = {}
    for bot in settings.bots:
        if not _has_operator_channel(bot):
            continue
        if not any(op.slack_user_ids and _acts_for(op, bot.name) for op in settings.operators):
            unguarded[bot.name] = bot.channels.slack.operator_channel
    return unguarded


NO_OPERATORS = ("no operator who serves this bot (and has a token) names a Slack member id: every click and thread "
                "reply in its operator channel is refused")
NO_OPERATORS_FIX = "add `slack_user_ids: [U0123ABCD]` (each person's Slack member id) to the operators who serve this bot"


def operator_channel_status(settings: Settings) -> dict[str, str]:
    """Bot → "ok", or why its Slack operator channel refuses everyone, for each bot that has one (`/readyz`:
    a channel that refuses every operator is a misconfiguration, not a reason to stop taking messages)."""
    unguarded = unguarded_operator_channels(settings)
    return {bot.name: f"refuses everyone: {NO_OPERATORS}; {NO_OPERATORS_FIX}" if bot.name in unguarded else "ok"
            for bot in settings.bots if _has_operator_channel(bot)}


def unguarded_notes(settings: Settings) -> list[str]:
    """One line per operator channel that refuses everyone, for a command that prints notes (`chat`)."""
    return [f"bot {bot!r}, Slack operator channel {channel}: {NO_OPERATORS}; {NO_OPERATORS_FIX}"
            for bot, channel in unguarded_operator_channels(settings).items()]


def warn_unguarded(settings: Settings) -> None:
    """At start: say which operator channels refuse every click and reply, and what to add to open them."""
    for bot, channel in unguarded_operator_channels(settings).items():
        log.error("slack_operator.no_operators", bot=bot, channel=channel, reason=NO_OPERATORS, fix=NO_OPERATORS_FIX)
