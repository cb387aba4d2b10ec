"""Where a stopping process is stuck: once its close has taken longer than a stop
should, every thread's Python stack goes to stderr (the server's log), and again each
interval until the process is gone. A worker that will not exit is otherwise silent
until granian kills it; with this, the log names the call it waits in."""

from __future__ import annotations

import faulthandler
import sys

STOP_STACKS_AFTER_S = 20.0


def dump_stacks_if_stop_stalls(after_s: float = STOP_STACKS_AFTER_S) -> None:
    """From now until the process exits, dump every thread's stack each `after_s` seconds
    (faulthandler's watchdog runs in C, so it reports even while the main thread blocks
    holding the GIL)."""
    faulthandler.dump_traceback_later(after_s, repeat=True, file=sys.stderr)
