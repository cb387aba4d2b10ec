"""The attack matrix: one key floods a real server while another asks short questions.

The victim sends a short request about once a second.

`make attacks`; a short version runs in `make test` (tests/e2e/test_attacks.py).

    python -m perf attacks [--attacks rag,prompts64,...] [--victim-requests 100]
        [--victim-interval 1.0] [--seconds S] [--server-args "--fair-share false"]
        [--label before]

The server runs with `--auth keys`, the default model and `--server-args` (split as a
shell would); the two keys are made through the admin API (the attacker's with no
limits but the default RPM lifted, so that only admission stands in its way).

The victim sends one short streamed chat (max_tokens 8, its own prompt each time), the
next when the previous has ended or `--victim-interval` after it started, whichever is
later, until `--victim-requests` have been answered (or as many have failed). First it
runs alone (its TTFT baseline, same server); then, for each attack, the attacker floods
for as long as the victim needs (it starts a moment before the victim and stops once the
victim is done). `--seconds` bounds every row for short runs: no victim request starts
after that long (the one in flight finishes; at least one is sent); without it, only the
request count ends a row.

The attacks: `rag` (24 concurrent streamed chats, each a fresh never-cached prompt of
about 1,250 tokens, max_tokens 64, each worker sending the next as one ends: a heavy
tenant against a light one), `prompts64`, `streams256`, `largest`, `long_prompts` and
`bad_requests` (see `attacks`); on deferred work and the routes beside it, `background`,
`batches` and `count_tokens` (perf/scenarios/deferred_attacks.py); on what a tenant can
hold, `uploads`, `half_bodies` and `followers` (perf/scenarios/storage_attacks.py).

Per row: what the attacker got (answers by status), what the victim saw (refusals; TTFT
p50, p95 and p99; p50 against the alone run's p50 and p95 against the alone run's p95),
where the victim's mean TTFT went, and the tokens billed to both keys (`/admin/usage`)
against what the engine counted (`vllm:prompt_tokens_total` +
`vllm:generation_tokens_total` deltas from /metrics), and the server's memory (the RSS of
its processes) and disk (its data directory's files) before and after.

The split of the victim's mean TTFT: its mean admission queue wait (per request: the
`queue_s` of the server's access lines, found by the X-Request-Id each victim request
sends), its mean engine queue wait (its key's `engine_queue_wait_s` on `GET
/admin/fairness`, read as the victim finishes, while the attack still runs: a mean over
the last minute of the row, measured by the fair scheduler from a request's arrival at
the engine to its first scheduled step), the engine's step times over that minute
(`engine_steps` there: a request arriving mid-step waits for it to end) and the rest
(TTFT mean less both waits: its own prefill and the transport). With `--fair-share
false` the fair scheduler publishes nothing: the engine columns are `-` and the rest
holds the engine wait too.

The goal per attack: the victim refused 0 times, TTFT p50 within 2x of alone's p50 and
p95 within 5x of alone's p95; where it is not met, the row says whether the victim's
engine wait stays within one step (its mean at most the step p95).

Prints two markdown tables (the attacker's side, the victim's); everything goes to
perf/out/attacks/LABEL.json (`--label`, default `results`), the server log beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import random
import re
import secrets
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.results import output
from perf.harness.servers import Server, keys_server
from perf.scenarios.deferred_attacks import deferred_attacks
from perf.scenarios.storage_attacks import storage_attacks

OUT = output("attacks")
ADMIN_KEY = "attacks-admin-key"
MAX_MODEL_LEN = 2048
GOAL_P50_RATIO = 2.0  # the victim's TTFT p50 under attack, against alone's p50
GOAL_P95_RATIO = 5.0  # the victim's TTFT p95 under attack, against alone's p95
VICTIM_TIMEOUT_S = 120.0  # a victim request not answered by then counts as failed
BUILD_UP_S = 2.0  # the flood runs this long before the victim starts
# The `rag` attack: fresh prompts of about 1,250 tokens (each word below is one token of
# SmolLM2's tokenizer; the request's own lines add about 50, the chat template about 30).
RAG_WORKERS = 24
RAG_WORDS = 1170
RAG_MAX_TOKENS = 64
_RAG_TEXT = (
    "the of and to in is was for on that with as by at from it his an were are which "
    "this be or has had not but first one their its new after who they have her she two "
    "been other when there all during into school time may years more most only over "
    "city some world would where later up such used many can state about national out "
    "known university united then made also team three game river house water north "
    "south east west year people part group early home between film music war family "
    "last album series season second best under public old record small age high body "
    "light stone market road field rain wind power garden tower bridge paper story "
    "letter night"
)
RAG_VOCABULARY = tuple(_RAG_TEXT.split())


@dataclass
class Target:
    """A running server and the two keys."""

    url: str
    attacker: str
    victim: str
    keys: dict[str, str]  # "attacker"/"victim" -> key id
    server: Server | None = None
    admin_key: str = ADMIN_KEY

    def client(self, secret: str, connections: int = 16) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        headers = {"Authorization": f"Bearer {secret}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=600, limits=limits)


@dataclass(frozen=True)
class Pace:
    """How the victim sends: `requests` answered ones wanted (it stops early once as
    many have failed), one every `interval_s` at most (the next starts when the previous
    has ended or `interval_s` after it started, whichever is later), none started after
    `seconds` (None: no bound; at least one is sent)."""

    requests: int = 100
    interval_s: float = 1.0
    seconds: float | None = None


@dataclass
class VictimRun:
    id_prefix: str  # of its requests' X-Request-Id (`<id_prefix><n>`)
    ttfts: list[float]  # ms, of its answered requests
    failures: list[str]  # `status code` of each refusal, or what went wrong
    sent: int
    ok: int  # answered 200 (admitted)
    seconds: float


@dataclass
class Row:
    attack: str
    what: str
    attacker: dict[str, int] = field(default_factory=dict)  # status (and code) -> count
    attacker_cut: int = 0  # its requests still waiting or running when the attack stopped
    # Its engine requests (a prompt each) that admission let in, and refused by reason.
    attacker_tickets: int = 0
    attacker_refused_tickets: dict[str, int] = field(default_factory=dict)
    victim_requests: int = 0
    victim_refusals: int = 0
    victim_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long the victim ran
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_p99_ms: float | None = None
    ttft_mean_ms: float | None = None
    p50_vs_alone: float | None = None  # p50 / alone's p50
    p95_vs_alone: float | None = None  # p95 / alone's p95
    # The split of the victim's mean TTFT (see module): admission's queue wait, the
    # engine's queue wait (None: the fair scheduler published none), the rest.
    admission_wait_ms: float | None = None
    engine_wait_ms: float | None = None
    rest_ms: float | None = None
    # The engine's steps over the last minute: count, mean_ms, p95_ms, max_ms.
    engine_steps: dict[str, float] | None = None
    goal_met: bool | None = None  # None: the alone row
    engine_wait_within_step: bool | None = None  # engine wait mean <= step p95
    billed_tokens: int = 0
    engine_tokens: int = 0
    unfinished_after: float = 0.0  # engine requests left once the attack stopped
    # The RSS of the server's processes (MB) before the row and after it settled.
    memory_before_mb: float | None = None
    memory_after_mb: float | None = None
    # The bytes of the server's data directory (MB) before the row and after it settled.
    disk_before_mb: float | None = None
    disk_after_mb: float | None = None


# ---------------------------------------------------------------- the server


def start(
    workdir: Path, extra_args: tuple[str, ...] = (), attacker_max_concurrent: int | None = None
) -> Target:
    """`lilac-serve serve --auth keys` on a free port, and the two keys (the attacker's
    with no limit but `attacker_max_concurrent`, RPM lifted)."""
    server = keys_server(workdir, ADMIN_KEY, extra_args)
    try:
        return target_on(server, ADMIN_KEY, attacker_max_concurrent)
    except BaseException:
        server.stop()
        raise


def target_on(server: Server, admin_key: str, attacker_max_concurrent: int | None = None) -> Target:
    """The two keys, made through the admin API of a running `--auth keys` server (one
    that other keys share too: the rows are told apart by key)."""
    admin = {"Authorization": f"Bearer {admin_key}"}
    made = {}
    attacker = {"rpm": None, "max_concurrent": attacker_max_concurrent}
    for name, limits in (("attacker", attacker), ("victim", {})):
        response = httpx.post(
            f"{server.base_url}/admin/keys",
            json={"name": name, **limits},
            headers=admin,
            timeout=30,
        )
        response.raise_for_status()
        made[name] = response.json()
    return Target(
        server.base_url,
        made["attacker"]["key"],
        made["victim"]["key"],
        {name: record["id"] for name, record in made.items()},
        server=server,
        admin_key=admin_key,
    )


def kv_budget(target: Target) -> int:
    """The KV tokens admission lets requests claim (known once a request has run)."""
    admin = {"Authorization": f"Bearer {target.admin_key}"}
    snapshot = httpx.get(f"{target.url}/admin/admission", headers=admin, timeout=30).json()
    return int(snapshot.get("kv_budget_tokens") or 0)


def admission_counters(target: Target) -> collections.Counter[str]:
    admin = {"Authorization": f"Bearer {target.admin_key}"}
    snapshot = httpx.get(f"{target.url}/admin/admission", headers=admin, timeout=30).json()
    return collections.Counter(snapshot["counters"])


def engine_tokens(url: str) -> int:
    """Prompt plus generated tokens the engine has counted (every model, every label)."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def unfinished(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("lilac_engine_unfinished_requests "):
            return float(line.split()[1])
    raise RuntimeError("metric lilac_engine_unfinished_requests missing")


def billed(target: Target) -> dict[str, int]:
    """Prompt plus completion tokens billed so far, per key name."""
    admin = {"Authorization": f"Bearer {target.admin_key}"}
    rows = httpx.get(f"{target.url}/admin/usage?by=key", headers=admin, timeout=30).json()
    by_id = {row["key"]: row["prompt_tokens"] + row["completion_tokens"] for row in rows["data"]}
    return {name: by_id.get(key_id, 0) for name, key_id in target.keys.items()}


def log_offset(target: Target) -> int:
    """Where the server's log ends now (its access lines from here on are new)."""
    if target.server is None:
        return 0
    try:
        return target.server.log_path.stat().st_size
    except OSError:
        return 0


_FIELD = re.compile(r"(\w+)=(\S+)")
_TEXT_ID = re.compile(r" lilac\.access \[([^\]]+)\]: ")


def admission_waits(target: Target, offset: int, id_prefix: str) -> list[float]:
    """The admission queue waits (s) of the victim's requests logged after `offset`: the
    `queue_s` of the access lines whose request id (the victim's own X-Request-Id)
    starts with `id_prefix` (text or JSON log lines; a request never admitted has
    none)."""
    if target.server is None:
        return []
    try:
        with target.server.log_path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    waits = []
    for line in text.splitlines():
        if "access" not in line:
            continue
        fields: dict[str, Any] = {}
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                fields = json.loads(line)
        elif (found := _TEXT_ID.search(line)) is not None:
            fields = {**dict(_FIELD.findall(line[found.end() :])), "request_id": found[1]}
        if fields.get("event") != "access":
            continue
        if not str(fields.get("request_id", "")).startswith(id_prefix):
            continue
        with contextlib.suppress(KeyError, TypeError, ValueError):
            waits.append(float(fields["queue_s"]))
    return waits


def engine_view(target: Target) -> tuple[float | None, dict[str, float] | None]:
    """The victim key's mean engine queue wait (s) over the last minute and the engine's
    step times (ms) from GET /admin/fairness; None where nothing is published (the fair
    scheduler is off, or the victim ran no request in the last minute)."""
    admin = {"Authorization": f"Bearer {target.admin_key}"}
    response = httpx.get(
        f"{target.url}/admin/fairness",
        params={"model": DEFAULT_MODEL_NAME},
        headers=admin,
        timeout=30,
    )
    if response.status_code != 200:
        return None, None
    (model,) = response.json()["data"]
    if not model["fair_share"]:
        return None, None
    wait = next(
        (
            float(t["engine_queue_wait_s"])
            for t in model["tenants"]
            if t["key_id"] == target.keys["victim"] and not t["deferred"]
        ),
        None,
    )
    steps = model.get("engine_steps") or {}
    step_ms = None
    if steps.get("count"):
        step_ms = {"count": float(steps["count"])}
        step_ms.update({f"{n}_ms": float(steps[f"{n}_s"]) * 1000 for n in ("mean", "p95", "max")})
    return wait, step_ms


def disk_mb(target: Target) -> float | None:
    """The bytes of the files in the server's `--data-dir`, in MB (None: not known)."""
    argv = target.server.argv if target.server is not None else []
    folders = [value for flag, value in itertools.pairwise(argv) if flag == "--data-dir"]
    if not folders:
        return None
    total = 0
    for root, _, names in os.walk(folders[-1]):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return round(total / 1e6, 1)


def memory_mb(target: Target) -> float | None:
    """The RSS of the server's processes, in MB (None: not a server of ours)."""
    if target.server is None:
        return None
    return round(target.server.rss_bytes() / 1e6, 1)


async def settle(target: Target, timeout_s: float = 60.0) -> float:
    """Wait until the engine runs nothing (a stopped attack's requests are aborted)."""
    deadline = time.monotonic() + timeout_s
    left = unfinished(target.url)
    while left > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        left = unfinished(target.url)
    await asyncio.sleep(1.0)  # usage rows of aborted requests are written in the background
    return left


# ---------------------------------------------------------------- the attacks


def chat_body(text: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        **extra,
    }


Send = Callable[[httpx.AsyncClient, int], Awaitable[tuple[int, str | None]]]


def _outcome(response: httpx.Response) -> tuple[int, str | None]:
    code = None
    if response.status_code >= 400:
        with contextlib.suppress(Exception):
            code = response.json()["error"]["code"]
    return response.status_code, code


async def _post(client: httpx.AsyncClient, path: str, body: Any) -> tuple[int, str | None]:
    return _outcome(await client.post(path, json=body))


async def _stream(client: httpx.AsyncClient, path: str, body: Any) -> tuple[int, str | None]:
    async with client.stream("POST", path, json=body) as response:
        if response.status_code >= 400:
            await response.aread()
            return _outcome(response)
        async for _ in response.aiter_raw():
            pass
    return 200, None


def rag_prompt(i: int) -> str:
    """Request `i`'s prompt for `rag`: a question over retrieved passages of about 1,170
    words drawn at random (a generator seeded by `i`), so that no two requests share a
    prefix the cache could serve beyond the chat template's first lines."""
    rng = random.Random(f"rag {i}")
    words = [rng.choice(RAG_VOCABULARY) for _ in range(RAG_WORDS)]
    passages = [" ".join(words[p : p + 200]) for p in range(0, RAG_WORDS, 200)]
    body = "\n\n".join(f"[{n + 1}] {text}." for n, text in enumerate(passages))
    return f"Request {i}. Passages:\n\n{body}\n\nWhich places do the passages name?"


def prompt_tokens(target: Target, text: str) -> int | None:
    """`text` as one user message, in tokens of the model's own template (/tokenize)."""
    response = httpx.post(
        f"{target.url}/tokenize",
        json={"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": text}]},
        headers={"Authorization": f"Bearer {target.attacker}"},
        timeout=30,
    )
    return int(response.json()["count"]) if response.status_code == 200 else None


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    workers: int
    send: Send
    # What ends the attack's leftovers once it stops (its batches, background work).
    cleanup: Callable[[Target], Awaitable[None]] | None = None


def attacks(target: Target) -> dict[str, Attack]:
    def prompts64(client: httpx.AsyncClient, i: int) -> Awaitable[tuple[int, str | None]]:
        prompts = [f"Attack {i}.{p}: write a long story about ships." for p in range(64)]
        body = {"model": DEFAULT_MODEL_NAME, "prompt": prompts, "max_tokens": 512}
        return _post(client, "/v1/completions", {**body, "ignore_eos": True})

    def streams(client: httpx.AsyncClient, i: int) -> Awaitable[tuple[int, str | None]]:
        body = chat_body(f"Stream {i}: tell a long story.", 512, stream=True, ignore_eos=True)
        return _stream(client, "/v1/chat/completions", body)

    # The largest output one request may ask for: the whole context after a short
    # prompt, times the largest `n` whose KV claim still fits the server's budget.
    max_tokens = MAX_MODEL_LEN - 64
    budget = min(kv_budget(target) or 32768, 32768)
    n = max(1, min(128, (budget - 64) // max_tokens))

    def largest(client: httpx.AsyncClient, i: int) -> Awaitable[tuple[int, str | None]]:
        body = chat_body(f"Big {i}: count to a million.", max_tokens, n=n, ignore_eos=True)
        return _post(client, "/v1/chat/completions", {**body, "temperature": 1.0})

    # 480 of these words are about 1,800 tokens of SmolLM2's tokenizer: near the context.
    long_text = " ".join(f"word{w}" for w in range(480))

    def long_prompts(client: httpx.AsyncClient, i: int) -> Awaitable[tuple[int, str | None]]:
        return _post(client, "/v1/chat/completions", chat_body(f"{i} {long_text}", 1))

    def bad(client: httpx.AsyncClient, i: int) -> Awaitable[tuple[int, str | None]]:
        kinds = (
            {**chat_body("x", 8), "n": 0},
            {**chat_body("x", 8), "model": "m" * 300},
            {**chat_body("x", 8), "max_tokens": 10**9},
            {"model": DEFAULT_MODEL_NAME, "messages": "not a list"},
        )
        return _post(client, "/v1/chat/completions", kinds[i % len(kinds)])

    def rag(client: httpx.AsyncClient, i: int) -> Awaitable[tuple[int, str | None]]:
        body = chat_body(rag_prompt(i), RAG_MAX_TOKENS, stream=True, ignore_eos=True)
        return _stream(client, "/v1/chat/completions", body)

    long_what = "~1,800-token prompts, max_tokens 1, 32 at once"
    rag_tokens = prompt_tokens(target, rag_prompt(0))
    rag_what = (
        f"{RAG_WORKERS} concurrent streams, each a fresh "
        f"{rag_tokens if rag_tokens is not None else '~1,250'}-token prompt, "
        f"max_tokens {RAG_MAX_TOKENS}"
    )
    return {
        a.name: a
        for a in (
            Attack("rag", rag_what, RAG_WORKERS, rag),
            Attack("prompts64", "64-prompt completions, max_tokens 512, 17 at once", 17, prompts64),
            Attack("streams256", "256 concurrent streams, max_tokens 512", 256, streams),
            Attack("largest", f"n={n} x max_tokens={max_tokens}, 8 at once", 8, largest),
            Attack("long_prompts", long_what, 32, long_prompts),
            Attack("bad_requests", "invalid requests (400/404), 64 at once", 64, bad),
            *(Attack(name, *parts) for name, parts in deferred_attacks(target).items()),
            *(Attack(name, *parts) for name, parts in storage_attacks(target).items()),
        )
    }  # fmt: skip


async def flood(
    target: Target, attack: Attack, stop: asyncio.Event
) -> tuple[collections.Counter[str], int]:
    """`attack.workers` loops sending until `stop`; a refused one waits 50 ms (a client
    honouring nothing, but not spinning). The answers by status, and how many requests
    were still open when it stopped."""
    got: collections.Counter[str] = collections.Counter()
    open_now = 0
    async with target.client(target.attacker, attack.workers) as client:

        async def worker(w: int) -> None:
            nonlocal open_now
            i = w
            while not stop.is_set():
                i += attack.workers
                open_now += 1
                try:
                    status, code = await attack.send(client, i)
                except httpx.HTTPError as exc:
                    got[type(exc).__name__] += 1
                    await asyncio.sleep(0.05)
                    continue
                finally:
                    open_now -= 1
                got[f"{status} {code}" if code else str(status)] += 1
                if status >= 400:
                    await asyncio.sleep(0.05)

        tasks = [asyncio.create_task(worker(w)) for w in range(attack.workers)]
        await stop.wait()
        cut = open_now
        for task in tasks:
            task.cancel()  # in-flight requests: the client goes away, the server aborts
        await asyncio.gather(*tasks, return_exceptions=True)
    return got, cut


async def victim(target: Target, pace: Pace, tag: str) -> VictimRun:
    """Short streamed chat requests, one at a time, each its own prompt and request id,
    as `pace` says (see `Pace`): TTFTs (ms) and the refusals or failures, as `status
    code` strings."""
    ttfts: list[float] = []
    failures: list[str] = []
    ok = 0
    id_prefix = f"victim-{secrets.token_hex(4)}-"

    async def one(client: httpx.AsyncClient, i: int) -> None:
        nonlocal ok
        body = chat_body(f"{tag} {i}: name a colour and a fruit.", 8, stream=True)
        headers = {"X-Request-Id": f"{id_prefix}{i}"}
        started = time.monotonic()
        try:
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, headers=headers
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    status, code = _outcome(response)
                    failures.append(f"{status} {code}")
                    return
                ok += 1
                first = None
                async for line in response.aiter_lines():
                    if first is None and line.startswith("data: {") and '"content"' in line:
                        first = time.monotonic()
                if first is None:
                    failures.append("200 no_first_token")
                else:
                    ttfts.append((first - started) * 1000)
        except httpx.HTTPError as exc:
            failures.append(type(exc).__name__)

    async with target.client(target.victim) as client:
        client.timeout = httpx.Timeout(VICTIM_TIMEOUT_S)
        start = time.monotonic()
        sent = 0
        while True:
            began = time.monotonic()
            await one(client, sent)
            sent += 1
            done = len(ttfts) >= pace.requests or len(failures) >= pace.requests
            due = max(time.monotonic(), began + pace.interval_s)
            if done or (pace.seconds is not None and due - start >= pace.seconds):
                break
            await asyncio.sleep(due - time.monotonic())
    return VictimRun(id_prefix, ttfts, failures, sent, ok, time.monotonic() - start)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def alone(target: Target, pace: Pace) -> Row:
    before_bill, before_engine = billed(target), engine_tokens(target.url)
    offset = log_offset(target)
    run = await victim(target, pace, "alone")
    wait, steps = engine_view(target)
    row = Row("alone", "the victim alone")
    _fill(row, run)
    row.unfinished_after = await settle(target)
    _split(row, admission_waits(target, offset, run.id_prefix), wait, steps)
    _bill(row, target, before_bill, before_engine)
    return row


async def run_attack(
    target: Target, attack: Attack, pace: Pace, baseline: Row | None = None
) -> Row:
    """The attacker floods while the victim runs as `pace` says; the row is judged
    against `baseline` (the alone row) when given."""
    before_bill, before_engine = billed(target), engine_tokens(target.url)
    before_admission = admission_counters(target)
    memory_before, disk_before = memory_mb(target), disk_mb(target)
    stop = asyncio.Event()
    flooding = asyncio.create_task(flood(target, attack, stop))
    build_up = BUILD_UP_S if pace.seconds is None else min(BUILD_UP_S, pace.seconds / 4)
    await asyncio.sleep(build_up)  # the flood builds up first
    offset = log_offset(target)
    run = await victim(target, pace, attack.name)
    wait, steps = engine_view(target)  # at once: the attack still runs, the minute is fresh
    stop.set()
    got, cut = await flooding
    if attack.cleanup is not None:
        await attack.cleanup(target)
    row = Row(attack.name, attack.what, dict(got), cut)
    _fill(row, run)
    row.unfinished_after = await settle(target)
    row.memory_before_mb, row.memory_after_mb = memory_before, memory_mb(target)
    row.disk_before_mb, row.disk_after_mb = disk_before, disk_mb(target)
    _split(row, admission_waits(target, offset, run.id_prefix), wait, steps)
    _tickets(row, admission_counters(target) - before_admission, run)
    _bill(row, target, before_bill, before_engine)
    if baseline is not None:
        judge(row, baseline)
    return row


def _tickets(row: Row, delta: collections.Counter[str], run: VictimRun) -> None:
    """The attacker's part of admission's counters: all of them, less the victim's
    (one ticket per request; its refusals by code)."""
    row.attacker_tickets = delta["admitted"] - run.ok
    refused = collections.Counter(
        {k.removeprefix("rejected_"): v for k, v in delta.items() if k.startswith("rejected_")}
    )
    refused.subtract(r.split(" ", 1)[-1] for r in run.failures)
    row.attacker_refused_tickets = {k: v for k, v in refused.items() if v > 0}


def _fill(row: Row, run: VictimRun) -> None:
    row.victim_requests = run.sent
    row.victim_refusals = len(run.failures)
    row.victim_errors = run.failures
    row.seconds = round(run.seconds, 1)
    row.ttft_p50_ms = _round(percentile(run.ttfts, 0.5))
    row.ttft_p95_ms = _round(percentile(run.ttfts, 0.95))
    row.ttft_p99_ms = _round(percentile(run.ttfts, 0.99))
    row.ttft_mean_ms = _round(sum(run.ttfts) / len(run.ttfts) if run.ttfts else None)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _split(
    row: Row, admission_s: list[float], engine_s: float | None, steps: dict[str, float] | None
) -> None:
    """The victim's mean TTFT as admission's wait + the engine's wait + the rest."""
    if admission_s:
        row.admission_wait_ms = _round(sum(admission_s) / len(admission_s) * 1000)
    row.engine_wait_ms = _round(engine_s * 1000 if engine_s is not None else None)
    row.engine_steps = None if steps is None else {k: round(v, 1) for k, v in steps.items()}
    if row.ttft_mean_ms is not None:
        waits = (row.admission_wait_ms or 0.0) + (row.engine_wait_ms or 0.0)
        row.rest_ms = _round(row.ttft_mean_ms - waits)


def judge(row: Row, baseline: Row) -> None:
    """The ratios against the alone row, the goal, and where it is missed whether the
    victim's engine wait stays within one step."""
    if row.ttft_p50_ms is not None and baseline.ttft_p50_ms:
        row.p50_vs_alone = round(row.ttft_p50_ms / baseline.ttft_p50_ms, 3)
    if row.ttft_p95_ms is not None and baseline.ttft_p95_ms:
        row.p95_vs_alone = round(row.ttft_p95_ms / baseline.ttft_p95_ms, 3)
    row.goal_met = (
        row.victim_refusals == 0
        and row.p50_vs_alone is not None
        and row.p50_vs_alone <= GOAL_P50_RATIO
        and row.p95_vs_alone is not None
        and row.p95_vs_alone <= GOAL_P95_RATIO
    )
    if row.engine_wait_ms is not None and row.engine_steps is not None:
        row.engine_wait_within_step = row.engine_wait_ms <= row.engine_steps["p95_ms"]


def _bill(row: Row, target: Target, before: dict[str, int], engine_before: int) -> None:
    after = billed(target)
    row.billed_tokens = sum(after.values()) - sum(before.values())
    row.engine_tokens = engine_tokens(target.url) - engine_before


async def matrix(target: Target, names: list[str], pace: Pace) -> list[Row]:
    base = await alone(target, pace)
    rows = [base]
    known = attacks(target)  # after a request has run: the KV budget is known
    for name in names:
        rows.append(await run_attack(target, known[name], pace, base))
    return rows


# ---------------------------------------------------------------- the tables


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def attacker_table(rows: list[Row]) -> str:
    lines = [
        "| attack | attacker's answers | attacker's prompts admitted / refused "
        "| victim refused | billed tokens | engine tokens | server memory before / after (MB) "
        "| data directory before / after (MB) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        got = ", ".join(f"{k}: {v}" for k, v in sorted(row.attacker.items()))
        if row.attacker_cut:
            got += f"{', ' if got else ''}open at the end: {row.attacker_cut}"
        refused = ", ".join(f"{k} {v}" for k, v in sorted(row.attacker_refused_tickets.items()))
        tickets = "-" if row.attack == "alone" else f"{row.attacker_tickets} / {refused or 0}"
        lines.append(
            f"| {row.attack}: {row.what} | {got or '-'} | {tickets} | {row.victim_refusals} of "
            f"{row.victim_requests} | {row.billed_tokens} | {row.engine_tokens} "
            f"| {_mb(row.memory_before_mb)} / {_mb(row.memory_after_mb)} "
            f"| {_mb(row.disk_before_mb)} / {_mb(row.disk_after_mb)} |"
        )
    return "\n".join(lines)


def goal_cell(row: Row) -> str:
    if row.goal_met is None:
        return "-"
    if row.goal_met:
        return "met"
    if row.engine_wait_within_step is None:
        return "NOT met (engine wait unknown)"
    within = "within" if row.engine_wait_within_step else "beyond"
    return f"NOT met (engine wait {within} one step)"


def victim_table(rows: list[Row]) -> str:
    lines = [
        "| attack | victim answered / sent (s) | TTFT p50 / p95 / p99 (ms) | p50 vs alone p50 "
        "| p95 vs alone p95 | TTFT mean = admission wait + engine wait + rest (ms) "
        "| engine steps mean / p95 / max (ms) | goal |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        steps = row.engine_steps
        step_cells = (
            "-"
            if steps is None
            else f"{steps['mean_ms']:.0f} / {steps['p95_ms']:.0f} / {steps['max_ms']:.0f}"
        )
        answered = row.victim_requests - row.victim_refusals
        lines.append(
            f"| {row.attack} | {answered} / {row.victim_requests} ({row.seconds:.0f} s) "
            f"| {_ms(row.ttft_p50_ms)} / {_ms(row.ttft_p95_ms)} / {_ms(row.ttft_p99_ms)} "
            f"| {_ratio(row.p50_vs_alone)} | {_ratio(row.p95_vs_alone)} "
            f"| {_ms(row.ttft_mean_ms)} = {_ms(row.admission_wait_ms)} + "
            f"{_ms(row.engine_wait_ms)} + {_ms(row.rest_ms)} | {step_cells} | {goal_cell(row)} |"
        )
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    return f"{attacker_table(rows)}\n\n{victim_table(rows)}"


def goal_line(rows: list[Row]) -> str:
    missed = [r for r in rows if r.goal_met is False]
    line = (
        f"goal (victim refused 0 times, TTFT p50 within {GOAL_P50_RATIO:g}x of alone's p50, "
        f"p95 within {GOAL_P95_RATIO:g}x of alone's p95): "
        f"{'met' if not missed else 'NOT met'}"
    )
    for row in missed:
        line += f"\n  {row.attack}: NOT met"
        if row.engine_wait_ms is None or row.engine_steps is None:
            line += "; the engine wait is unknown (the fair scheduler published none)"
        else:
            within = "within" if row.engine_wait_within_step else "beyond"
            line += (
                f"; the victim's engine wait stays {within} one step (mean "
                f"{row.engine_wait_ms:.0f} ms, step p95 {row.engine_steps['p95_ms']:.0f} ms)"
            )
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = (
        "rag,prompts64,streams256,largest,long_prompts,bad_requests,background,batches,"
        "count_tokens,uploads,half_bodies,followers"
    )
    parser.add_argument("--attacks", default=names, help=f"comma-separated, of {names}")
    parser.add_argument(
        "--victim-requests",
        type=int,
        default=100,
        help="answered victim requests per row (alone and each attack)",
    )
    parser.add_argument(
        "--victim-interval",
        type=float,
        default=1.0,
        help="seconds from one victim request's start to the next's, at least",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="bound per row: no victim request starts after this long (default: none)",
    )
    parser.add_argument(
        "--server-args",
        default="",
        help='more `lilac-serve serve` flags, one string, e.g. "--fair-share false"',
    )
    parser.add_argument("--label", default="results", help="names the results: OUTPUT/LABEL.json")
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument(
        "--attacker-max-concurrent",
        type=int,
        default=None,
        help="the attacker key's max_concurrent (default: unlimited)",
    )
    args = parser.parse_args(argv)
    chosen = [a for a in args.attacks.split(",") if a]
    unknown = set(chosen) - set(names.split(","))
    if unknown:
        parser.error(f"unknown attacks: {', '.join(sorted(unknown))}")
    if args.victim_requests < 1:
        parser.error("--victim-requests: at least 1")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", args.label):
        parser.error("--label: letters, digits, '.', '_' and '-' only")
    server_args = tuple(shlex.split(args.server_args))
    pace = Pace(args.victim_requests, args.victim_interval, args.seconds)
    args.output.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="lilac-attacks-") as tmp:
        target = start(Path(tmp), server_args, attacker_max_concurrent=args.attacker_max_concurrent)
        try:
            rows = asyncio.run(matrix(target, chosen, pace))
        finally:
            if target.server is not None:
                target.server.stop()
                log = Path(tmp) / "server.log"
                (args.output / f"{args.label}.server.log").write_bytes(log.read_bytes())
    results = {
        "label": args.label,
        "server_args": list(server_args),
        "pace": asdict(pace),
        "goal": {"p50_vs_alone": GOAL_P50_RATIO, "p95_vs_alone": GOAL_P95_RATIO},
        "rows": [asdict(r) for r in rows],
    }
    (args.output / f"{args.label}.json").write_text(json.dumps(results, indent=2))
    print(table(rows))
    print(f"\n{goal_line(rows)}")
    return 0
