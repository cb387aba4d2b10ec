"""Structured output validity: lilac-serve against `vllm serve`, same model and engine flags.

Sends the same tool-calling prompts (tool_choice auto, required, named) and json_schema
prompts (perf/scenarios/structured_cases.py) to each server at temperature 0 and counts the
responses whose JSON parses and validates against the declared schema (jsonschema).
The servers run one after the other; the script starts and stops them itself.

    python -m perf structured                           # both servers
    python -m perf structured --servers vllm --limit 5
    python -m perf structured --report                  # the table from perf/out/structured

`vllm serve` runs twice over the tool cases: tools as given, and with `"strict": true`
(with the hermes parser, vLLM constrains arguments only for strict tools). Records go to
perf/out/structured/structured_<run>.jsonl, figures to
perf/out/structured/structured_summary.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from perf.harness.results import output
from perf.harness.servers import ROOT, Server, free_port, lilac_argv, vllm_argv
from perf.scenarios.structured_cases import TOOLS, schema_cases, tool_cases, tool_def

OUT = output("structured")
SUMMARY = OUT / "structured_summary.json"
MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODEL_DIR = (
    Path(os.environ.get("LILAC_CACHE_DIR", Path.home() / ".cache" / "lilac-serve"))
    / "models"
    / "SmolLM2-135M-Instruct"
)
TOOL_MODES = ("auto", "required", "named")
MODES = (*TOOL_MODES, "json_schema")


def server_command(name: str, port: int, vllm_extra: tuple[str, ...] = ()) -> list[str]:
    common = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.35"]
    if name == "lilac":
        return lilac_argv(port, "--cpu-kvcache-space-gib", "1", *common)
    return vllm_argv(
        port,
        "--model", str(MODEL_DIR), "--served-model-name", MODEL_NAME,
        "--dtype", "float32", "--enforce-eager", "--seed", "0",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--disable-uvicorn-access-log", *common, *vllm_extra,
    )  # fmt: skip


def start(name: str, vllm_extra: tuple[str, ...] = ()) -> Server:
    """One of the two servers on a free port, once it answers /health. `vllm_extra`:
    more arguments for `vllm serve`."""
    port = free_port()
    env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = server_command(name, port, vllm_extra)
    print(f"[{name}] starting: {' '.join(command)}", flush=True)
    started = time.monotonic()
    server = Server(command, OUT / f"server_{name}.log", port=port, env=env, cwd=ROOT)
    server.wait_healthy(600)
    print(f"[{name}] ready in {time.monotonic() - started:.0f}s", flush=True)
    return server


def build_requests(
    strict: bool, modes: tuple[str, ...], limit: int, ids: set[str] | None = None
) -> list[dict[str, Any]]:
    requests = []
    for mode in modes:
        cases = schema_cases() if mode == "json_schema" else tool_cases()
        for case in cases[:limit]:
            if ids is not None and case["id"] not in ids:
                continue
            body: dict[str, Any] = {"model": MODEL_NAME, "messages": case["messages"]}
            if mode == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": case["name"], "schema": case["schema"], "strict": True},
                }
            else:
                body["tools"] = [tool_def(n, strict) for n in case["tools"]]
                body["tool_choice"] = (
                    {"type": "function", "function": {"name": case["target"]}}
                    if mode == "named"
                    else mode
                )
            requests.append({"id": case["id"], "mode": mode, "case": case, "body": body})
    return requests


def judge(mode: str, case: dict[str, Any], status: int, payload: Any) -> dict[str, Any]:
    """The verdict on one response: valid or not, and why not."""
    if status != 200:
        return {"valid": False, "why": f"http {status}"}
    choice = payload["choices"][0]
    message = choice["message"]
    out: dict[str, Any] = {"finish_reason": choice["finish_reason"]}
    if mode == "json_schema":
        return {**out, **_check_json(message.get("content") or "", case["schema"])}
    calls = message.get("tool_calls") or []
    out["called"] = bool(calls)
    out["markup_in_content"] = "<tool_call>" in (message.get("content") or "")
    if not calls:
        return {**out, "valid": False, "why": "no tool call"}
    for call in calls:
        name = call["function"]["name"]
        if name not in case["tools"] or (mode == "named" and name != case["target"]):
            return {**out, "valid": False, "why": f"wrong function {name!r}"}
        verdict = _check_json(call["function"]["arguments"], TOOLS[name][1])
        if not verdict["valid"]:
            return {**out, **verdict}
    return {**out, "valid": True, "why": None}


def _check_json(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        return {"valid": False, "why": f"not JSON: {exc}"}
    error = next(iter(Draft202012Validator(schema).iter_errors(document)), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return {"valid": False, "why": f"schema at {where}: {error.message[:160]}"}
    return {"valid": True, "why": None}


async def run(url: str, requests: list[dict[str, Any]], args: argparse.Namespace) -> list[dict]:
    semaphore = asyncio.Semaphore(args.concurrency)
    records: list[dict[str, Any]] = []
    timeout = httpx.Timeout(args.timeout, connect=10)
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:

        async def one(item: dict[str, Any]) -> None:
            body = {**item["body"], "temperature": 0, "max_tokens": args.max_tokens}
            async with semaphore:
                started = time.monotonic()
                try:
                    response = await client.post("/v1/chat/completions", json=body)
                    status, payload = response.status_code, response.json()
                except (httpx.HTTPError, ValueError) as exc:
                    status, payload = 0, {"exception": repr(exc)}
                seconds = time.monotonic() - started
            verdict = judge(item["mode"], item["case"], status, payload)
            usage = payload.get("usage") or {} if isinstance(payload, dict) else {}
            records.append(
                {
                    "id": item["id"],
                    "mode": item["mode"],
                    "status": status,
                    "seconds": round(seconds, 2),
                    "completion_tokens": usage.get("completion_tokens"),
                    **verdict,
                    "message": payload["choices"][0]["message"] if status == 200 else payload,
                }
            )
            done = len(records)
            if done % 20 == 0 or done == len(requests):
                print(f"  {done}/{len(requests)}", flush=True)

        await asyncio.gather(*(one(item) for item in requests))
    return records


def summarize(records: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    modes = {}
    for mode in MODES:
        rows = [r for r in records if r["mode"] == mode]
        if not rows:
            continue
        figures: dict[str, Any] = {
            "n": len(rows),
            "valid": sum(r["valid"] for r in rows),
            "errors": sum(r["status"] != 200 for r in rows),
            "length": sum(r.get("finish_reason") == "length" for r in rows),
            # responses that ended on their own (not cut by max_tokens, not an error)
            "finished": sum(_finished(r) for r in rows),
            "valid_finished": sum(_finished(r) and r["valid"] for r in rows),
            "median_s": round(statistics.median(r["seconds"] for r in rows), 2),
        }
        if mode in TOOL_MODES:
            figures["called"] = sum(bool(r.get("called")) for r in rows)
            figures["markup_in_content"] = sum(bool(r.get("markup_in_content")) for r in rows)
        modes[mode] = figures
    return {"wall_s": round(wall), "modes": modes}


def _finished(record: dict[str, Any]) -> bool:
    """The response ended on its own: no error, not cut by max_tokens."""
    return record["status"] == 200 and record.get("finish_reason") != "length"


def table(summary: dict[str, Any]) -> str:
    lines = [
        "| server | tools | mode | valid / n | valid | non-200 | `length` | valid of finished "
        "| calls made (auto) | valid of calls (auto) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run_name, result in summary.items():
        server, _, variant = run_name.partition(":")
        variant, _, label = variant.partition("-")
        server = f"{server} ({label})" if label else server
        for mode, f in result["modes"].items():
            tools = "—" if mode == "json_schema" else variant
            share = f"{100 * f['valid'] / f['n']:.0f}%"
            called = valid_of_calls = ""
            finished = "—" if mode == "auto" else f"{f['valid_finished']} / {f['finished']}"
            if mode == "auto":
                called = f"{f['called']} / {f['n']}"
                valid_of_calls = f"{f['valid']} / {f['called']}" if f["called"] else "—"
            lines.append(
                f"| {server} | {tools} | {mode} | {f['valid']} / {f['n']} | {share} "
                f"| {f['errors']} | {f['length']} | {finished} | {called} | {valid_of_calls} |"
            )
    return "\n".join(lines)


def recounted(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary recounted from the records (the figures may have grown since)."""
    out = {}
    for run_name, result in summary.items():
        path = OUT / f"structured_{run_name.replace(':', '_')}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        out[run_name] = summarize(records, result["wall_s"])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="lilac,vllm", help="comma-separated: lilac, vllm")
    parser.add_argument("--vllm-tools", default="given,strict", help="vllm runs: given, strict")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--limit", type=int, default=1000, help="cases per mode")
    parser.add_argument("--ids", help="only these case ids (comma-separated)")
    parser.add_argument("--label", help="suffix for the run names (kept apart in the summary)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--timeout", type=float, default=180, help="per request, seconds")
    parser.add_argument("--url", help="use this running server (with one name in --servers)")
    parser.add_argument("--report", action="store_true", help="print the table and exit")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    summary = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {}
    if args.report:
        print(table(recounted(summary)))
        return
    modes = tuple(m for m in args.modes.split(",") if m)
    for server in args.servers.split(","):
        variants = args.vllm_tools.split(",") if server == "vllm" else ["given"]
        runs = []
        for variant in variants:
            # strict changes tools only: json_schema runs once per server.
            run_modes = (
                modes if variant == variants[0] else tuple(m for m in modes if m != "json_schema")
            )
            ids = set(args.ids.split(",")) if args.ids else None
            requests = build_requests(variant == "strict", run_modes, args.limit, ids)
            label = f"{variant}-{args.label}" if args.label else variant
            if requests:
                runs.append((f"{server}:{label}", requests))
        context = None if args.url else start(server)
        url = args.url or context.base_url
        try:
            for run_name, requests in runs:
                print(f"[{run_name}] {len(requests)} requests", flush=True)
                started = time.monotonic()
                records = asyncio.run(run(url, requests, args))
                wall = time.monotonic() - started
                records.sort(key=lambda r: (MODES.index(r["mode"]), r["id"]))
                path = OUT / f"structured_{run_name.replace(':', '_')}.jsonl"
                path.write_text("".join(json.dumps(r) + "\n" for r in records))
                summary[run_name] = summarize(records, wall)
                SUMMARY.write_text(json.dumps(summary, indent=1))
                print(f"[{run_name}] {wall:.0f}s; records in {path}", flush=True)
        finally:
            if context:
                context.stop()
    print(table(recounted(summary)))
