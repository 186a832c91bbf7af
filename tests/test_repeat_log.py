"""RepeatLog: a repeated event's first ones are logged, then one count a period, per key."""

from __future__ import annotations

from gateway.observability import repeats
from gateway.observability.repeats import RepeatLog


def test_the_first_ones_then_one_count_a_period_per_key(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr(repeats.time, "monotonic", lambda: now[0])
    log = RepeatLog(burst=2, every_s=60.0)
    seen = []
    for second in range(0, 130):  # one a second for over two minutes
        now[0] = float(second)
        seen.append(log.seen(("acme", "telegram")))
    assert seen[:2] == [(True, 0), (True, 0)] and seen[2] == (False, 0)
    assert [(i, s) for i, s in enumerate(seen) if s[1]] == [(60, (False, 59)), (120, (False, 60))]
    assert log.seen(("acme", "slack")) == (True, 0)  # another channel's run of its own
    now[0] = 500.0  # quiet for more than a period: a new run, and the last run's tail told with it
    assert log.seen(("acme", "telegram")) == (True, 9)
