"""Cron expressions as people write them (five fields, crontab(5)), made into APScheduler triggers.

APScheduler 3's `CronTrigger.from_crontab` reads the day-of-week field its own way: 0 is Monday and
7 is refused, where crontab has 0 and 7 for Sunday and 1 for Monday. So "0 9 * * 1" ran on Tuesdays.
That field is read here, numbers and names alike, and handed over as a list of day names: a range
of names counts from Sunday too ("sun-thu"), which APScheduler refused as running backwards. Times
are in the scheduler's timezone, UTC.
"""

from __future__ import annotations

import datetime as dt

from apscheduler.triggers.cron import CronTrigger

DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab's 0-6; 7 is Sunday again
NICKNAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
             "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
"""crontab(5)'s shorthands, each the five fields it stands for."""


def cron_trigger(expression: str, *, timezone: str = "UTC") -> CronTrigger:
    """The trigger for a five-field cron expression (or a crontab nickname such as `@daily`); ValueError
    saying what is wrong with it."""
    nickname = expression.strip().lower()
    if nickname == "@reboot":
        raise ValueError("not a schedule here (`serve` ingests at start a bot whose index is empty, and `make run` "
                         "ingests before it serves); give a time, such as @daily or 0 3 * * *")
    fields = cron_fields(expression)
    if len(fields) != 5:
        raise ValueError(f"5 fields are needed (minute hour day month weekday), got {len(fields)}")
    minute, hour, day, month, weekday = fields
    if day != "*" and weekday != "*":
        # crontab runs when either matches, APScheduler only when both do: refuse rather than guess.
        raise ValueError("give a day of the month or a day of the week, not both (cron would run on "
                         "either, this scheduler only on days that are both)")
    trigger = CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=_weekdays(weekday),
                          timezone=timezone)
    if trigger.get_next_fire_time(None, dt.datetime.now(dt.timezone.utc)) is None:
        raise ValueError("it never runs (no such date)")
    return trigger


def cron_fields(expression: str) -> list[str]:
    """The fields `expression` is written in, or those its nickname stands for (`@Daily` → 0 0 * * *)."""
    return NICKNAMES.get(expression.strip().lower(), expression).split()


def checked_cron(expression: str) -> str:
    """`expression`, if it makes a trigger; for a config validator (ValueError naming the expression)."""
    try:
        cron_trigger(expression)
    except ValueError as exc:
        raise ValueError(f"bad cron expression {expression!r}: {exc}") from None
    return expression


def _weekdays(field: str) -> str:
    """crontab's day-of-week field in day names: "1-5" → "mon,tue,wed,thu,fri", "0,7" and "sun" → "sun",
    "sun-tue" → "sun,mon,tue"."""
    if field == "*":
        return field
    days: set[int] = set()
    for item in field.split(","):
        span, _, step = item.partition("/")
        if span == "*":
            first, last = 0, 6
        else:
            start, _, end = span.partition("-")
            first = _day(start)
            last = _day(end) if end else (7 if step else first)
        if last < first:
            raise ValueError(f"day-of-week range {span!r} runs backwards")
        if step and not (step.isdigit() and int(step) > 0):
            raise ValueError(f"bad step {step!r} in the day-of-week field")
        days.update(n % 7 for n in range(first, last + 1, int(step) if step else 1))
    return ",".join(DAY_NAMES[d] for d in sorted(days))


def _day(token: str) -> int:
    token = token.strip().lower()
    if token.isdigit() and int(token) <= 7:
        return int(token)
    if token in DAY_NAMES:
        return DAY_NAMES.index(token)
    raise ValueError(f"{token!r} is not a day of the week (0-7, Sunday being 0 and 7, or sun-sat)")
