"""`RemoteEngine`: the Engine protocol in the HTTP process, for an engine that runs in a
process of its own (engine.remote.child).

Requests go as small messages; the engine's outputs come back as one frame per engine
step (`frames.Batch`), read by a protocol callback that hands each request's outputs to
its stream and applies its counts to its tally there and then, whether or not anyone
still reads the stream (usage is billed by what the engine counted); a stream closed
early returns from its close once its last counts have come, as an engine in process
counts before its close returns. A request's
`before_run` is awaited here, before the request is sent: a sleeping model wakes before
the engine's own checks run, not after them (the one difference from an engine run in
process). `tokenize` and `detokenize` are a blocking round trip on a socket of their
own, answered by a thread of the engine's process.

`metrics_exposition` reads the engine's Prometheus series (vLLM's `vllm:` ones, kept in
the engine's process) over the same round trip as the host's calls, at each scrape.

When the engine's process exits, every stream ends with `EngineFailure`, `is_alive`
turns false and `failure` says so, as when an engine core dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Any

import msgspec

from engine.checks import require_ready
from engine.errors import EngineError, EngineFailure, EngineUnavailable
from engine.protocol import GenerateOutput, GenerateRequest, ModelInfo, Tally
from engine.remote.frames import (
    Abort,
    Batch,
    Boot,
    Call,
    ErrorInfo,
    FrameReader,
    Generate,
    Reply,
    Status,
    ToParent,
    frame,
    recv_frame,
    to_error,
)

log = logging.getLogger("lilac.engine")

CHILD_MODULE = "engine.remote.child"
SHUTDOWN_TIMEOUT_S = 90.0  # vLLM's own shutdown waits for its engine core to stop
ABORT_WAIT_S = 10.0  # a closed stream waits this long for its last counts
METRICS_TIMEOUT_S = 5.0  # a scrape of `/metrics` waits this long for the engine's series


class _Stream:
    """One request's outputs as they arrive, and its end."""

    __slots__ = ("ended", "error", "outputs", "tally", "waiter")

    def __init__(self, tally: Tally | None) -> None:
        self.outputs: deque[GenerateOutput] = deque()
        self.tally = tally
        self.ended = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    def __init__(self, owner: RemoteEngine) -> None:
        self._owner = owner
        self._reader = FrameReader(owner._on_frame)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._on_lost()


class RemoteEngine:
    """An engine built by `factory(*args, **kwargs)` in a child process. `placeholder`
    is the model's facts until the engine has started (and says what they are)."""

    def __init__(
        self,
        placeholder: ModelInfo,
        factory: Callable[..., Any],
        *args: Any,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model = placeholder
        self._boot = pickle.dumps((factory, args, kwargs))
        self._env = env
        self._process: subprocess.Popen[bytes] | None = None
        self._transport: asyncio.Transport | None = None
        self._sync: socket.socket | None = None
        self._sync_lock = threading.Lock()
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(ToParent)
        self._streams: dict[int, _Stream] = {}
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()
        self._status = Status(alive=True, ready=False, failure=None)
        self._lost: str | None = None
        self._stopping = False
        self._started = False

    # -- the child process

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def _spawn(self) -> None:
        main_parent, main_child = socket.socketpair()
        sync_parent, sync_child = socket.socketpair()
        fds = (main_child.fileno(), sync_child.fileno())
        env = {**os.environ, **(self._env or {})}
        # A process group of its own, which the engine's processes (vLLM's engine core
        # and workers, whose own handlers stop them on SIGTERM) inherit: a signal sent
        # to the server's whole group (systemd's default, `kill -TERM -- -PGID`, Ctrl-C)
        # reaches the HTTP process, which drains and then stops the engine, not the
        # engine under the requests being drained.
        self._process = subprocess.Popen(
            [sys.executable, "-m", CHILD_MODULE, *map(str, fds)],
            pass_fds=fds,
            env=env,
            process_group=0,
        )
        main_child.close()
        sync_child.close()
        main_parent.sendall(frame(self._encoder.encode(Boot(self._boot))))
        self._sync = sync_parent
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(
            lambda: _Connection(self), sock=main_parent
        )
        self._transport = transport  # a stream transport

    def _send(self, message: Any) -> None:
        if self._transport is None or self._lost is not None:
            raise EngineFailure(self._lost or "the engine process is not running")
        self._transport.write(frame(self._encoder.encode(message)))

    async def _call(self, op: str, arg: Any = None) -> Any:
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        try:
            self._send(Call(call_id, op, arg))
            return await future
        finally:
            self._calls.pop(call_id, None)

    # -- what arrives

    def _on_frame(self, data: memoryview) -> None:
        message = self._decoder.decode(data)
        if isinstance(message, Batch):
            streams = self._streams
            for entry in message.entries:
                stream = streams.get(entry.rid)
                if stream is None:
                    continue
                tally = stream.tally
                if tally is not None:
                    if entry.accepted >= 0:
                        tally.accepted(entry.accepted)
                    if entry.generated:
                        tally.generated(entry.generated)
                if entry.outputs:
                    stream.outputs.extend(entry.outputs)
                if entry.ended:
                    del streams[entry.rid]
                    stream.ended = True
                    if entry.error is not None:
                        stream.error = to_error(entry.error)
                stream.wake()
        elif isinstance(message, Reply):
            future = self._calls.get(message.call_id)
            if future is not None and not future.done():
                if message.error is not None:
                    future.set_exception(to_error(message.error))
                else:
                    future.set_result(message.value)
        elif isinstance(message, Status):
            self._status = message

    def _on_lost(self) -> None:
        self._transport = None
        code = self._process.poll() if self._process is not None else None
        if self._stopping:
            reason = "the engine process was stopped"
        else:
            reason = "the engine process exited" + (f" (status {code})" if code else "")
            log.error("%s", reason)
        self._lost = reason
        error = EngineFailure(reason)
        for stream in self._streams.values():
            stream.ended = True
            stream.error = error
            stream.wake()
        self._streams.clear()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(EngineFailure(reason))

    # -- ModelHost

    @property
    def model(self) -> ModelInfo:
        return self._model

    async def start(self) -> None:
        await self._spawn()
        value = await self._call("start")
        self._model = msgspec.convert(value, ModelInfo)
        self._status = Status(alive=True, ready=True, failure=None)
        self._started = True

    async def shutdown(self) -> None:
        process = self._process
        if process is None:
            return
        self._stopping = True
        if self._lost is None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(SHUTDOWN_TIMEOUT_S):
                    await self._call("shutdown")
        if self._transport is not None:
            self._transport.close()
        if self._sync is not None:
            self._sync.close()
        try:
            await asyncio.to_thread(process.wait, SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)
        self._status = Status(alive=True, ready=False, failure=None)

    def is_alive(self) -> bool:
        if self._stopping:
            return True  # stopped on purpose: not a death
        return self._lost is None and self._status.alive

    def is_ready(self) -> bool:
        return self._lost is None and self._status.ready and not self._stopping

    def failure(self) -> str | None:
        if self._lost is not None and not self._stopping:
            return self._lost
        return self._status.failure

    def unfinished_requests(self) -> int:
        return len(self._streams)

    def tokenize(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        add_special_tokens: bool = True,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        require_ready(self)
        arg = {
            "prompt": prompt,
            "messages": messages,
            "add_special_tokens": add_special_tokens,
            "add_generation_prompt": add_generation_prompt,
        }
        value: list[int] = self._sync_call("tokenize", arg)
        return value

    def detokenize(self, token_ids: list[int]) -> str:
        require_ready(self)
        value: str = self._sync_call("detokenize", token_ids)
        return value

    def _sync_call(self, op: str, arg: Any) -> Any:
        sock = self._sync
        if sock is None:
            raise EngineUnavailable("the engine is not running")
        with self._sync_lock:
            try:
                sock.sendall(frame(self._encoder.encode([op, arg])))
                payload = recv_frame(sock)
            except OSError as exc:
                raise EngineFailure(f"the engine process did not answer: {exc}") from exc
        if payload is None:
            raise EngineFailure(self._lost or "the engine process exited")
        value, error = msgspec.msgpack.decode(payload)
        if error is not None:
            raise to_error(msgspec.convert(error, ErrorInfo))
        return value

    async def pause(self) -> None:
        await self._call("pause")

    async def resume(self) -> None:
        await self._call("resume")

    async def release_memory(self) -> bool:
        return bool(await self._call("release_memory"))

    async def reacquire_memory(self) -> None:
        await self._call("reacquire_memory")

    async def metrics_exposition(self) -> str:
        """The engine's series, read from its process (engine.remote.child); empty
        before it has started, once it has stopped, or when it does not answer in time
        (the scrape still gets the HTTP process's own)."""
        if not self._started or self._stopping or self._lost is not None:
            return ""
        try:
            async with asyncio.timeout(METRICS_TIMEOUT_S):
                value = await self._call("metrics_exposition")
        except (EngineError, TimeoutError) as exc:
            log.warning("the engine process's series were not read: %r", exc)
            return ""
        return str(value)

    # -- Generator

    async def abort(self, request_id: str) -> None:
        await self._call("abort", request_id)

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateOutput, None]:
        require_ready(self)
        if request.before_run is not None:
            await request.before_run()
        rid = next(self._ids)
        stream = _Stream(request.tally)
        bare = replace(request, before_run=None, tally=None)
        self._send(Generate(rid, pickle.dumps(bare), request.tally is not None))
        self._streams[rid] = stream
        loop = asyncio.get_running_loop()
        try:
            outputs = stream.outputs
            while True:
                while outputs:
                    yield outputs.popleft()
                if stream.ended:
                    if stream.error is not None:
                        raise stream.error
                    return
                stream.waiter = loop.create_future()
                await stream.waiter
                stream.waiter = None
        finally:
            if not stream.ended and self._lost is None and self._transport is not None:
                # Its last counts still come (the stream stays listed until they do).
                self._transport.write(frame(self._encoder.encode(Abort(rid))))
                await self._last_entry(stream)

    async def _last_entry(self, stream: _Stream) -> None:
        """Wait for an aborted stream's last entry, so that its tally holds everything
        the engine counted (a prompt it took, tokens nobody read) when the close
        returns, as when an engine in process closes a stream: the usage record is
        read from the tally then. Bounded: a child that does not answer in time has its
        late counts applied to the tally after the record was made."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ABORT_WAIT_S
        while not stream.ended:
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("an aborted request's last counts did not come in time")
                return
            stream.waiter = loop.create_future()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await stream.waiter
            stream.waiter = None
