"""The engine's own process: `python -m engine.remote.child MAIN_FD SYNC_FD`.

It builds the engine the first frame names (`Boot`), runs it on its own event loop and
serves the HTTP process (engine.remote.client) over two local sockets: MAIN_FD carries
generations, their outputs and the host's async methods; SYNC_FD answers `tokenize` and
`detokenize`, which the protocol has synchronous, from a thread of its own. The engine's
Prometheus series (vLLM's `vllm:` ones) live in this process's registry; a `Call` reads
them (`engine_exposition`) when the HTTP process's `/metrics` is scraped.

Outputs are not sent one by one: each request's task adds its outputs and counts to a
pending batch, and the first addition of a loop turn schedules one flush at the end of
that turn (`call_soon`), so one engine step's outputs for every request leave as one
frame. SIGTERM and SIGINT are the HTTP process's to act on: this process and the
engine's own lead a process group of their own, which a signal to the server's group
does not reach; the HTTP process drains, then asks this one to shut down; when the
HTTP process goes away however it goes, this one shuts its engine down and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import pickle
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import msgspec
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from engine.protocol import Engine, GenerateOutput, GenerateRequest
from engine.remote.frames import (
    Abort,
    Batch,
    Boot,
    Call,
    Entry,
    ErrorInfo,
    FrameReader,
    Generate,
    Reply,
    Status,
    ToChild,
    error_info,
    frame,
    recv_frame,
)

log = logging.getLogger("lilac.engine")

STATUS_INTERVAL_S = 1.0  # how often the engine's health is compared with what was sent
SHUTDOWN_TIMEOUT_S = 60.0
HOST_CALLS = frozenset(
    {"start", "shutdown", "pause", "resume", "release_memory", "reacquire_memory", "abort"}
)
EXPOSITION = "metrics_exposition"  # the call that reads the engine's series
# The families of this process's default registry that are the engine's: vLLM's stat
# logger keeps its series there. The rest (prometheus_client's process and Python
# collectors) describe this process, and the HTTP process exports its own under the
# same names.
EXPORTED_PREFIX = "vllm:"


class _EngineSeries(Collector):
    def collect(self) -> Iterator[Metric]:
        for family in REGISTRY.collect():
            if family.name.startswith(EXPORTED_PREFIX):
                yield family


def engine_exposition() -> str:
    """The engine's series, as Prometheus text, for the HTTP process's `/metrics`."""
    return generate_latest(_EngineSeries()).decode()


class _Slot:
    """One request's news since the last flush."""

    __slots__ = ("accepted", "ended", "error", "generated", "outputs")

    def __init__(self) -> None:
        self.outputs: list[GenerateOutput] = []
        self.accepted = -1
        self.generated = 0
        self.ended = False
        self.error: ErrorInfo | None = None


class _Tally:
    """The engine's counts for one request, sent with its next entry."""

    __slots__ = ("_rid", "_server")

    def __init__(self, server: ChildServer, rid: int) -> None:
        self._server = server
        self._rid = rid

    def accepted(self, prompt_tokens: int) -> None:
        self._server.slot(self._rid).accepted = prompt_tokens

    def generated(self, tokens: int) -> None:
        self._server.slot(self._rid).generated += tokens


class ChildServer(asyncio.Protocol):
    """Serves one engine to the HTTP process over the main socket."""

    def __init__(self, engine: Engine, done: asyncio.Future[None]) -> None:
        self.engine = engine
        self._done = done
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader(self._on_frame)
        self._decoder = msgspec.msgpack.Decoder(ToChild)
        self._encoder = msgspec.msgpack.Encoder()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._pending: dict[int, _Slot] = {}
        self._flush_scheduled = False
        self._status: Status | None = None
        self._loop = asyncio.get_running_loop()

    # -- the socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if not self._done.done():
            self._done.set_result(None)  # the HTTP process went away: stop (main)

    def _send(self, message: Any) -> None:
        if self._transport is not None:
            self._transport.write(frame(self._encoder.encode(message)))

    def _on_frame(self, data: memoryview) -> None:
        message = self._decoder.decode(data)
        if isinstance(message, Generate):
            request = pickle.loads(message.request)
            task = self._loop.create_task(self._run(message.rid, request, message.tallied))
            self._tasks[message.rid] = task
            task.add_done_callback(functools.partial(self._ended, message.rid))
        elif isinstance(message, Abort):
            running = self._tasks.get(message.rid)
            if running is not None:
                running.cancel()  # closing the engine's stream aborts the request
        elif isinstance(message, Call):
            self._loop.create_task(self._call(message))

    # -- generations

    def slot(self, rid: int) -> _Slot:
        slot = self._pending.get(rid)
        if slot is None:
            slot = self._pending[rid] = _Slot()
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)  # after this turn's other outputs
        return slot

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, {}
        entries = [
            Entry(rid, s.outputs, s.accepted, s.generated, s.ended, s.error)
            for rid, s in pending.items()
        ]
        self._send(Batch(entries))

    def _ended(self, rid: int, _: asyncio.Task[None]) -> None:
        """A task aborted before it ever ran never reaches `_run`'s `finally`: its end is
        sent from here, so the HTTP process stops waiting for it."""
        if self._tasks.pop(rid, None) is not None:
            self.slot(rid).ended = True

    async def _run(self, rid: int, request: GenerateRequest, tallied: bool) -> None:
        if tallied:
            request.tally = _Tally(self, rid)
        error: ErrorInfo | None = None
        try:
            async with aclosing(self.engine.generate(request)) as outputs:
                async for output in outputs:
                    self.slot(rid).outputs.append(output)
        except asyncio.CancelledError:
            pass  # aborted by the reader: what it counted is in the slot
        except Exception as exc:
            error = error_info(exc)
        finally:
            self._tasks.pop(rid, None)
            slot = self.slot(rid)
            slot.ended = True
            slot.error = error
        if error is not None and error.kind == "failure":
            self.report_status()  # the engine may have died: say so with the error

    # -- the host side

    async def _call(self, call: Call) -> None:
        if call.op == EXPOSITION:
            self._send(Reply(call.call_id, value=engine_exposition()))
            return
        if call.op not in HOST_CALLS:
            self._send(Reply(call.call_id, error=ErrorInfo("failure", f"no call {call.op}")))
            return
        try:
            method = getattr(self.engine, call.op)
            value = await (method(call.arg) if call.op == "abort" else method())
            if call.op == "start":
                value = msgspec.to_builtins(self.engine.model)
        except Exception as exc:
            self._send(Reply(call.call_id, error=error_info(exc)))
        else:
            self._send(Reply(call.call_id, value=value))
        self.report_status()
        if call.op == "shutdown" and not self._done.done():
            self._done.set_result(None)

    def report_status(self) -> None:
        engine = self.engine
        status = Status(engine.is_alive(), engine.is_ready(), engine.failure())
        if status != self._status:
            self._status = status
            self._send(status)

    async def watch(self) -> None:
        """The engine can die between requests (its core process killed): look often."""
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            self.report_status()


def serve_sync(engine: Engine, sock: socket.socket) -> None:
    """Answer `tokenize` / `detokenize` (blocking, one at a time) until the socket closes."""
    encoder = msgspec.msgpack.Encoder()
    while True:
        payload = recv_frame(sock)
        if payload is None:
            return
        op, arg = msgspec.msgpack.decode(payload)
        try:
            value = engine.tokenize(**arg) if op == "tokenize" else engine.detokenize(arg)
            reply = [value, None]
        except Exception as exc:
            reply = [None, msgspec.to_builtins(error_info(exc))]
        sock.sendall(frame(encoder.encode(reply)))


def build(main_sock: socket.socket) -> Engine:
    payload = recv_frame(main_sock)
    if payload is None:
        raise SystemExit("the HTTP process left before sending the engine")
    boot = msgspec.msgpack.decode(payload, type=Boot)
    factory, args, kwargs = pickle.loads(boot.factory)
    engine: Engine = factory(*args, **kwargs)
    return engine


async def run(engine: Engine, main_sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    _, server = await loop.connect_accepted_socket(
        lambda: ChildServer(engine, done), sock=main_sock
    )
    watcher = asyncio.create_task(server.watch())
    await done
    watcher.cancel()
    with contextlib.suppress(Exception):
        # Stopped by the HTTP process's going (shutdown came otherwise): stop the engine.
        async with asyncio.timeout(SHUTDOWN_TIMEOUT_S):
            await engine.shutdown()


def main(argv: list[str]) -> int:
    # The HTTP process decides when to stop (it drains first). This process leads a
    # process group of its own (engine.remote.client), so a signal sent to the server's
    # group does not reach it or the engine's processes; one sent here directly is
    # ignored too. (Handlers, unlike SIG_IGN, are not inherited by the engine's own
    # processes.)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    logging.basicConfig(level=os.environ.get("LILAC_ENGINE_PROCESS_LOG_LEVEL", "WARNING"))
    main_sock = socket.socket(fileno=int(argv[0]))
    sync_sock = socket.socket(fileno=int(argv[1]))
    engine = build(main_sock)
    threading.Thread(target=serve_sync, args=(engine, sync_sock), daemon=True).start()
    try:
        import uvloop

        uvloop.run(run(engine, main_sock))
    except ImportError:
        asyncio.run(run(engine, main_sock))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # The engine is shut down and the sockets are done with: the interpreter's teardown
    # has nothing left to do but run AsyncLLM.__del__ after vLLM's module globals are
    # gone, which prints a traceback on every stop.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
