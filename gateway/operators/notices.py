"""What the customer is told around a handoff: the acknowledgement and, off hours, when to expect a reply."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from gateway.settings import BusinessHours, EscalationSettings, RepliesSettings

_ENGLISH = RepliesSettings()
DAY_NAMES = tuple(_ENGLISH.day_names)


def _clock(value: str) -> time:
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))


def is_open(hours: BusinessHours, now: datetime) -> bool:
    """True when `now` falls inside the configured working hours."""
    local = now.astimezone(ZoneInfo(hours.timezone))
    start, end, clock = _clock(hours.start), _clock(hours.end), local.time()
    if start <= end:
        return local.weekday() in hours.days and start <= clock < end
    # An overnight shift (22:00–06:00) belongs to the day it starts on.
    if clock >= start:
        return local.weekday() in hours.days
    return clock < end and (local.weekday() - 1) % 7 in hours.days


def next_opening(hours: BusinessHours, now: datetime) -> datetime:
    """The next moment operators start work, in the business's time zone."""
    zone = ZoneInfo(hours.timezone)
    local = now.astimezone(zone)
    start = _clock(hours.start)
    for offset in range(8):
        day = (local + timedelta(days=offset)).date()
        candidate = datetime.combine(day, start, tzinfo=zone)
        if day.weekday() in hours.days and candidate > local:
            return candidate
    return datetime.combine(local.date() + timedelta(days=1), start, tzinfo=zone)


def after_hours_message(hours: BusinessHours, now: datetime, replies: RepliesSettings = _ENGLISH) -> str:
    """An honest note on when a person will reply, e.g. 'Monday at 09:00 (Europe/Berlin)', in the
    bot's words (`replies.after_hours`)."""
    opening = next_opening(hours, now)
    local_today = now.astimezone(ZoneInfo(hours.timezone)).date()
    if opening.date() == local_today:
        day = replies.today
    elif opening.date() == local_today + timedelta(days=1):
        day = replies.tomorrow
    else:
        day = replies.day_names[opening.weekday()]
    return replies.after_hours.format(start=hours.start, end=hours.end, timezone=hours.timezone, day=day,
                                      time=f"{opening:%H:%M}")


def acknowledgement_extras(settings: EscalationSettings, *, already_acknowledged: bool, now: datetime,
                           replies: RepliesSettings = _ENGLISH) -> list[str]:
    """Messages to add on escalation: the acknowledgement unless already given, and the off-hours note."""
    extras = [] if already_acknowledged else [settings.acknowledgement]
    if settings.business_hours is not None and not is_open(settings.business_hours, now):
        extras.append(after_hours_message(settings.business_hours, now, replies))
    return extras
