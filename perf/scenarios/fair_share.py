"""Fair share between keys, measured on a real server. The output-token shares of
backlogged keys (equal and weighted), a key back from idle, and what the fair scheduler
costs against first come first served.

`make fair-share`; a short version runs in the e2e suite (tests/e2e/test_fair_share.py).

    python -m perf fair-share [--scenarios equal,weighted,idle_return,work_conserving,alone]
        [--seconds 60] [--warmup 20] [--streams 8] [--idle-seconds 60] [--rounds 3]
        [--max-num-seqs 8] [--server-args "..."]

The server is `lilac-serve serve --auth keys` with the default model, `--max-model-len
2048` and a 1 GiB KV cache, one at a time; `--server-args` go to every server started.
A fresh server is primed (8 short requests, all finished) before anything is measured:
its first engine step takes far longer than the next ones.
Each scenario makes keys of its own through `POST /admin/keys` (RPM lifted, a `weight`
where it says), and each key keeps `--streams` streamed chats going: as one ends, the
next starts. A backlogged key always has a request waiting, so that the scheduler has a
choice to make: the servers run `--max-num-seqs 8` (engine seats) by default, fewer than
the streams. With every stream in the engine's batch at once, each would get a token a
step whatever the scheduler (`--max-num-seqs 0`: vLLM's default, 128 on CPU).

Short chats are varied one-line prompts with `max_tokens` 128 and `ignore_eos` (vLLM's
extension, which the server implements), so that every answer is full length. The
requests of the share scenarios ask for `logprobs` (and special tokens as text): each
streamed chunk then lists its tokens, so a key's output tokens over a window are
counted from the arrival times of its chunks. A snapshot of `/admin/usage` at the
window's ends would not do: it counts a request when it finishes, wholly, and here a
request lasts about as long as idle_return's 10-s window. The server sends no chunk for
a token whose text is held back (an incomplete character), so a finished request's
chunks are scaled to its `usage.completion_tokens`; the tables show how much the
chunks listed before that (`tokens in chunks / usage`, 1 when every token came with its
chunk). Every window opens after `--warmup` seconds of load, once every key has had a
whole answer. The engine's own view
(`GET /admin/fairness`: each key's share of the weighted service of the last minute,
warm-up included) is recorded beside it.

- `equal`: two keys of weight 1 backlogged for `--seconds`: each key's share of the
  output tokens. Goal: each 0.45-0.55.
- `weighted`: the same with weights 2 and 1: the ratio of their output tokens. Goal:
  1.8-2.2.
- `idle_return`: keys A, B and C backlogged for `--warmup` seconds, then C stops (its
  requests cancelled) and stays away `--idle-seconds` while A and B go on, then comes
  back with the same streams: C's share over its first 10 s back and the next 20 s,
  against its fair share of 1/3. Idleness must bank no credit: the engine remembers C's
  counter, left far behind A's and B's. Goal: first 10 s at most 1/3 + 0.10.
- `work_conserving`: one key with 4 streams of ~1,000-token prompts (`max_tokens` 32),
  another with 8 short streamed chats; the server's output tokens/s over `--seconds`
  (the delta of `vllm:generation_tokens_total` on /metrics, exact and server-side) with
  `--fair-share true` and with `--fair-share false` (vLLM's priority scheduler: first
  come first served), `--rounds` rounds. Goal: the median of fair / FCFS >= 0.95.
- `alone`: one key alone with 16 streams of short chats, fair against FCFS as above:
  output tokens/s and the TTFT p50 of the requests whose first token came in the window
  (a wait for a seat included: 16 streams, 8 seats). Goal: within noise (the medians of
  both ratios within 5%; the rounds' spread shows the noise).

Two servers at once do not fit the machine: `work_conserving` and `alone` run on one
server, then the other, the order alternating each round (fair first in odd rounds), and
a server is kept for the next measurement when it is the one needed (the fair server of
the share scenarios serves round 1). Prints a markdown table per scenario; each
scenario's figures go to perf/out/fair_share/SCENARIO.json, the servers' logs beside.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.results import output
from perf.harness.servers import Server, ServerNotReady, keys_server

OUT = output("fair_share")
ADMIN_KEY = "fair-share-admin-key"
MAX_NUM_SEQS = 8
SHORT_MAX_TOKENS = 128
LONG_MAX_TOKENS = 32
LONG_PROMPT_WORDS = 960  # one token each with SmolLM2's tokenizer: ~1,000 with the template
LONG_STREAMS = 4
SHORT_STREAMS = 8
ALONE_STREAMS = 16
FIRST_S, NEXT_S = 10.0, 20.0  # idle_return's windows after the key comes back
REQUEST_TIMEOUT_S = 300.0
SETTLE_TIMEOUT_S = 180.0
STARTUP_TIMEOUT_S = 900.0
FLOWING_TIMEOUT_S = 120.0  # for every key's first whole answer, before a window opens

GOAL_EQUAL = (0.45, 0.55)
GOAL_WEIGHTED = (1.8, 2.2)
GOAL_IDLE_BURST = 0.10  # over 1/3 in the first 10 s back
GOAL_WORK_CONSERVING = 0.95
GOAL_ALONE_NOISE = 0.05

SCENARIOS = ("equal", "weighted", "idle_return", "work_conserving", "alone")
SHARE_SCENARIOS = SCENARIOS[:3]

TASKS = (
    "Write a short story about",
    "Explain to a child how",
    "Describe a day in the life of",
    "List the pros and cons of",
    "Write a poem about",
    "Give travel advice for a trip with",
    "Tell the history of",
    "Write a recipe that uses",
)
SUBJECTS = (
    "a lighthouse keeper",
    "bicycles",
    "a red fox in winter",
    "volcanoes",
    "a small bakery",
    "the moon",
    "trains at night",
    "an old library",
    "honeybees",
    "a jazz band",
    "rainforests",
    "chess",
)
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money story "
    "fact month lot right study book eye job word business issue side kind head house "
    "service friend father power hour game line end member law car city community name "
    "president team minute idea kid body information back parent face others level office "
    "door health person art war history party result change morning reason research girl "
    "guy moment air teacher force education"
)
WORDS = _WORD_TEXT.split()


# ---------------------------------------------------------------- requests


def short_chat(
    tag: str, i: int, logprobs: bool, max_tokens: int = SHORT_MAX_TOKENS
) -> dict[str, Any]:
    """A varied one-line prompt, answered at full length (`max_tokens`)."""
    task, subject = TASKS[i % len(TASKS)], SUBJECTS[(i // len(TASKS)) % len(SUBJECTS)]
    return chat(f"{task} {subject}. ({tag} {i})", max_tokens, logprobs)


def long_chat(tag: str, i: int, seed: int) -> dict[str, Any]:
    """~1,000 prompt tokens of words drawn for this request (no prefix another has), 32
    output tokens."""
    rng = random.Random(f"{seed}-{i}")
    notes = " ".join(rng.choice(WORDS) for _ in range(LONG_PROMPT_WORDS))
    return chat(f"({tag} {i}) Summarise these notes: {notes}", LONG_MAX_TOKENS, False)


def chat(text: str, max_tokens: int, logprobs: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if logprobs:
        body["logprobs"] = True
        body["skip_special_tokens"] = False  # a special token's chunk is sent, as text
    return body


Body = Callable[[int], dict[str, Any]]


def shorts(tag: str, logprobs: bool, max_tokens: int = SHORT_MAX_TOKENS) -> Body:
    return lambda i: short_chat(tag, i, logprobs, max_tokens)


def longs(seed: int) -> Body:
    return lambda i: long_chat("long", i, seed)


# ---------------------------------------------------------------- the server


class ServerDied(RuntimeError):
    """The server exited while a scenario ran."""


@dataclass
class Key:
    name: str
    secret: str
    id: str
    weight: float


@dataclass
class Host:
    """A running `--auth keys` server, reached with its admin key."""

    url: str
    admin_key: str
    server: Server | None = None
    fair_share: bool = True

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def check(self) -> None:
        if self.server is not None and self.server.process.poll() is not None:
            raise ServerDied(
                f"the server exited ({self.server.process.returncode}):\n{self.server.log_tail()}"
            )

    async def new_key(self, name: str, weight: float = 1.0) -> Key:
        """A key with no RPM, TPM or concurrency limit, of this weight."""
        body = {"name": name, "rpm": None, "tpm": None, "max_concurrent": None, "weight": weight}
        async with httpx.AsyncClient(base_url=self.url, headers=self.admin, timeout=30) as c:
            response = await c.post("/admin/keys", json=body)
        if response.status_code != 201:
            raise RuntimeError(f"POST /admin/keys: {response.status_code} {response.text}")
        made = response.json()
        return Key(name, made["key"], made["id"], weight)

    async def fairness(self) -> dict[str, Any]:
        """The engine's view of the default model's tenants (GET /admin/fairness)."""
        async with httpx.AsyncClient(base_url=self.url, headers=self.admin, timeout=30) as c:
            response = await c.get("/admin/fairness", params={"model": DEFAULT_MODEL_NAME})
        response.raise_for_status()
        data = response.json()["data"]
        return data[0] if data else {}

    async def metrics(self) -> dict[str, float]:
        """The server's counters of interest, summed over their labels."""
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as c:
            text = (await c.get("/metrics")).text
        wanted = (
            "vllm:generation_tokens_total",
            "vllm:prompt_tokens_total",
            "lilac_engine_unfinished_requests",
        )
        found: dict[str, float] = {}
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in wanted:
                found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return found

    async def wait(self, seconds: float) -> None:
        """Sleep, checking every second that the server still runs."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.check()
            await asyncio.sleep(min(1.0, left))
        self.check()

    async def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> float:
        """Wait until the engine runs nothing (cancelled streams are aborted); what is left."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check()
            left = (await self.metrics()).get("lilac_engine_unfinished_requests", 0.0)
            if left == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)
        await asyncio.sleep(1.0)
        return left


def start_server(workdir: Path, flags: list[str], fair_share: bool) -> Host:
    """`lilac-serve serve --auth keys` on a free port over a keys database of its own,
    `flags` (the script's and `--server-args`), then `--fair-share` as asked."""
    fair = ("--fair-share", "true" if fair_share else "false")
    server = keys_server(workdir, ADMIN_KEY, (*flags, *fair), STARTUP_TIMEOUT_S)
    return Host(server.base_url, ADMIN_KEY, server, fair_share)


class Servers:
    """One server at a time: `host(fair)` keeps the running one when it is the kind asked
    for, else stops it and starts the other. Every log is copied to `out`."""

    def __init__(self, workdir: Path, flags: list[str], out: Path) -> None:
        self.workdir, self.flags, self.out = workdir, flags, out
        self.current: Host | None = None
        self.started = 0

    async def host(self, fair_share: bool) -> Host:
        current = self.current
        if current is not None:
            alive = current.server is None or current.server.process.poll() is None
            if alive and current.fair_share == fair_share:
                return current
            self.stop()
        self.started += 1
        name = f"server-{self.started}-{'fair' if fair_share else 'fcfs'}"
        print(f"starting {name} ...", file=sys.stderr, flush=True)
        begun = time.monotonic()
        try:
            self.current = start_server(self.workdir / name, self.flags, fair_share)
            await prime(self.current)
        finally:
            self._keep_log(name)
        print(f"{name} ready in {time.monotonic() - begun:.0f} s", file=sys.stderr, flush=True)
        return self.current

    def stop(self) -> None:
        current, self.current = self.current, None
        if current is not None and current.server is not None:
            current.server.stop()
            self._keep_log(current.server.log_path.parent.name)

    def _keep_log(self, name: str) -> None:
        log = self.workdir / name / "server.log"
        with contextlib.suppress(OSError):
            (self.out / f"{name}.log").write_bytes(log.read_bytes())


# ---------------------------------------------------------------- the load


@dataclass
class Tally:
    """What one key's streams got."""

    # (arrival, tokens) of every chunk that carried tokens, once its request ended: a
    # finished request's scaled to its usage (see `Streams._one`).
    chunks: list[tuple[float, float]] = field(default_factory=list)
    ttfts: list[tuple[float, float]] = field(default_factory=list)  # (first token, TTFT s)
    finished: int = 0
    usage_tokens: int = 0  # completion tokens of finished requests, by their usage
    counted_tokens: int = 0  # the same requests' tokens as their chunks listed them
    prompt_tokens: list[int] = field(default_factory=list)
    refused: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    last_error: str = ""

    def tokens_between(self, start: float, end: float) -> int:
        return round(sum(n for at, n in self.chunks if start <= at < end))

    def ttft_p50(self, start: float, end: float) -> float | None:
        """Of the requests whose first token came in the window."""
        values = [ttft for first, ttft in self.ttfts if start <= first < end]
        return statistics.median(values) if values else None

    def coverage(self) -> float | None:
        """Of finished requests' tokens (their usage), the share their chunks listed."""
        return round(self.counted_tokens / self.usage_tokens, 4) if self.usage_tokens else None


class Streams:
    """`count` streams of one key, each sending its next request as the last ends, until
    stopped; stopping cancels what is in flight (the server aborts it)."""

    def __init__(self, host: Host, key: Key, count: int, body: Body) -> None:
        self.host, self.key, self.count, self.body = host, key, count, body
        self.tally = Tally()
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None

    def start(self) -> None:
        limits = httpx.Limits(max_connections=self.count, max_keepalive_connections=self.count)
        self._client = httpx.AsyncClient(
            base_url=self.host.url,
            headers={"Authorization": f"Bearer {self.key.secret}"},
            timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=30.0),
            limits=limits,
        )
        self._tasks = [asyncio.create_task(self._loop(w)) for w in range(self.count)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _loop(self, w: int) -> None:
        i = w
        while True:
            try:
                await self._one(self.body(i))
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                self.tally.errors[type(exc).__name__] += 1
                self.tally.last_error = repr(exc)[:300]
                await asyncio.sleep(0.5)
            i += self.count

    async def _one(self, body: dict[str, Any]) -> None:
        """One streamed request. With `logprobs`, each chunk lists the tokens it carries;
        the server leaves out a chunk whose text is empty, and its tokens with it (held
        back by the detokenizer: the requests ask for special tokens as text so that few
        are), so a finished request's chunks are scaled to its usage's count; a request
        cut short keeps what its chunks listed."""
        assert self._client is not None
        tally = self.tally
        mine: list[tuple[float, int]] = []
        scale = 1.0
        sent = time.monotonic()
        try:
            async with self._client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    await self._refused(response)
                    return
                first: float | None = None
                async for line in response.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    now = time.monotonic()
                    if "error" in chunk:
                        tally.errors["error event"] += 1
                        tally.last_error = json.dumps(chunk["error"])[:300]
                        return
                    tokens = 0
                    for choice in chunk.get("choices") or ():
                        content = (choice.get("logprobs") or {}).get("content") or ()
                        tokens += len(content)
                        text = (choice.get("delta") or {}).get("content")
                        if first is None and (content or text):
                            first = now
                            tally.ttfts.append((now, now - sent))
                    if tokens:
                        mine.append((now, tokens))
                    usage = chunk.get("usage")
                    if usage and not chunk.get("choices"):
                        counted, used = sum(n for _, n in mine), int(usage["completion_tokens"])
                        tally.finished += 1
                        tally.usage_tokens += used
                        tally.counted_tokens += counted
                        tally.prompt_tokens.append(int(usage["prompt_tokens"]))
                        scale = used / counted if counted else 1.0
        finally:
            tally.chunks.extend((at, n * scale) for at, n in mine)

    async def _refused(self, response: httpx.Response) -> None:
        code = ""
        with contextlib.suppress(Exception):
            code = str(response.json()["error"]["code"])
        what = f"{response.status_code} {code}".strip()
        if response.status_code in (429, 503):  # admission or a limit: retry as asked
            self.tally.refused[what] += 1
            retry = 0.25
            with contextlib.suppress(TypeError, ValueError):
                retry = float(response.headers.get("retry-after"))
            await asyncio.sleep(min(max(retry, 0.05), 5.0))
            return
        self.tally.errors[what] += 1
        self.tally.last_error = response.text[:300]
        await asyncio.sleep(0.5)


@contextlib.asynccontextmanager
async def running(*groups: Streams) -> Any:
    """The streams started, and stopped however the block ends."""
    for group in groups:
        group.start()
    try:
        yield groups
    finally:
        for group in groups:
            await group.stop()


async def prime(host: Host, requests: int = MAX_NUM_SEQS, timeout_s: float = 600.0) -> None:
    """Short requests through a key of its own until `requests` have finished: a fresh
    engine's first steps take far longer than the next ones (here, the first one over
    20 s), which would land in the first scenario's window."""
    group = Streams(host, await host.new_key(unique("prime")), requests, shorts("prime", False, 16))
    deadline = time.monotonic() + timeout_s
    async with running(group):
        while group.tally.finished < requests:
            if time.monotonic() > deadline:
                raise RuntimeError(f"priming: {group.tally.finished} of {requests} finished")
            check_flowing([group])
            await host.wait(0.5)
    await host.settle()


async def until_flowing(host: Host, groups: list[Streams], timeout_s: float) -> None:
    """Wait until every key has had a whole answer (at most `timeout_s`): an engine's
    first steps of a new batch shape (a server just restarted, the first requests with
    logprobs) can take seconds on a loaded machine, and a window opened then measures
    that warm-up, not the share."""
    deadline = time.monotonic() + timeout_s
    while not all(group.tally.finished for group in groups):
        check_flowing(groups)
        if time.monotonic() > deadline:
            waiting = [g.key.name for g in groups if not g.tally.finished]
            raise RuntimeError(f"no whole answer in {timeout_s:g} s for {waiting}")
        await host.wait(0.25)


def check_flowing(groups: list[Streams]) -> None:
    """Raise when a key got nothing but errors (a bad request, a dead server)."""
    for group in groups:
        tally = group.tally
        if not tally.chunks and not tally.ttfts and tally.errors:
            raise RuntimeError(
                f"key {group.key.name} got no tokens, errors {dict(tally.errors)}: "
                f"{tally.last_error}"
            )


def unique(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------- share scenarios


@dataclass
class KeyRow:
    key: str
    key_id: str
    weight: float
    streams: int
    output_tokens: int  # in the window, counted from the chunks
    tokens_per_s: float
    share: float  # of the keys' output tokens in the window
    engine_share: float | None  # the engine's share of the last minute (/admin/fairness)
    finished: int  # requests finished (over the whole run, warm-up included)
    # Of finished requests' tokens (usage), the share their chunks listed (1: all).
    chunk_coverage: float | None
    refused: dict[str, int]
    errors: dict[str, int]


@dataclass
class ShareResult:
    scenario: str
    seconds: float
    warmup: float
    rows: list[KeyRow]
    unfinished_after: float = 0.0
    ratio: float | None = None  # weighted: heavier key's tokens / lighter's
    goal: str = ""
    met: bool = False
    fairness: dict[str, Any] = field(default_factory=dict)


def key_rows(
    groups: list[Streams], start: float, end: float, fairness: dict[str, Any]
) -> list[KeyRow]:
    counts = [g.tally.tokens_between(start, end) for g in groups]
    total = sum(counts) or 1
    engine = {t.get("key_id"): t for t in fairness.get("tenants", [])}
    rows = []
    for group, tokens in zip(groups, counts, strict=True):
        tally, tenant = group.tally, engine.get(group.key.id)
        rows.append(
            KeyRow(
                key=group.key.name,
                key_id=group.key.id,
                weight=group.key.weight,
                streams=group.count,
                output_tokens=tokens,
                tokens_per_s=round(tokens / max(end - start, 1e-9), 2),
                share=round(tokens / total, 4),
                engine_share=tenant.get("share_last_minute") if tenant else None,
                finished=tally.finished,
                chunk_coverage=tally.coverage(),
                refused=dict(tally.refused),
                errors=dict(tally.errors),
            )
        )
    return rows


async def shares(
    host: Host,
    scenario: str,
    weights: dict[str, float],
    *,
    streams: int,
    warmup: float,
    seconds: float,
    max_tokens: int = SHORT_MAX_TOKENS,
) -> ShareResult:
    """Keys of these weights, each with `streams` streams of short chats, backlogged for
    `warmup` + `seconds`; each key's output tokens over the last `seconds`."""
    keys = [await host.new_key(unique(f"{scenario}-{name}"), w) for name, w in weights.items()]
    groups = [Streams(host, key, streams, shorts(key.name, True, max_tokens)) for key in keys]
    async with running(*groups):
        await host.wait(warmup)
        check_flowing(groups)
        await until_flowing(host, groups, FLOWING_TIMEOUT_S)
        start = time.monotonic()
        await host.wait(seconds)
        end = time.monotonic()
        fairness = await host.fairness()
    result = ShareResult(scenario, seconds, warmup, key_rows(groups, start, end, fairness))
    result.fairness = fairness
    result.unfinished_after = await host.settle()
    return result


async def equal(
    host: Host,
    *,
    streams: int = 8,
    warmup: float = 20.0,
    seconds: float = 60.0,
    max_tokens: int = SHORT_MAX_TOKENS,
) -> ShareResult:
    weights = {"a": 1.0, "b": 1.0}
    result = await shares(
        host, "equal", weights, streams=streams, warmup=warmup, seconds=seconds,
        max_tokens=max_tokens,
    )  # fmt: skip
    low, high = GOAL_EQUAL
    result.goal = f"each key's share {low}-{high}"
    result.met = all(low <= row.share <= high for row in result.rows)
    return result


async def weighted(
    host: Host, *, streams: int = 8, warmup: float = 20.0, seconds: float = 60.0
) -> ShareResult:
    result = await shares(
        host, "weighted", {"w2": 2.0, "w1": 1.0}, streams=streams, warmup=warmup, seconds=seconds
    )
    heavy, light = result.rows
    result.ratio = (
        round(heavy.output_tokens / light.output_tokens, 3) if light.output_tokens else None
    )
    low, high = GOAL_WEIGHTED
    result.goal = f"weight-2 / weight-1 output tokens {low}-{high}"
    result.met = result.ratio is not None and low <= result.ratio <= high
    return result


@dataclass
class IdleWindow:
    window: str
    seconds: float
    tokens: dict[str, int]  # per key: A, B, C
    c_share: float
    c_ttft_p50_s: float | None  # of C's requests whose first token came in the window


@dataclass
class IdleResult:
    scenario: str
    warmup: float
    idle_seconds: float
    windows: list[IdleWindow]
    fair_share: float
    goal: str
    met: bool
    rows: list[KeyRow]  # over C's 30 s back
    unfinished_after: float = 0.0
    fairness: dict[str, Any] = field(default_factory=dict)


async def idle_return(
    host: Host, *, streams: int = 8, warmup: float = 20.0, idle_seconds: float = 60.0
) -> IdleResult:
    """A, B and C backlogged for `warmup`; C away `idle_seconds`; C's share back."""
    keys = {name: await host.new_key(unique(f"idle-{name}")) for name in "ABC"}

    def group(name: str) -> Streams:
        return Streams(host, keys[name], streams, shorts(f"idle-{name}", True))

    a, b, c_before, c_back = group("A"), group("B"), group("C"), group("C")
    async with running(a, b):
        async with running(c_before):
            await host.wait(warmup)
            check_flowing([a, b, c_before])
        await host.wait(idle_seconds)
        back = time.monotonic()
        async with running(c_back):
            await host.wait(FIRST_S + NEXT_S)
            end = time.monotonic()
            fairness = await host.fairness()
    before = min(10.0, idle_seconds)
    spans = (
        (f"A and B alone, the last {before:g} s before C is back", back - before, back),
        (f"C's first {FIRST_S:g} s back", back, back + FIRST_S),
        (f"C's next {NEXT_S:g} s", back + FIRST_S, end),
    )
    windows = []
    for label, start, stop in spans:
        tokens = {
            "A": a.tally.tokens_between(start, stop),
            "B": b.tally.tokens_between(start, stop),
            "C": c_back.tally.tokens_between(start, stop),
        }
        total = sum(tokens.values()) or 1
        windows.append(
            IdleWindow(
                label,
                round(stop - start, 2),
                tokens,
                round(tokens["C"] / total, 4),
                c_back.tally.ttft_p50(start, stop),
            )
        )
    fair = 1 / 3
    result = IdleResult(
        "idle_return",
        warmup,
        idle_seconds,
        windows,
        fair,
        f"C's share in its first {FIRST_S:g} s back <= 1/3 + {GOAL_IDLE_BURST}",
        windows[1].c_share <= fair + GOAL_IDLE_BURST,
        key_rows([a, b, c_back], back, end, fairness),
    )
    result.fairness = fairness
    result.unfinished_after = await host.settle()
    return result


# ---------------------------------------------------------------- fair against FCFS


@dataclass
class Throughput:
    """One measurement on one server."""

    fair_share: bool
    output_tokens_per_s: float
    prompt_tokens_per_s: float
    ttft_p50_s: dict[str, float | None]  # per key: of first tokens in the window
    mean_prompt_tokens: dict[str, float]
    refused: dict[str, dict[str, int]]
    errors: dict[str, dict[str, int]]


Load = list[tuple[str, int, Body]]  # per key: its name, its streams, its requests


async def throughput(host: Host, loads: Load, warmup: float, seconds: float) -> Throughput:
    """Keys as `loads` says, backlogged for `warmup` + `seconds`: the server's token rates
    over the last `seconds`."""
    groups = []
    for name, count, body in loads:
        key = await host.new_key(unique(name))
        groups.append(Streams(host, key, count, body))
    async with running(*groups):
        await host.wait(warmup)
        check_flowing(groups)
        before, start = await host.metrics(), time.monotonic()
        if "vllm:generation_tokens_total" not in before:
            raise RuntimeError("no vllm:generation_tokens_total on /metrics: --engine-metrics off?")
        await host.wait(seconds)
        after, end = await host.metrics(), time.monotonic()
    await host.settle()
    elapsed = end - start

    def rate(name: str) -> float:
        return round((after.get(name, 0.0) - before.get(name, 0.0)) / elapsed, 2)

    named = {name: g for (name, _, _), g in zip(loads, groups, strict=True)}
    return Throughput(
        fair_share=host.fair_share,
        output_tokens_per_s=rate("vllm:generation_tokens_total"),
        prompt_tokens_per_s=rate("vllm:prompt_tokens_total"),
        ttft_p50_s={n: g.tally.ttft_p50(start, end) for n, g in named.items()},
        mean_prompt_tokens={
            n: round(statistics.fmean(g.tally.prompt_tokens), 1) if g.tally.prompt_tokens else 0.0
            for n, g in named.items()
        },
        refused={n: dict(g.tally.refused) for n, g in named.items()},
        errors={n: dict(g.tally.errors) for n, g in named.items()},
    )


def mixed_load(round_no: int) -> Load:
    """work_conserving's keys: long prompts and short chats (the same requests on both
    servers of a round)."""
    return [
        ("long", LONG_STREAMS, longs(round_no)),
        ("short", SHORT_STREAMS, shorts("short", False)),
    ]


def alone_load() -> Load:
    return [("alone", ALONE_STREAMS, shorts("alone", False))]


@dataclass
class Round:
    round: int
    order: list[str]
    fair: Throughput
    fcfs: Throughput
    ratio: float  # fair / FCFS output tokens/s
    ttft_ratio: float | None = None  # fair / FCFS TTFT p50 (alone)


@dataclass
class CompareResult:
    scenario: str
    seconds: float
    warmup: float
    rounds: list[Round]
    median_ratio: float
    median_ttft_ratio: float | None
    goal: str
    met: bool


def order_of(round_no: int) -> list[bool]:
    """Fair first in odd rounds, FCFS first in even ones."""
    return [True, False] if round_no % 2 == 1 else [False, True]


async def compare(
    servers: Servers, scenarios: list[str], rounds: int, warmup: float, seconds: float
) -> dict[str, CompareResult]:
    """`work_conserving` and `alone` (those in `scenarios`) on a fair and a FCFS server,
    `rounds` rounds in alternating order."""
    measured: dict[str, dict[int, dict[bool, Throughput]]] = {s: {} for s in scenarios}
    orders: dict[int, list[str]] = {}
    for round_no in range(1, rounds + 1):
        order = order_of(round_no)
        orders[round_no] = ["fair" if fair else "fcfs" for fair in order]
        for fair in order:
            host = await servers.host(fair)
            for scenario in scenarios:
                load = mixed_load(round_no) if scenario == "work_conserving" else alone_load()
                label = "fair" if fair else "fcfs"
                print(f"round {round_no}: {scenario} on {label}", file=sys.stderr, flush=True)
                got = await throughput(host, load, warmup, seconds)
                measured[scenario].setdefault(round_no, {})[fair] = got
    results = {}
    for scenario in scenarios:
        rows = []
        for round_no, pair in measured[scenario].items():
            on_fair, on_fcfs = pair[True], pair[False]
            ratio = on_fair.output_tokens_per_s / max(on_fcfs.output_tokens_per_s, 1e-9)
            ttft_fair = on_fair.ttft_p50_s.get("alone")
            ttft_fcfs = on_fcfs.ttft_p50_s.get("alone")
            ttft_ratio = ttft_fair / ttft_fcfs if ttft_fair and ttft_fcfs else None
            rows.append(
                Round(round_no, orders[round_no], on_fair, on_fcfs, round(ratio, 4), _r(ttft_ratio))
            )
        median = round(statistics.median(r.ratio for r in rows), 4)
        ttfts = [r.ttft_ratio for r in rows if r.ttft_ratio is not None]
        median_ttft = round(statistics.median(ttfts), 4) if ttfts else None
        if scenario == "work_conserving":
            goal = f"median fair / FCFS output tokens/s >= {GOAL_WORK_CONSERVING}"
            met = median >= GOAL_WORK_CONSERVING
        else:
            noise = GOAL_ALONE_NOISE
            goal = f"median fair / FCFS output tokens/s and TTFT p50 within {noise:.0%} of 1"
            met = abs(median - 1) <= noise and (
                median_ttft is not None and abs(median_ttft - 1) <= noise
            )
        results[scenario] = CompareResult(
            scenario, seconds, warmup, rows, median, median_ttft, goal, met
        )
    return results


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------- tables


def _f(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "0"


def share_table(result: ShareResult) -> str:
    lines = [
        f"### {result.scenario} ({result.seconds:g} s after {result.warmup:g} s of warm-up)",
        "",
        "| key | weight | streams | output tokens | tokens/s | share | engine's share "
        "(last minute) | requests finished | tokens in chunks / usage | refused | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in key_table_rows(result.rows):
        lines.append(row)
    if result.ratio is not None:
        lines += ["", f"ratio: {result.ratio:.3f}"]
    lines += ["", f"goal ({result.goal}): {'met' if result.met else 'NOT met'}"]
    return "\n".join(lines)


def key_table_rows(rows: list[KeyRow]) -> Iterator[str]:
    for row in rows:
        yield (
            f"| {row.key} | {row.weight:g} | {row.streams} | {row.output_tokens} "
            f"| {row.tokens_per_s:.1f} | {row.share:.3f} | {_f(row.engine_share, '.3f')} "
            f"| {row.finished} | {_f(row.chunk_coverage, '.3f')} "
            f"| {_counts(row.refused)} | {_counts(row.errors)} |"
        )


def idle_table(result: IdleResult) -> str:
    lines = [
        f"### idle_return (C away {result.idle_seconds:g} s after {result.warmup:g} s with "
        "A and B)",
        "",
        "| window | s | A tokens | B tokens | C tokens | C's share | fair share "
        "| C's TTFT p50 (ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w in result.windows:
        lines.append(
            f"| {w.window} | {w.seconds:.1f} | {w.tokens['A']} | {w.tokens['B']} "
            f"| {w.tokens['C']} | {w.c_share:.3f} | {result.fair_share:.3f} "
            f"| {_ms(w.c_ttft_p50_s)} |"
        )
    lines += [
        "",
        "Over C's 30 s back:",
        "",
        "| key | weight | streams | output tokens | tokens/s | share | engine's share "
        "(last minute) | requests finished | tokens in chunks / usage | refused | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        *key_table_rows(result.rows),
        "",
        f"goal ({result.goal}): {'met' if result.met else 'NOT met'}",
    ]
    return "\n".join(lines)


def compare_table(result: CompareResult) -> str:
    alone = result.scenario == "alone"
    key = "alone" if alone else "short"
    lines = [
        f"### {result.scenario} (fair against FCFS, {result.seconds:g} s per server and round "
        f"after {result.warmup:g} s of warm-up)",
        "",
        "| round | order | fair output tok/s | FCFS output tok/s | fair / FCFS "
        "| fair prompt tok/s | FCFS prompt tok/s "
        f"| {key} TTFT p50 fair (ms) | FCFS (ms) |" + (" TTFT fair / FCFS |" if alone else ""),
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        + (" ---: |" if alone else ""),
    ]
    for r in result.rounds:
        line = (
            f"| {r.round} | {', '.join(r.order)} | {r.fair.output_tokens_per_s:.1f} "
            f"| {r.fcfs.output_tokens_per_s:.1f} | {r.ratio:.3f} "
            f"| {r.fair.prompt_tokens_per_s:.1f} | {r.fcfs.prompt_tokens_per_s:.1f} "
            f"| {_ms(r.fair.ttft_p50_s.get(key))} | {_ms(r.fcfs.ttft_p50_s.get(key))} |"
        )
        if alone:
            line += f" {_f(r.ttft_ratio, '.3f')} |"
        lines.append(line)
    lines += ["", f"median fair / FCFS output tok/s: {result.median_ratio:.3f}"]
    if alone:
        lines.append(f"median fair / FCFS TTFT p50: {_f(result.median_ttft_ratio, '.3f')}")
    lines += ["", f"goal ({result.goal}): {'met' if result.met else 'NOT met'}"]
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def write(out: Path, name: str, result: Any) -> None:
    (out / f"{name}.json").write_text(json.dumps(asdict(result), indent=2) + "\n")


async def run(args: argparse.Namespace, chosen: list[str], servers: Servers) -> bool:
    """Every chosen scenario; True when all ran (met or not)."""
    ok = True
    out: Path = args.output
    for scenario in (s for s in chosen if s in SHARE_SCENARIOS):
        print(f"{scenario} ...", file=sys.stderr, flush=True)
        try:
            host = await servers.host(True)
            result: ShareResult | IdleResult
            if scenario == "idle_return":
                result = await idle_return(
                    host, streams=args.streams, warmup=args.warmup, idle_seconds=args.idle_seconds
                )
                table = idle_table(result)
            else:
                run_share = equal if scenario == "equal" else weighted
                result = await run_share(
                    host, streams=args.streams, warmup=args.warmup, seconds=args.seconds
                )
                table = share_table(result)
        except (ServerDied, ServerNotReady, RuntimeError, httpx.HTTPError) as exc:
            ok = False
            print(f"\n{scenario} FAILED: {exc}\n", flush=True)
            continue
        write(out, scenario, result)
        print(f"\n{table}\n", flush=True)
    compared = [s for s in chosen if s not in SHARE_SCENARIOS]
    if compared:
        try:
            results = await compare(servers, compared, args.rounds, args.warmup, args.seconds)
        except (ServerDied, ServerNotReady, RuntimeError, httpx.HTTPError) as exc:
            print(f"\n{', '.join(compared)} FAILED: {exc}\n", flush=True)
            return False
        for scenario, compared_result in results.items():
            write(out, scenario, compared_result)
            print(f"\n{compare_table(compared_result)}\n", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, of {','.join(SCENARIOS)}",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="each measured window")
    parser.add_argument("--warmup", type=float, default=20.0, help="load before each window")
    parser.add_argument("--streams", type=int, default=8, help="per key (equal, weighted, idle)")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle_return's C away")
    parser.add_argument("--rounds", type=int, default=3, help="fair/FCFS rounds")
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=MAX_NUM_SEQS,
        help="engine seats of every server, fewer than the streams so that requests queue "
        "(0: vLLM's default)",
    )
    parser.add_argument("--server-args", default="", help="more `lilac-serve serve` flags")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    chosen = [s for s in args.scenarios.split(",") if s]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown or not chosen:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown)) or '(none)'}")
    if args.rounds < 1 or args.streams < 1 or args.seconds <= 0:
        parser.error("--rounds, --streams and --seconds must be positive")
    flags = shlex.split(args.server_args)
    if args.max_num_seqs > 0:
        flags = ["--max-num-seqs", str(args.max_num_seqs), *flags]
    args.output.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="lilac-fair-share-") as tmp:
        servers = Servers(Path(tmp), flags, args.output)
        try:
            ok = asyncio.run(run(args, chosen, servers))
        finally:
            servers.stop()
    return 0 if ok else 1
