"""Lending windows: the times of the week when the owner lets us use the GPU at all.

Written as comma-separated windows, each `[DAYS] HH:MM-HH:MM`, in one time zone:

    mon-fri 19:00-07:00, sat-sun 00:00-24:00

DAYS is a day (`mon`), a range (`mon-fri`, wrapping allowed: `fri-mon`) or a list
(`sat+sun`); without DAYS a window applies every day. A window whose end is not after
its start runs past midnight and belongs to the day it starts on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MINUTES_PER_DAY = 24 * 60


@dataclass(frozen=True, slots=True)
class Window:
    days: frozenset[int]  # 0 = Monday
    start_min: int
    end_min: int  # may be <= start_min: the window runs into the next day

    def contains(self, weekday: int, minute: int) -> bool:
        if self.start_min < self.end_min:
            return weekday in self.days and self.start_min <= minute < self.end_min
        # Past midnight: the evening part today, or the morning part of yesterday's window.
        yesterday = (weekday - 1) % 7
        return (weekday in self.days and minute >= self.start_min) or (
            yesterday in self.days and minute < self.end_min
        )


@dataclass(frozen=True, slots=True)
class LendingWindows:
    windows: tuple[Window, ...]
    timezone: str = "UTC"

    def is_open(self, wall_time: float) -> bool:
        local = datetime.fromtimestamp(wall_time, ZoneInfo(self.timezone))
        minute = local.hour * 60 + local.minute
        return any(w.contains(local.weekday(), minute) for w in self.windows)


def parse_windows(text: str, timezone: str = "UTC") -> LendingWindows:
    ZoneInfo(timezone)  # fail at start-up on a misspelt zone, not at the first sample
    windows = tuple(_window(part.strip()) for part in text.split(",") if part.strip())
    if not windows:
        raise ValueError("no lending window given")
    return LendingWindows(windows, timezone)


def _window(text: str) -> Window:
    fields = text.lower().split()
    if len(fields) == 1:
        days, span = frozenset(range(7)), fields[0]
    elif len(fields) == 2:
        days, span = _days(fields[0]), fields[1]
    else:
        raise ValueError(f"lending window {text!r}: expected `[DAYS] HH:MM-HH:MM`")
    start, sep, end = span.partition("-")
    if not sep:
        raise ValueError(f"lending window {text!r}: expected HH:MM-HH:MM")
    return Window(days, _minute(start), _minute(end))


def _days(text: str) -> frozenset[int]:
    result: set[int] = set()
    for item in text.split("+"):
        first, sep, last = item.partition("-")
        a = _day(first)
        b = _day(last) if sep else a
        result.update((a + k) % 7 for k in range((b - a) % 7 + 1))
    return frozenset(result)


def _day(text: str) -> int:
    try:
        return DAYS.index(text[:3])
    except ValueError:
        raise ValueError(f"unknown day {text!r}: use mon, tue, ... sun") from None


def _minute(text: str) -> int:
    hours, sep, minutes = text.partition(":")
    try:
        value = int(hours) * 60 + (int(minutes) if sep else 0)
    except ValueError:
        raise ValueError(f"bad time {text!r}: expected HH:MM") from None
    if not 0 <= value <= MINUTES_PER_DAY:
        raise ValueError(f"bad time {text!r}: expected 00:00 to 24:00")
    return value
