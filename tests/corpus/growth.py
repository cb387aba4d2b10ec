"""How a function's CPU time grows with its input: the check every complexity test uses.

The time of `run(make(n))` is taken at n, 2n, 4n and 8n, as thread CPU time (another
process busy on the machine does not count), the least of a few repeats. Linear work
gives t(8n)/t(n) about 8, quadratic about 64: a ratio under `MAX_RATIO` passes. `n`
first doubles until t(n) is at least `MIN_SECONDS`, so that timer noise and fixed
costs do not decide the ratio.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

MAX_RATIO = 24.0
MIN_SECONDS = 0.005
REPEATS = 3
ATTEMPTS = 3
# Inputs stop growing here (work that stays under MIN_SECONDS is bounded, not linear).
MAX_N = 1 << 21


def cpu_seconds(run: Callable[[Any], Any], value: Any, repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        run(value)
        best = min(best, time.thread_time() - started)
    return best


def growth(
    run: Callable[[Any], Any],
    make: Callable[[int], Any],
    n: int,
    max_n: int | None = None,
) -> tuple[int, list[float]]:
    """(the n used, CPU seconds at n, 2n, 4n, 8n). `max_n` caps the doubling of n."""
    cap = MAX_N if max_n is None else max_n
    while n * 2 <= cap and cpu_seconds(run, make(n), repeats=2) < MIN_SECONDS:
        n *= 2
    return n, [cpu_seconds(run, make(n * k)) for k in (1, 2, 4, 8)]


def assert_linear(
    run: Callable[[Any], Any],
    make: Callable[[int], Any],
    n: int,
    max_n: int | None = None,
    max_ratio: float = MAX_RATIO,
    attempts: int = ATTEMPTS,
) -> None:
    """Fails when t(8n)/t(n) is `max_ratio` or more in each of `attempts` measurements:
    a busy machine may spoil one (cache and memory bandwidth are shared), while
    superlinear work fails every time."""
    message = ""
    for _ in range(attempts):
        used, times = growth(run, make, n, max_n)
        ratio = times[3] / max(times[0], 1e-9)
        if ratio < max_ratio or times[3] < MIN_SECONDS:  # under 2 ms at 8n: bounded work
            return
        shown = ", ".join(f"{1000 * t:.2f}" for t in times)
        message = f"t(8n)/t(n) = {ratio:.1f} at n={used} (ms: {shown})"
    raise AssertionError(message)


def swallow(fn: Callable[[Any], Any], *errors: type[BaseException]) -> Callable[[Any], Any]:
    """`fn` with `errors` caught: the time of a refusal counts like any other."""

    def run(value: Any) -> Any:
        try:
            return fn(value)
        except errors:
            return None

    return run
