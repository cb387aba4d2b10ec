"""CPU per request of the app in-process, keys off beside keys on, over the scripted engine.

    python -m perf app-cpu [--stream] [--tokens 16] [--concurrency 64] [--requests 640]
        [--lines TOP]

No sockets and no granian: `perf.micro.asgi.post` calls the ASGI app directly, so the
figure is Litestar and our code (keys on: the key, its limits and the usage rows; the
commits themselves run in the usage writer's child process, whose CPU is not
counted). Both apps (`perf.harness.scripted_app.create`, the frontend ceiling's) run
in this one process and take turns round after round, so that a neighbour's load falls
on both alike; the minimum and the median over the rounds are printed, per request, of the
process's CPU time and of the event loop's thread alone.

With `--lines`, one more round of each app runs under a line tracer: the Python lines
executed per request (and the functions that differ most between keys off and keys
on). Unlike the CPU time, the count does not move with a neighbour's load: it tells
whether a change to the request path did less work, run to run, on any machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from perf.micro.asgi import post

URL = "/v1/chat/completions"


@dataclass
class Figures:
    process_us: list[float] = field(default_factory=list)
    loop_thread_us: list[float] = field(default_factory=list)

    def line(self, name: str) -> str:
        p, t = self.process_us, self.loop_thread_us
        return (
            f"{name}: process CPU {min(p):.0f} us/request (median {statistics.median(p):.0f}), "
            f"event-loop thread {min(t):.0f} (median {statistics.median(t):.0f})"
        )


async def _round(
    app: Any, body: bytes, headers: list[tuple[bytes, bytes]], clients: int, each: int
) -> tuple[float, float]:
    async def client() -> None:
        for _ in range(each):
            status, parts = await post(app, URL, body, headers)
            if status != 200:
                raise RuntimeError(f"status {status}: {b''.join(parts)[:200]!r}")

    cpu0, thread0 = time.process_time(), time.thread_time()
    await asyncio.gather(*(client() for _ in range(clients)))
    count = clients * each
    return 1e6 * (time.process_time() - cpu0) / count, 1e6 * (time.thread_time() - thread0) / count


async def _traced_round(
    app: Any, body: bytes, headers: list[tuple[bytes, bytes]], clients: int, each: int
) -> collections.Counter[str]:
    """Python lines executed (and calls made) by function name over one round, per
    request, in every thread."""
    lines: collections.Counter[str] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event in ("line", "call"):
            code = frame.f_code
            lines["/".join(code.co_filename.rsplit("/", 2)[-2:]) + ":" + code.co_name] += 1
        return tracer

    sys.settrace(tracer)
    threading.settrace(tracer)
    try:
        await _round(app, body, headers, clients, each)
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]  # None ends tracing
    count = clients * each
    return collections.Counter({name: value / count for name, value in lines.items()})


def lines_table(off: collections.Counter[str], on: collections.Counter[str], top: int) -> str:
    """Lines per request of each side, then the functions that differ most."""
    rows = [f"Python lines per request: keys off {off.total():.0f}, keys on {on.total():.0f}"]
    rows.append(f"keys on / keys off: {on.total() / off.total():.3f}")
    names = sorted(set(off) | set(on), key=lambda name: -abs(on[name] - off[name]))
    rows += [f"  {on[name] - off[name]:+7.1f}  {name}" for name in names[:top]]
    return "\n".join(rows)


async def measure(args: argparse.Namespace, keys_env: dict[str, str]) -> dict[str, Figures]:
    from perf.harness.scripted_app import create
    from perf.load import frontend_ceiling

    off = create()
    os.environ.update(keys_env)
    on = create()
    secret = frontend_ceiling.AUTHORIZATION.split(": ", 1)[1].strip()
    keyed = [(b"authorization", secret.encode())]
    request = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": args.tokens,
        "ignore_eos": True,
        "stream": args.stream,
    }
    body = json.dumps(request).encode()
    each = max(1, args.requests // args.concurrency)
    figures = {"keys off": Figures(), "keys on": Figures()}
    async with off.lifespan(), on.lifespan():
        for app, headers in ((off, []), (on, keyed)):  # warm-up
            await _round(app, body, headers, args.concurrency, 2)
        for _ in range(args.rounds):
            for name, app, headers in (("keys off", off, []), ("keys on", on, keyed)):
                process_us, thread_us = await _round(app, body, headers, args.concurrency, each)
                figures[name].process_us.append(process_us)
                figures[name].loop_thread_us.append(thread_us)
        if args.lines:
            traced = [
                await _traced_round(app, body, headers, args.concurrency, each)
                for app, headers in ((off, []), (on, keyed))
            ]
            print(lines_table(*traced, top=args.lines))
    return figures


def main(argv: list[str] | None = None) -> int:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per request")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=640, help="requests per round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--lines",
        type=int,
        default=0,
        metavar="TOP",
        help="count the Python lines run per request, and list the TOP functions that differ",
    )
    args = parser.parse_args(argv)
    from perf.load import frontend_ceiling

    logging.disable(logging.WARNING)
    keys_env = frontend_ceiling._keys_env()  # the keys database and its key, made first
    figures = uvloop.run(measure(args, keys_env))
    off, on = figures["keys off"], figures["keys on"]
    kind = f"{'streamed' if args.stream else 'non-streamed'}, {args.tokens} tokens"
    print(f"{kind}, {args.concurrency} clients, load average {os.getloadavg()[0]:.2f}")
    print(off.line("keys off"))
    print(on.line("keys on"))
    ratio = min(on.process_us) / min(off.process_us)
    median = statistics.median(on.process_us) / statistics.median(off.process_us)
    print(f"keys on / keys off: {ratio:.3f} (minimum), {median:.3f} (median)")
    return 0
