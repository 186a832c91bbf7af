"""OutageLog: the first failure and one a period are logged, a flapping service is one outage, its end once."""

from __future__ import annotations

from gateway.observability import outage as outage_module
from gateway.observability.outage import OutageLog


def test_one_line_a_period_and_the_end_once(monkeypatch) -> None:
    clock = iter([0.0, 1.0, 30.0, 61.0, 62.0, 63.0, 64.0, 65.0, 66.0])
    monkeypatch.setattr(outage_module.time, "monotonic", lambda: next(clock))
    outage = OutageLog(every_s=60.0)
    assert [outage.failed(), outage.failed(), outage.failed(), outage.failed()] == [True, False, False, True]
    assert outage.recovered() == 62.0 and outage.recovered() is None
    assert outage.failed() is False  # flapping: within a minute of the last line, not a new outage's line
    assert outage.recovered() is None  # nor a "back" line for it
