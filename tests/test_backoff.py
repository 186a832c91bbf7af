"""The shared backoff curve: first wait, doubling, capped."""

from gateway.backoff import doubling


def test_doubling_starts_at_first_doubles_and_stops_at_the_cap():
    assert [doubling(n, first=0.5, cap=5.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_doubling_without_a_cap_keeps_doubling():
    assert doubling(11, first=1) == 1024
