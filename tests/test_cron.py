"""Cron expressions read as crontab(5) reads them (review: "0 9 * * 1" ran on Tuesdays)."""

from __future__ import annotations

import datetime as dt

import pytest

from gateway.cron import cron_trigger
from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config

WEDNESDAY = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)


def _next_days(expression: str, count: int = 7) -> list[str]:
    trigger, at, days = cron_trigger(expression), WEDNESDAY, []
    for _ in range(count):
        at = trigger.get_next_fire_time(None, at + dt.timedelta(minutes=1))
        days.append(at.strftime("%a"))
    return days


@pytest.mark.parametrize("weekday, days", [
    ("1", {"Mon"}), ("0", {"Sun"}), ("7", {"Sun"}), ("0,7", {"Sun"}),
    ("1-5", {"Mon", "Tue", "Wed", "Thu", "Fri"}), ("mon-fri", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
    ("5-7", {"Fri", "Sat", "Sun"}), ("*/2", {"Sun", "Tue", "Thu", "Sat"}), ("SUN", {"Sun"}),
    # Names count from Sunday too: APScheduler counts from Monday, so it refused "sun-thu" as backwards.
    ("sun-thu", {"Sun", "Mon", "Tue", "Wed", "Thu"}), ("Sun-Sat", {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}),
    ("sat,sun-mon", {"Sat", "Sun", "Mon"}),
])
def test_the_day_of_week_field_means_what_crontab_says(weekday, days):
    assert set(_next_days(f"0 9 * * {weekday}")) == days


def test_cron_trigger_fires_at_the_written_time_in_utc():
    assert cron_trigger("30 9 * * *").get_next_fire_time(None, WEDNESDAY) == WEDNESDAY.replace(day=3, hour=9, minute=30)


@pytest.mark.parametrize("expression, words", [
    ("0 0 31 2 *", "never runs"),
    ("0 0 1 * 1", "not both"),
    ("0 9 * * 8", "not a day of the week"),
    ("0 9 * * 5-1", "runs backwards"),
    ("0 9 * * fri-mon", "runs backwards"),
    ("0 9 * *", "5 fields"),
])
def test_a_schedule_that_would_never_run_or_run_otherwise_than_written_is_a_config_error(tmp_path, expression,
                                                                                         words):
    bot = {"name": "b", "sources": [{"name": "s", "type": "directory", "path": "docs", "schedule": expression}]}
    with pytest.raises(ConfigError) as info:
        load_settings(write_config(tmp_path, bots=[bot]))
    assert info.value.key == "bots[0].sources[0].schedule" and words in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_settings(write_config(tmp_path, bots=[], retention_schedule=expression))
    assert info.value.key == "retention_schedule" and words in str(info.value)


@pytest.mark.parametrize("nickname, same_as", [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
    ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@DAILY", "0 0 * * *"),
])
def test_cron_trigger_reads_crontabs_nicknames(nickname, same_as):
    """crontab(5)'s `@daily` was "5 fields are needed …, got 1", though the README says schedules are read
    as crontab reads them."""
    fires = [cron_trigger(e).get_next_fire_time(None, WEDNESDAY) for e in (nickname, same_as)]
    assert fires[0] == fires[1]


def test_cron_reboot_is_refused_with_what_runs_at_start_instead(tmp_path):
    bots = [{"name": "acme", "channels": {"web": {}},
             "sources": [{"name": "kb", "type": "directory", "path": str(tmp_path), "schedule": "@reboot"}]}]
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path, bots=bots))
    assert str(caught.value) == ("bots[0].sources[0].schedule: bad cron expression '@reboot': not a schedule here "
                                 "(`serve` ingests at start a bot whose index is empty, and `make run` ingests "
                                 "before it serves); give a time, such as @daily or 0 3 * * *")
