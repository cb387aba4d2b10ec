"""The line count of `python -m perf app-cpu --lines`: per request, by function, in
every thread, and the table of what differs."""

from __future__ import annotations

import collections
from typing import Any

from perf.micro.app_cpu import _traced_round, lines_table


def _answer() -> int:
    total = 0
    for step in range(3):  # three lines of a loop body, and the loop's own line
        total += step
    return total


async def tiny_app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    _answer()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def test_a_traced_round_counts_the_lines_of_each_request() -> None:
    lines = await _traced_round(tiny_app, b"{}", [], clients=4, each=5)
    answer = next(count for name, count in lines.items() if name.endswith(":_answer"))
    # A call, the first assignment, 4 loop headers, 3 loop bodies, the return: per request.
    assert answer == 10
    assert any(name.endswith("test_app_cpu.py:tiny_app") for name in lines)


def test_the_table_gives_both_totals_their_ratio_and_the_largest_differences() -> None:
    off = collections.Counter({"app/a.py:f": 100.0, "app/b.py:g": 50.0})
    on = collections.Counter({"app/a.py:f": 100.0, "app/b.py:g": 60.0, "app/c.py:h": 30.0})
    table = lines_table(off, on, top=2).splitlines()
    assert table[0] == "Python lines per request: keys off 150, keys on 190"
    assert table[1] == "keys on / keys off: 1.267"
    assert table[2:] == ["    +30.0  app/c.py:h", "    +10.0  app/b.py:g"]
