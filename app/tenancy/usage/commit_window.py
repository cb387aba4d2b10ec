"""When the usage writer's next group commit starts.

A commit's fixed cost (SQLite's `synchronous=FULL` fsync, a few hundred microseconds of
kernel CPU in this process) is paid once per commit, however many rows it holds. Rows
that arrive one at a time (one request ending every millisecond, from many clients)
would each get a commit of their own. So, while other metered requests are running and
rows arrive faster than one per window, the writer holds a batch open for up to
`WINDOW_S` after its first row, and every request that ends meanwhile joins it: at most
one commit per window, whatever the request rate.

The batch starts at once, without waiting out the window, when no metered request is
left running (nobody else could join: a lone client never waits) or the batch is full.
A row is still durable before its response's last byte: the window only decides when
the commit starts, and every request waits for the commit that holds its row.

"Running" is counted from admission, so requests that granian has not yet handed to
the event loop, or that are still being read and checked, do not count. When the loop
is the bottleneck and each request's generation is quick, that count reads 0 at nearly
every commit while dozens of requests wait their turn: each commit then held one row,
and the commits' fixed cost halved what a core served. Rows that arrived while the
previous commit ran show what the count misses (a lone client's next row cannot come
before its last commit ends), so such a batch is held for the window too, and is not
ended early by the count reaching 0.
"""

from __future__ import annotations

import asyncio
import time

# The longest a row waits for others to join its commit (added at most once to a
# response's last byte, and only while other metered requests run).
WINDOW_S = 0.02
# A batch this large starts at once: past it, a commit's fixed cost is a small share.
BATCH_ROWS = 64
# The weight of the newest gap between rows in their running average (the last few
# gaps count: after a pause, the third row of a burst is held again).
GAP_WEIGHT = 0.5


class CommitWindow:
    """Counts the metered requests running and times the rows; `hold` waits for a batch
    to fill (or returns at once when waiting would gain nothing)."""

    __slots__ = (
        "_committing",
        "_first_at",
        "_full",
        "_gap_s",
        "_last_at",
        "_overlapped",
        "_pending",
        "open",
        "window_s",
    )

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.open = 0  # metered requests admitted whose row is not queued yet
        self._pending = 0  # rows queued for the next commit
        # The running average of the time between rows (each gap counted at most four
        # windows, so that a pause ends quickly): from 0, the first burst shares commits.
        self._gap_s = 0.0
        self._last_at = 0.0
        self._first_at = 0.0  # when the oldest queued row arrived
        self._full: asyncio.Future[None] | None = None  # resolved to end `hold` early
        self._committing = False  # a commit is under way
        self._overlapped = False  # a queued row arrived while the last commit ran

    def opened(self) -> None:
        """A metered request was admitted: its row will come."""
        self.open += 1

    def closed(self) -> None:
        """A metered request ended (its row, if any, is queued)."""
        self.open -= 1
        if self.open <= 0:
            self.open = 0
            if not self._overlapped:
                self._release()

    def arrived(self) -> None:
        """A row was queued."""
        now = time.monotonic()
        gap = min(now - self._last_at, 4 * self.window_s)
        self._gap_s += (gap - self._gap_s) * GAP_WEIGHT
        self._last_at = now
        if not self._pending:
            self._first_at = now
        if self._committing:
            self._overlapped = True
        self._pending += 1
        if self._pending >= BATCH_ROWS:
            self._release()

    def taken(self) -> None:
        """The queued rows went into a commit, which starts now."""
        self._pending = 0
        self._committing = True
        self._overlapped = False

    def committed(self) -> None:
        """The commit `taken` started has ended."""
        self._committing = False

    def release(self) -> None:
        """End any `hold` now (the writer is closing)."""
        self._release()

    def _release(self) -> None:
        full = self._full
        if full is not None and not full.done():
            full.set_result(None)

    def _worth_holding(self) -> bool:
        return (
            (self.open > 0 or self._overlapped)
            and 0 < self._pending < BATCH_ROWS
            and self._gap_s < self.window_s
            and self.window_s > 0
        )

    async def hold(self) -> None:
        """Return when the queued rows should be committed: once the window since the
        first of them has passed, no metered request is left running or the batch is
        full; at once when no row is likely to join within the window."""
        if not self._worth_holding():
            return
        delay = self._first_at + self.window_s - time.monotonic()
        if delay <= 0:
            return
        loop = asyncio.get_running_loop()
        full = self._full = loop.create_future()
        timer = loop.call_later(delay, self._release)
        try:
            await full
        finally:
            timer.cancel()
            self._full = None
