"""Does the worst request each endpoint accepts stall the event loop?

Starts a real server (`lilac-serve serve`, default model), keeps 16 streams in
flight, and sends, one kind at a time, the largest or most expensive request each
endpoint accepts (schemas at their bounds, JSON at the depth bound, a megabyte of text
to /tokenize and to chat, pathological tool-call arguments). Meanwhile /health is
polled every 50 ms. Reports, per phase, the inter-token gap p99 of the streams, the
slowest /health answer and the worst event-loop lag the server itself recorded (the
`lilac_event_loop_lag_seconds` buckets that gained samples during the phase: "<= 50"
means every sample was under 50 ms), beside a baseline phase without the extra request.

`--shapes corpus` sends the adversarial corpus instead (perf/harness/corpus.py:
unclosed strings of escapes, backslash runs, deep brackets, huge numbers, `\\u` escapes
and lone surrogates, 10,000 messages, long tool-call arguments, wide `logit_bias`, long
stop strings, the completions schema check, wrapped data URIs), as raw bytes.

    HF_HUB_OFFLINE=1 .venv/bin/python -m perf loop-stall [--port 8471] [--rounds 3]
        [--shapes bounds|corpus|all] [--match TEXT]

Targets: a gap p99 at most 50 ms over the baseline's, /health within 100 ms, loop lag
within 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

import httpx

from app.transport.json_limits import MAX_BODY_DEPTH
from engine.schema_bounds import MAX_SCHEMA_CHARS, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES
from perf.harness.corpus import stall_bodies
from perf.harness.results import output
from perf.harness.servers import Server, lilac_argv

STREAMS = 16
STREAM_TOKENS = 48
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "Tell me a long story about the sea."}]


def wide_schema(values: int) -> dict[str, Any]:
    """An object schema of about `values` values (two per property)."""
    count = (values - 3) // 2
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(count)}}


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range((levels - 1) // 2):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


Body = dict[str, Any] | bytes
LAG_METRIC = "lilac_event_loop_lag_seconds_bucket"


def worst_requests() -> dict[str, tuple[str, Body]]:
    """Per kind: (path, body), each at the bounds the server accepts."""
    chat = {"model": MODEL, "messages": USER, "max_tokens": 4}
    deep_value: Any = 1
    for _ in range(MAX_BODY_DEPTH - 2):
        deep_value = [deep_value]
    tools = [
        {
            "type": "function",
            "function": {"name": f"f{i}", "parameters": wide_schema(MAX_SCHEMA_NODES - 10)},
        }
        for i in range(4)
    ]
    long_enum = {
        "type": "string",
        "enum": ["x" * 999 + str(i) for i in range(MAX_SCHEMA_CHARS // 1010)],
    }
    args = "[" * 31 + "1" + "]" * 31
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": args * 2000}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    megabyte = "lorem ipsum " * 87_000
    fmt = lambda schema: {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}  # noqa: E731
    return {
        "chat: 4 tools at the schema bound": ("/v1/chat/completions", {**chat, "tools": tools}),
        "chat: response_format at the node bound": (
            "/v1/chat/completions",
            {**chat, "response_format": fmt(wide_schema(MAX_SCHEMA_NODES - 10))},
        ),
        "chat: response_format at the depth bound": (
            "/v1/chat/completions",
            {**chat, "response_format": fmt(deep_schema(MAX_SCHEMA_DEPTH))},
        ),
        "chat: enum at the character bound": (
            "/v1/chat/completions",
            {**chat, "response_format": fmt(long_enum)},
        ),
        "chat: JSON at the depth bound": ("/v1/chat/completions", {**chat, "extra": deep_value}),
        "chat: 1 MB of text": (
            "/v1/chat/completions",
            {**chat, "messages": [{"role": "user", "content": megabyte}]},
        ),
        "chat: 250 kB of tool-call arguments": (
            "/v1/chat/completions",
            {**chat, "messages": history},
        ),
        "completions: 1 MB prompt": (
            "/v1/completions",
            {"model": MODEL, "prompt": megabyte, "max_tokens": 4},
        ),
        "tokenize: 1 MB prompt": ("/tokenize", {"model": MODEL, "prompt": megabyte}),
        "tokenize: 250 kB of tool-call arguments": (
            "/tokenize",
            {"model": MODEL, "messages": history},
        ),
    }


async def stream_gaps(http: httpx.AsyncClient, seed: int) -> list[float]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Story number {seed} about the sea."}],
        "max_tokens": STREAM_TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    gaps: list[float] = []
    last = None
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.perf_counter()
            if last is not None:
                gaps.append(now - last)
            last = now
    return gaps[1:]  # from the second token: the first gap includes queueing


async def poll_health(http: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        await http.get("/health")
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)
    return latencies


def lag_buckets(metrics: str) -> dict[float, float]:
    """Cumulative sample counts of the loop-lag histogram, by upper bound (seconds)."""
    buckets = {}
    for line in metrics.splitlines():
        if line.startswith(LAG_METRIC + "{"):
            labels, value = line.rsplit(" ", 1)
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(bound)] = float(value)
    return buckets


def worst_lag_ms(before: dict[float, float], after: dict[float, float]) -> float:
    """The smallest bucket bound holding every sample taken between the two readings
    (inf when one was over the top bucket; 0 when none was taken)."""
    total = after.get(float("inf"), 0) - before.get(float("inf"), 0)
    for bound in sorted(after):
        if after[bound] - before.get(bound, 0) >= total:
            return 1000 * bound if total else 0.0
    return float("inf")


async def send(http: httpx.AsyncClient, path: str, body: Body) -> httpx.Response:
    if isinstance(body, bytes):
        return await http.post(path, content=body, headers={"content-type": "application/json"})
    return await http.post(path, json=body)


async def phase(base_url: str, extra: tuple[str, Body] | None, seed: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as http:
        lag_before = lag_buckets((await http.get("/metrics")).text)
        stop = asyncio.Event()
        health = asyncio.create_task(poll_health(http, stop))
        streams = [asyncio.create_task(stream_gaps(http, seed * 100 + i)) for i in range(STREAMS)]
        status = None
        extra_s = None
        if extra is not None:
            await asyncio.sleep(2.0)  # streams under way
            started = time.perf_counter()
            response = await send(http, extra[0], extra[1])
            extra_s = time.perf_counter() - started
            status = response.status_code
        gaps = [gap for result in await asyncio.gather(*streams) for gap in result]
        stop.set()
        latencies = await health
        lag_after = lag_buckets((await http.get("/metrics")).text)
    gaps.sort()
    return {
        "gap_p50_ms": 1000 * statistics.median(gaps),
        "gap_p99_ms": 1000 * gaps[int(0.99 * (len(gaps) - 1))],
        "health_max_ms": 1000 * max(latencies),
        "loop_lag_max_ms": worst_lag_ms(lag_before, lag_after),
        "status": status,
        "request_s": extra_s,
    }


def cases_of(shapes: str, match: str | None) -> dict[str, tuple[str, Body]]:
    cases: dict[str, tuple[str, Body]] = {}
    if shapes in ("bounds", "all"):
        cases.update(worst_requests())
    if shapes in ("corpus", "all"):
        cases.update(stall_bodies())
    wanted = match.split("|") if match else None
    return {
        name: case
        for name, case in cases.items()
        if wanted is None or any(part in name for part in wanted)
    }


async def run(
    base_url: str, rounds: int, cases: dict[str, tuple[str, Body]]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for round_no in range(rounds):
        for name, extra in [("baseline (16 streams only)", None), *cases.items()]:
            result = await phase(base_url, extra, seed=round_no * 1000 + len(rows))
            result.update(name=name, round=round_no)
            rows.append(result)
            print(json.dumps(result), flush=True)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    names = list(dict.fromkeys(row["name"] for row in rows))
    base = [row["gap_p99_ms"] for row in rows if row["name"] == names[0]]
    base_p99 = statistics.median(base)
    print(f"\nload average: {os.getloadavg()}")
    print(
        "| request | status | its time s | gap p99 ms | over baseline ms | /health max ms "
        "| loop lag max ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        mine = [row for row in rows if row["name"] == name]
        p99 = statistics.median(row["gap_p99_ms"] for row in mine)
        health = max(row["health_max_ms"] for row in mine)
        took = [row["request_s"] for row in mine if row["request_s"] is not None]
        took_s = f"{statistics.median(took):.2f}" if took else "-"
        status = mine[0]["status"] or "-"
        lag = max(row["loop_lag_max_ms"] for row in mine)
        cells = [
            name,
            status,
            took_s,
            f"{p99:.1f}",
            f"{p99 - base_p99:+.1f}",
            f"{health:.1f}",
            f"<= {lag:.0f}",
        ]
        print("| " + " | ".join(str(cell) for cell in cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8471)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base-url", help="measure a running server instead of starting one")
    parser.add_argument("--shapes", choices=("bounds", "corpus", "all"), default="bounds")
    parser.add_argument(
        "--match", help="only the requests whose name contains one of these texts (a|b)"
    )
    args = parser.parse_args(argv)
    base_url = args.base_url or f"http://127.0.0.1:{args.port}"
    server = None
    if not args.base_url:
        server = Server(
            lilac_argv(args.port, "--cpu-kvcache-space-gib", "1"),
            output("loop-stall") / "server.log",
            port=args.port,
            env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"},
        )
    try:
        if server is not None:
            server.wait_healthy(900)
        rows = asyncio.run(run(base_url, args.rounds, cases_of(args.shapes, args.match)))
        report(rows)
    finally:
        if server is not None:
            server.stop()
    return 0
