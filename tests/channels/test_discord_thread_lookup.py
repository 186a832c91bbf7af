"""ThreadLookup's memory of the channels it may not look up: bounded, the oldest refusal forgotten first."""

from __future__ import annotations

from types import SimpleNamespace

import discord

from channels.discord_inbound import ThreadLookup


class _Refusing:
    """A client for which Discord refuses every channel look-up (403), counting the look-ups by channel."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def fetch_channel(self, channel_id: int) -> None:
        self.asked.append(channel_id)
        raise discord.Forbidden(SimpleNamespace(status=403, reason="Forbidden"), {"message": "Missing Access",
                                                                                  "code": 50001})


def _in(channel_id: int) -> SimpleNamespace:
    return SimpleNamespace(channel=discord.PartialMessageable(state=None, id=channel_id, guild_id=1))


async def test_the_refusals_remembered_are_bounded_and_the_oldest_goes_first(monkeypatch):
    # 9044776 promised "1,000 channels at most, the oldest dropped first", and no test held it: with no bound,
    # a bot in many unreadable threads kept one entry each; dropping the newest, it asked again at once.
    monkeypatch.setattr("channels.discord_inbound._FAILED_MAX", 2)
    client = _Refusing()
    lookup = ThreadLookup(client)  # type: ignore[arg-type]
    for channel_id in (1, 2, 2, 3):  # the second message in 2 is not asked about: its refusal is remembered
        assert await lookup.in_thread(_in(channel_id)) is False
    assert client.asked == [1, 2, 3] and len(lookup._failed) == 2
    for channel_id in (2, 3, 1):
        await lookup.in_thread(_in(channel_id))
    assert client.asked == [1, 2, 3, 1]  # 2 and 3 still remembered; 1, the oldest, dropped to make room for 3
