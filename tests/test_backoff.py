"""The shared backoff curve: first wait, doubling, capped."""

from types import SimpleNamespace

import discord
import pytest

from channels import discord_errors, discord_followups
from gateway.backoff import asked_wait, doubling
from gateway.errors import ChannelSendError


def test_doubling_starts_at_first_doubles_and_stops_at_the_cap():
    assert [doubling(n, first=0.5, cap=5.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_doubling_without_a_cap_keeps_doubling():
    assert doubling(11, first=1) == 1024


@pytest.mark.parametrize("asked, read", [
    ("2.5", 2.5), (3, 3.0), (0, 0.0),
    (None, 1.0), ("", 1.0), ("soon", 1.0), ("-4", 1.0), ("inf", 1.0), ("nan", 1.0), (float("nan"), 1.0),
    pytest.param(10 ** 400, 1.0, id="int-past-a-float"),  # a JSON integer of 401 digits: float() raised
])
def test_an_asked_for_wait_is_a_finite_number_of_seconds_or_the_default(asked, read):
    assert asked_wait(asked) == read


@pytest.mark.parametrize("data, headers", [
    ({"retry_after": float("nan")}, {}),  # JSON's NaN, which json.loads accepts
    ({}, {"Retry-After": "inf"}),
    ({"retry_after": "soon"}, {}),
    pytest.param({"retry_after": 10 ** 400}, {}, id="int-past-a-float"),  # json.loads' int: float() raised
])
def test_a_discord_follow_up_429_naming_no_finite_wait_waits_one_second(data, headers):
    # "inf" waited for ever and NaN slipped past every `waited + retry_after > max` check into sleep().
    assert discord_followups._retry_after(data, headers) == 1.0


@pytest.mark.parametrize("header", ["nan", "inf", "soon"])
def test_a_discord_429_naming_no_finite_wait_is_a_rate_limit_of_one_second(header):
    # translate() read Retry-After with float() alone: "soon" raised ValueError out of the send (an adapter
    # error, the reply failed for good), and "nan" reached the outbox, whose timedelta(seconds=nan) raised.
    response = SimpleNamespace(status=429, reason="Too Many Requests", headers={"Retry-After": header})
    error = discord_errors.translate(discord.HTTPException(response, "You are being rate limited."))
    assert isinstance(error, ChannelSendError) and error.rate_limited and error.retry_after == 1.0
