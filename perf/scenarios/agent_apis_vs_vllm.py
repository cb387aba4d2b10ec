"""Responses, Messages and model retrieval side by side with `vllm serve`.

The same requests to each server, and the differences in status, shape, events, usage.

Same model (SmolLM2-135M-Instruct, float32, eager, max-model-len 2048, seed 0, hermes
tool parser, xgrammar without free whitespace: our CPU defaults), one server at a time.
Each server is one part, run under the engine lock, then the report compares them:

    flock /tmp/lilac-engine.lock python -m perf agent-apis-vs-vllm --server lilac
    flock /tmp/lilac-engine.lock python -m perf agent-apis-vs-vllm --server vllm
    python -m perf agent-apis-vs-vllm --report

`vllm serve` runs with `VLLM_ENABLE_RESPONSES_API_STORE=1` (its store is off by default:
without it nothing can be retrieved or chained). Raw records go to
perf/out/agent-apis-vs-vllm/{lilac,vllm}.json, the comparison to
perf/out/agent-apis-vs-vllm/summary.md (a Markdown table) and differences.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from perf.harness.results import output
from perf.harness.servers import ROOT, Server, free_port, start_lilac, vllm_argv
from perf.scenarios.agent_apis_cases import CASES, MODEL, Context, Skip
from perf.scenarios.agent_apis_diff import differences, summary_markdown

OUT = output("agent-apis-vs-vllm")
MODEL_DIR = (
    Path(os.environ.get("LILAC_CACHE_DIR", Path.home() / ".cache" / "lilac-serve"))
    / "models"
    / "SmolLM2-135M-Instruct"
)
SERVERS = ("lilac", "vllm")


def start_vllm(workdir: Path) -> Server:
    port = free_port()
    argv = vllm_argv(
        port,
        "--model", str(MODEL_DIR), "--served-model-name", MODEL,
        "--dtype", "float32", "--enforce-eager", "--seed", "0", "--max-model-len", "2048",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
        "--disable-uvicorn-access-log", "--disable-log-stats",
    )  # fmt: skip
    env = {
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ENABLE_RESPONSES_API_STORE": "1",
    }
    server = Server(argv, workdir / "server.log", port=port, env=env, cwd=ROOT)
    return server.wait_healthy(600)


def start(name: str) -> Server:
    workdir = OUT / name
    if workdir.exists():
        for stale in ("server.log",):
            (workdir / stale).unlink(missing_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    if name == "lilac":
        return start_lilac(workdir)
    return start_vllm(workdir)


def run_cases(base_url: str, only: set[str] | None) -> list[dict[str, Any]]:
    timeout = httpx.Timeout(120, connect=10)
    records = []
    with httpx.Client(base_url=base_url, timeout=timeout) as http:
        ctx = Context(
            http=http,
            oa=openai.OpenAI(
                base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=timeout
            ),
            an=anthropic.Anthropic(
                base_url=base_url, api_key="unused", max_retries=0, timeout=120.0
            ),
        )
        for case_id, api, what, fn in CASES:
            if only and case_id not in only:
                continue
            started = time.monotonic()
            try:
                record = fn(ctx)
            except Skip as why:
                record = {"skipped": str(why)}
            except Exception as exc:  # a transport failure is a finding, not a stop
                record = {"exception": f"{type(exc).__name__}: {exc}"[:400]}
                traceback.print_exc()
            record.pop("parsed", None)
            record |= {"id": case_id, "api": api, "what": what}
            record["seconds"] = round(time.monotonic() - started, 2)
            print(f"  {case_id}: {record.get('status')} {record.get('sdk', '')}", flush=True)
            records.append(record)
    return records


def run_server(name: str, only: set[str] | None) -> None:
    started = time.monotonic()
    print(f"[{name}] starting", flush=True)
    with start(name) as server:
        print(f"[{name}] ready in {time.monotonic() - started:.0f} s", flush=True)
        records = run_cases(server.base_url, only)
    load = os.getloadavg()
    result = {
        "server": name,
        "requests": len(records),
        "seconds": round(time.monotonic() - started, 1),
        "load_average": [round(x, 2) for x in load],
        "records": records,
    }
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    print(f"[{name}] {len(records)} requests, {result['seconds']} s, load {load}: {path}")


def report() -> None:
    runs = {name: json.loads((OUT / f"{name}.json").read_text()) for name in SERVERS}
    diffs = differences(runs["lilac"]["records"], runs["vllm"]["records"])
    (OUT / "differences.json").write_text(json.dumps(diffs, indent=1))
    text = summary_markdown(runs, diffs)
    (OUT / "summary.md").write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=SERVERS, help="run one server's part")
    parser.add_argument("--report", action="store_true", help="compare the two parts")
    parser.add_argument("--only", help="comma-separated case ids (with --server)")
    parser.add_argument("--url", help="send the requests to a running server; print them")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    if args.url:
        print(json.dumps(run_cases(args.url, only), indent=1, default=str))
        return
    if args.server:
        run_server(args.server, only)
    elif not args.report:  # both parts, one after the other, in this one process
        for name in SERVERS:
            run_server(name, only)
    if args.report or not args.server:
        report()
