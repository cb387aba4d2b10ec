"""The messages between the HTTP process (`engine.remote.client`) and the engine's own
process (`engine.remote.child`), and how they travel: msgpack (msgspec) frames, each
prefixed with its length, over a local socket pair.

The hot path is `Batch`: everything the engine produced for every request during one
turn of the child's event loop (one engine step) in one frame, so the HTTP process reads
and decodes one frame per step, whatever the concurrency. Everything else is a small
request (`Generate`, `Abort`, `Call`) or reply (`Reply`, `Status`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.errors import (
    ContextLengthExceeded,
    EngineError,
    EngineFailure,
    EngineRequestError,
    EngineUnavailable,
)
from engine.protocol import GenerateOutput
from engine.remote.framing import HEADER, FrameReader, frame, recv_frame

__all__ = ["HEADER", "FrameReader", "frame", "recv_frame"]  # how they travel, re-exported

# -- the HTTP process to the engine's


class Boot(msgspec.Struct, tag=True):
    """The first frame: what builds the engine (a pickled `(factory, args, kwargs)`)."""

    factory: bytes


class Generate(msgspec.Struct, tag=True):
    """Start one generation. `request` is the pickled GenerateRequest without its
    callables (the HTTP process keeps its tally and has run its `before_run`)."""

    rid: int
    request: bytes
    tallied: bool  # report the engine's counts for this request


class Abort(msgspec.Struct, tag=True):
    """The reader left: end the generation (its last counts still come back)."""

    rid: int


class Call(msgspec.Struct, tag=True):
    """A method of the engine's host side (start, pause, abort by id...)."""

    call_id: int
    op: str
    arg: Any = None


ToChild = Boot | Generate | Abort | Call


# -- the engine's process to the HTTP process


class ErrorInfo(msgspec.Struct):
    """An engine error, rebuilt on the other side as the same kind (`to_error`)."""

    kind: str  # "request", "context", "unavailable", "failure"
    message: str
    param: str | None = None
    code: str | None = None
    numbers: tuple[int | None, ...] = ()  # ContextLengthExceeded's


class Entry(msgspec.Struct, array_like=True):
    """One request's news of one turn: outputs, the engine's counts (`accepted`: the
    prompt's tokens when it was taken this turn, else -1; `generated`: tokens since the
    last entry), and whether (and how) it ended."""

    rid: int
    outputs: list[GenerateOutput]
    accepted: int = -1
    generated: int = 0
    ended: bool = False
    error: ErrorInfo | None = None


class Batch(msgspec.Struct, tag=True):
    entries: list[Entry]


class Reply(msgspec.Struct, tag=True):
    call_id: int
    value: Any = None
    error: ErrorInfo | None = None


class Status(msgspec.Struct, tag=True):
    """The engine's health, sent when it changes."""

    alive: bool
    ready: bool
    failure: str | None


ToParent = Batch | Reply | Status


def error_info(exc: BaseException) -> ErrorInfo:
    """How an error raised in the engine's process travels."""
    if isinstance(exc, ContextLengthExceeded):
        numbers = (exc.prompt_tokens, exc.requested_output, exc.max_model_len, int(exc.at_least))
        return ErrorInfo("context", exc.message, exc.param, exc.code, numbers)
    if isinstance(exc, EngineRequestError):
        return ErrorInfo("request", exc.message, exc.param, exc.code)
    if isinstance(exc, EngineUnavailable):
        return ErrorInfo("unavailable", str(exc))
    if isinstance(exc, EngineFailure):
        return ErrorInfo("failure", str(exc))
    return ErrorInfo("failure", repr(exc))


def to_error(info: ErrorInfo) -> EngineError:
    if info.kind == "context":
        prompt_tokens, requested_output, max_model_len, at_least = info.numbers
        assert prompt_tokens is not None and max_model_len is not None
        return ContextLengthExceeded(
            prompt_tokens, requested_output, max_model_len, at_least=bool(at_least)
        )
    if info.kind == "request":
        return EngineRequestError(info.message, param=info.param, code=info.code)
    if info.kind == "unavailable":
        return EngineUnavailable(info.message)
    return EngineFailure(info.message)
