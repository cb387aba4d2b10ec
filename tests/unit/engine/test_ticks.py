"""Periodic work sleeps to ticks of one grid, so timers of periods that divide each
other fall on the same instants (one wake-up of the process for all of them)."""

from __future__ import annotations

import asyncio

import pytest

from engine.ticks import sleep_to_tick, tick_delay, until_tick


@pytest.mark.parametrize(
    ("period", "now", "delay"),
    [
        (1.0, 12.3, 0.7),
        (1.0, 12.0, 1.0),  # on a tick: the next one, never zero
        (0.1, 12.345, 0.055),
        (0.5, 3.999, 0.001),
        (0.0001, 5.0, 0.001),  # under a millisecond: one
    ],
)
def test_the_delay_ends_on_the_next_multiple_of_the_period(
    period: float, now: float, delay: float
) -> None:
    assert until_tick(period, now) == pytest.approx(delay, abs=1e-9)


def test_periods_that_divide_each_other_share_their_ticks() -> None:
    for now in (0.0, 7.123, 1234.999, 98765.4321):
        tenth, second = now + until_tick(0.1, now), now + until_tick(1.0, now)
        # The second's tick is one of the tenth's: the tenth's ticks up to it include it.
        ticks, at = [], now
        while at < second - 1e-9:
            at += until_tick(0.1, at)
            ticks.append(round(at, 3))
        assert round(second, 3) in ticks
        assert tenth <= second


async def test_sleeping_to_a_tick_wakes_at_or_after_it() -> None:
    loop = asyncio.get_running_loop()
    target = loop.time() + tick_delay(0.05)
    await sleep_to_tick(0.05)
    assert loop.time() >= target - 0.001  # the loop's timers may round to a millisecond
