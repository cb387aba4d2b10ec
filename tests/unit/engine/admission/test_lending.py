from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from engine.admission.lending import parse_windows


def at(text: str, zone: str = "UTC") -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def test_overnight_weekday_window_and_whole_weekend() -> None:
    windows = parse_windows("mon-fri 19:00-07:00, sat+sun 00:00-24:00")
    assert windows.is_open(at("2026-03-02 19:00"))  # Monday evening
    assert windows.is_open(at("2026-03-03 06:59"))  # Tuesday morning, Monday's window
    assert not windows.is_open(at("2026-03-03 07:00"))
    assert not windows.is_open(at("2026-03-03 12:00"))
    assert windows.is_open(at("2026-03-07 12:00"))  # Saturday
    # Saturday 06:00 is open anyway; Monday 06:00 belongs to Sunday, which has no
    # overnight window, and Monday's own window starts at 19:00.
    assert not windows.is_open(at("2026-03-02 06:00"))


def test_time_zone_shifts_the_window() -> None:
    windows = parse_windows("09:00-17:00", "America/New_York")
    assert windows.is_open(at("2026-06-01 10:00", "America/New_York"))
    assert not windows.is_open(at("2026-06-01 10:00", "UTC"))  # 06:00 in New York


def test_wrapping_day_range() -> None:
    windows = parse_windows("fri-mon 10:00-11:00")
    assert windows.is_open(at("2026-03-08 10:30"))  # Sunday
    assert not windows.is_open(at("2026-03-04 10:30"))  # Wednesday


@pytest.mark.parametrize("text", ["", "mon 25:00-26:00", "funday 10:00-11:00", "10-11-12"])
def test_bad_windows(text: str) -> None:
    with pytest.raises(ValueError):
        parse_windows(text)


def test_unknown_time_zone() -> None:
    with pytest.raises(KeyError):
        parse_windows("10:00-11:00", "Mars/Olympus")
