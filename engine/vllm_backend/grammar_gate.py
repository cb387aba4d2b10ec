"""A deadline on grammar compiles, paid before a request reaches the engine core.

xgrammar's compile time is not linear in a schema's size: an object of n optional
properties compiles in time about quadratic in n (SmolLM2's vocabulary: 800 of them
1.5 s, 2,500 of them 14-35 s), and a client's regex or EBNF grammar can cost anything.
The engine core compiles while the request waits, so a slow compile is a request that
answers tens of seconds late and a core kept busy meanwhile.

So the backend compiles the very spec the engine core will (same compiler options,
the served tokenizer's vocabulary) in a worker thread (xgrammar releases the GIL
while it compiles) and lets it spend at most `timeout_s` of CPU time (the thread's own
clock, so that a loaded machine does not turn a cheap grammar into a refused one; a
starved compile is given up on after five times that in wall time). Past it the request is a 400
`grammar_too_complex` that says why; the compile runs on in its thread and its verdict
is kept, so the same grammar is refused at once next time. A grammar that compiled in
time is remembered too, and is not compiled here again: the engine core's own cache
answers its next uses. An accepted request therefore pays at most about `timeout_s`
here and as much again in the engine core. Both compilers cache the pieces grammars
share, and both are warmed at start with the one that costs seconds, the bounded
string (engine.vllm_backend.grammar_warmup): a verdict measures what the engine core
will pay.

A compile that outlives its deadline still holds its thread: when every worker is held
so, an uncached grammar is refused (503 `grammar_compiler_busy`) rather than queued
behind them, so one client's slow grammars never make another's time out.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.errors import AdmissionRejected, EngineRequestError

log = logging.getLogger("lilac.engine")

# The engine is built with disable_any_whitespace: these are its compile options.
JSON_OPTIONS: dict[str, Any] = {"any_whitespace": False, "separators": (",", ":")}
WORKERS = 2
POLL_S = 0.05  # how often a waiting request reads its compile's CPU time
# A compile starved of CPU is given up on after this much wall time all the same.
WALL_CAP_FACTOR = 5
WALL_CAP_MIN_S = 10.0
VERDICTS = 4096  # grammars whose verdict is kept (a key of 32 bytes and a float each)
BUSY_RETRY_S = 5
CACHE_BYTES = 256 * 1024 * 1024  # compiled grammars kept (vLLM's engine core keeps 512 MiB)


class GrammarGate:
    """Compiles each new grammar once, with a deadline; remembers what it found."""

    def __init__(self, tokenizer: Any, vocab_size: int | None, timeout_s: float) -> None:
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size or None)
        # One thread: all of a compile's CPU time is on the worker's clock. A cache, like
        # the engine core's: the pieces grammars share (a bounded string) are compiled
        # once, there as here (engine.vllm_backend.grammar_warmup), so a verdict
        # measures what the engine core will pay.
        self._compiler = xgrammar.GrammarCompiler(
            info, max_threads=1, cache_enabled=True, cache_limit_bytes=CACHE_BYTES
        )
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="grammar")
        self.timeout_s = timeout_s
        # digest -> seconds the compile took (inf: not finished when last asked).
        self._verdicts: OrderedDict[bytes, float] = OrderedDict()
        self._overdue = 0  # compiles past their deadline, still holding a worker
        self._lock = threading.Lock()

    async def check(self, constraint: Any, param: str) -> None:
        """Return once `constraint` (vLLM's StructuredOutputsParams, or None) is known
        to compile within the deadline; raise a 400 when it does not."""
        spec = grammar_spec(constraint)
        if spec is None or self.timeout_s <= 0:
            return
        key = hashlib.blake2b(repr(spec).encode(), digest_size=32).digest()
        took = self._known(key)
        if took is None:
            took = await self._compile(key, spec, param)
        if took > self.timeout_s:
            raise too_complex(param, self.timeout_s, took)

    def warm(self, constraints: list[Any]) -> None:
        """Compile `constraints` into the cache, with no deadline (blocking; at start)."""
        for constraint in constraints:
            spec = grammar_spec(constraint)
            if spec is None:
                continue
            try:
                compile_spec(self._compiler, spec)
            except (RuntimeError, ValueError):  # an optimisation only
                log.warning("grammar warm-up failed to compile %s", spec[0], exc_info=True)

    def _known(self, key: bytes) -> float | None:
        with self._lock:
            took = self._verdicts.get(key)
            if took is not None:
                self._verdicts.move_to_end(key)
            return took

    def _remember(self, key: bytes, took: float) -> None:
        with self._lock:
            self._verdicts[key] = took
            self._verdicts.move_to_end(key)
            while len(self._verdicts) > VERDICTS:
                self._verdicts.popitem(last=False)

    def _forget_unfinished(self, key: bytes) -> None:
        with self._lock:
            if self._verdicts.get(key) == float("inf"):
                del self._verdicts[key]

    async def _compile(self, key: bytes, spec: tuple[str, str], param: str) -> float:
        if self._overdue >= WORKERS:
            raise AdmissionRejected(
                503,
                "grammar_compiler_busy",
                "The grammar compiler is busy with grammars that take too long to compile; "
                "retry shortly.",
                retry_after_s=BUSY_RETRY_S,
            )
        running = _Running()
        future = asyncio.wrap_future(self._pool.submit(self._timed, key, spec, running))
        started = time.perf_counter()
        wall_cap = max(WALL_CAP_MIN_S, WALL_CAP_FACTOR * self.timeout_s)
        while True:
            # The deadline is on the compile's CPU time: on a loaded machine its wall
            # time says more about the neighbours than about the grammar.
            done, _ = await asyncio.wait({future}, timeout=POLL_S)
            if done:
                try:
                    return future.result()
                except ValueError as exc:  # xgrammar's verdict: it cannot compile this
                    raise EngineRequestError(
                        f"`{param}` cannot be compiled: {exc}", param=param
                    ) from None
            if running.cpu_s() > self.timeout_s or time.perf_counter() - started > wall_cap:
                break
        future.add_done_callback(self._released)
        with self._lock:
            self._overdue += 1
            # "Not finished", unless the compile ended since the last look and wrote its
            # own time: a measured verdict is never overwritten, so a grammar given up on
            # while the machine was busy is judged by its CPU time once the compile ends.
            took = self._verdicts.setdefault(key, float("inf"))
            self._verdicts.move_to_end(key)
        return took

    def _released(self, _future: Any) -> None:
        with self._lock:
            self._overdue -= 1

    def _timed(self, key: bytes, spec: tuple[str, str], running: _Running) -> float:
        running.start()
        try:
            compile_spec(self._compiler, spec)
        except (RuntimeError, ValueError) as exc:  # xgrammar's parse errors: the caller's 400
            self._forget_unfinished(key)  # the next request compiles it and hears why
            raise ValueError(str(exc)) from None
        took = running.cpu_s()
        self._remember(key, took)
        if took > 1.0:
            log.info("grammar compile took %.2f s of CPU (%s)", took, spec[0])
        return took


class _Running:
    """The CPU time of one compile, readable from another thread while it runs."""

    def __init__(self) -> None:
        self._clock: int | None = None
        self._start = 0.0

    def start(self) -> None:
        self._clock = time.pthread_getcpuclockid(threading.get_ident())
        self._start = time.clock_gettime(self._clock)

    def cpu_s(self) -> float:
        if self._clock is None:
            return 0.0  # queued behind another compile: not started
        return time.clock_gettime(self._clock) - self._start


def constraint_param(request: Any) -> str:
    """The field a request's grammar comes from, for the 400 that names it."""
    if request.response_format is not None:
        return str(request.response_format.param)
    return "tools"


def too_complex(param: str, timeout_s: float, took: float) -> EngineRequestError:
    measured = "more than" if took == float("inf") else f"{took:.1f} s, over"
    return EngineRequestError(
        f"The grammar of `{param}` takes too long to compile ({measured} the "
        f"{timeout_s:g} s limit). Objects with many optional properties compile in time "
        "quadratic in their number: mark properties required, split the schema, or bound "
        "it more tightly.",
        param=param,
        code="grammar_too_complex",
    )


def grammar_spec(constraint: Any) -> tuple[str, str] | None:
    """(kind, source) of the grammar vLLM will compile for `constraint`, or None."""
    if constraint is None:
        return None
    if constraint.json is not None:
        schema = constraint.json
        return ("json", schema if isinstance(schema, str) else json.dumps(schema))
    if constraint.json_object:
        return ("json", '{"type": "object"}')
    if constraint.regex is not None:
        return ("regex", constraint.regex)
    if constraint.grammar is not None:
        return ("grammar", constraint.grammar)
    if constraint.structural_tag is not None:
        return ("structural_tag", constraint.structural_tag)
    return None  # a choice: a list of literals, linear to compile


def compile_spec(compiler: Any, spec: tuple[str, str]) -> Any:
    """Compile as vLLM's xgrammar backend does (v1/structured_output/backend_xgrammar)."""
    kind, source = spec
    if kind == "json":
        return compiler.compile_json_schema(source, **JSON_OPTIONS)
    if kind == "regex":
        return compiler.compile_regex(source)
    if kind == "grammar":
        from vllm.v1.structured_output.backend_xgrammar import grammar_is_likely_lark

        if grammar_is_likely_lark(source):
            return compiler.compile_lark(source)
        return compiler.compile_grammar(source)
    tag = json.loads(source)
    if "structures" in tag:
        import xgrammar

        items = [
            xgrammar.StructuralTagItem(
                begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"]
            )
            for s in tag["structures"]
        ]
        return compiler.compile_structural_tag(items, tag["triggers"])
    return compiler.compile_structural_tag(source)
