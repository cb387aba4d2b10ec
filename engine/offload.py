"""CPU work of a request off the event loop, in a bounded pool of its own.

Rendering templates, tokenizing, checking and bounding JSON schemas and building
grammars take from microseconds to seconds depending on the request. On the event
loop they would stall every stream and /health meanwhile, so they run here. The pool
is not the default executor: the GPU probe (which must notice the owner coming back
on time) runs there, and image decoding has a pool of its own (app.services.images.service).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

# Two threads: the work is mostly Python (GIL-bound), so more threads would only add
# contention; two let a short request pass a long one.
CPU_WORKERS = 2

P = ParamSpec("P")
T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=CPU_WORKERS, thread_name_prefix="lilac-cpu")


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in the request-work pool, with the caller's context."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)
