"""Costs not covered by the load benchmark, ours side by side with `vllm serve`:

- server start to first answer: from launching the server (model already prepared) to
  the first 200 from /v1/chat/completions;
- structured output: TTFT and TPOT of a streamed answer, plain text against a JSON
  schema (`response_format`) and a forced tool call (named `tool_choice`), at
  concurrency 1, `max_tokens` 48, temperature 0;
- grammar compilation: TTFT of each of the 10 schemas of perf/scenarios/structured_cases.py on
  first use, and again with another prompt (the compiled grammar cached), against a
  plain request's TTFT.

    python -m perf costs [--servers lilac,vllm] [--repeats 4]
    python -m perf costs --only tool-named --repeats 20   # the forced tool call alone

`--only tool-named` measures nothing but the forced tool call: `--repeats` of the
structured benchmark's tool prompts (up to 50), the same ones in the same order on
each server, one at a time.

The same prompt on both servers: our SmolLM2 template renders `tools` into the system
turn (the hermes format's listing); the tokenizer's own template, which `vllm serve`
uses by default, drops them, so the same request was about twice as many prompt
tokens on our side (1,026 against 516 for the first tool prompt, whose system message
lists the tools too). `vllm serve` therefore runs with our family's template
(`--chat-template templates/smollm2.jinja`) unless `--vllm-template stock`; the
prompt tokens each server counted are in the results.

Servers start one after the other (perf/scenarios/structured_bench.py's commands: the same
engine flags, `vllm serve` with the hermes tool parser). Results: perf/out/costs/costs.json
and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import httpx

from perf.harness.results import output
from perf.harness.servers import ROOT, Server
from perf.scenarios.structured_bench import MODEL_NAME, start
from perf.scenarios.structured_cases import schema_cases, tool_cases, tool_def

OUT = output("costs")
PLAIN_PROMPTS = [
    "Describe Paris in a few sentences.",
    "Tell me about the history of bread.",
    "Explain how rain forms.",
    "What makes a good cup of tea?",
    "Describe a walk in a forest.",
    "Why is the sky blue?",
]


def first_answer_s(server: Server, launched: float, timeout_s: float = 600.0) -> float:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    while time.monotonic() - launched < timeout_s:
        try:
            response = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=30)
            if response.status_code == 200:
                return time.monotonic() - launched
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("no answer")


def streamed(url: str, body: dict[str, Any]) -> dict[str, float]:
    """One streamed request: TTFT (first content or tool-call delta), TPOT, tokens."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    body.setdefault("max_tokens", 48)
    body.setdefault("temperature", 0)
    started = time.perf_counter()
    first = last = None
    tokens = prompt_tokens = 0
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
                prompt_tokens = chunk["usage"]["prompt_tokens"]
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                if delta.get("content") or delta.get("tool_calls"):
                    now = time.perf_counter()
                    first = first if first is not None else now
                    last = now
    assert first is not None and last is not None, "no output"
    tpot = (last - first) / (tokens - 1) if tokens > 1 else float("nan")
    return {
        "ttft_ms": 1000 * (first - started),
        "tpot_ms": 1000 * tpot,
        "tokens": tokens,
        "prompt_tokens": prompt_tokens,
    }


def _median(records: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in records)


def tool_named(url: str, repeats: int) -> list[dict[str, float]]:
    """Streamed forced (named `tool_choice`) calls, one after the other."""
    runs = []
    for case in tool_cases()[:repeats]:
        body = {
            "model": MODEL_NAME,
            "messages": case["messages"],
            "tools": [tool_def(n) for n in case["tools"]],
            "tool_choice": {"type": "function", "function": {"name": case["target"]}},
        }
        runs.append(streamed(url, body))
    return runs


def measure_tool_named(server: Server, repeats: int) -> dict[str, Any]:
    runs = tool_named(server.base_url, repeats)
    ttfts = sorted(r["ttft_ms"] for r in runs)
    return {
        "tool_named": runs,
        "summary": {
            "tool_named_ttft_ms": _median(runs, "ttft_ms"),
            "tool_named_ttft_min_ms": ttfts[0],
            "tool_named_ttft_max_ms": ttfts[-1],
            "tool_named_tpot_ms": _median(runs, "tpot_ms"),
            "tool_named_tokens": _median(runs, "tokens"),
            "tool_named_prompt_tokens": _median(runs, "prompt_tokens"),
        },
    }


def measure(server: Server, repeats: int) -> dict[str, Any]:
    url = server.base_url
    by_schema: dict[str, list[dict[str, Any]]] = {}
    for case in schema_cases():
        by_schema.setdefault(case["name"], []).append(case)

    def schema_body(case: dict[str, Any]) -> dict[str, Any]:
        schema = {"name": case["name"], "schema": case["schema"], "strict": True}
        return {
            "model": MODEL_NAME,
            "messages": case["messages"],
            "response_format": {"type": "json_schema", "json_schema": schema},
        }

    plain = [
        streamed(url, {"model": MODEL_NAME, "messages": [{"role": "user", "content": p}]})
        for p in PLAIN_PROMPTS[:repeats]
    ]
    compile_rows = []
    for name, cases in by_schema.items():
        first_use = streamed(url, schema_body(cases[0]))
        cached = streamed(url, schema_body(cases[1]))
        compile_rows.append(
            {
                "schema": name,
                "first_ttft_ms": first_use["ttft_ms"],
                "cached_ttft_ms": cached["ttft_ms"],
            }
        )
    schema_runs = [
        streamed(url, schema_body(cases[2])) for cases in list(by_schema.values())[:repeats]
    ]
    tool_runs = tool_named(url, repeats)
    return {
        "plain": plain,
        "json_schema": schema_runs,
        "tool_named": tool_runs,
        "compile": compile_rows,
        "summary": {
            "plain_ttft_ms": _median(plain, "ttft_ms"),
            "plain_tpot_ms": _median(plain, "tpot_ms"),
            "json_schema_ttft_ms": _median(schema_runs, "ttft_ms"),
            "json_schema_tpot_ms": _median(schema_runs, "tpot_ms"),
            "tool_named_ttft_ms": _median(tool_runs, "ttft_ms"),
            "tool_named_tpot_ms": _median(tool_runs, "tpot_ms"),
            "schema_first_ttft_ms": _median(compile_rows, "first_ttft_ms"),
            "schema_cached_ttft_ms": _median(compile_rows, "cached_ttft_ms"),
        },
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    keys = list(next(iter(results.values()))["summary"])
    names = list(results)
    lines = [
        "| figure | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " |",
    ]
    lines.append(
        "| start to first answer s | "
        + " | ".join(f"{results[n]['start_to_first_answer_s']:.1f}" for n in names)
        + " |"
    )
    lines.append(
        "| load avg 1m before / after | "
        + " | ".join(
            f"{results[n]['load_avg_before'][0]:.2f} / {results[n]['load_avg_1m']:.2f}"
            for n in names
        )
        + " |"
    )
    for key in keys:
        lines.append(
            f"| {key} | " + " | ".join(f"{results[n]['summary'][key]:,.1f}" for n in names) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="lilac,vllm")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument(
        "--only", choices=("all", "tool-named"), default="all", help="which figures to measure"
    )
    parser.add_argument(
        "--vllm-template",
        choices=("family", "stock"),
        default="family",
        help="`vllm serve`'s chat template: ours (renders tools) or the tokenizer's",
    )
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    vllm_extra: tuple[str, ...] = ()
    if args.vllm_template == "family":
        vllm_extra = ("--chat-template", str(ROOT / "templates" / "smollm2.jinja"))
    for name in args.servers.split(","):
        launched = time.monotonic()
        with start(name, vllm_extra) as server:
            start_s = first_answer_s(server, launched)
            print(f"[{name}] first answer {start_s:.1f} s after launch", flush=True)
            results[name] = {"start_to_first_answer_s": start_s}
            results[name]["load_avg_before"] = os.getloadavg()
            measured = measure_tool_named if args.only == "tool-named" else measure
            results[name].update(measured(server, args.repeats))
            results[name]["load_avg_1m"] = os.getloadavg()[0]
        (OUT / "costs.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0
