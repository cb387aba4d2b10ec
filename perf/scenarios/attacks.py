"""The attack matrix: one key floods a real server while another sends a request a second.

`make attacks`; a short version runs in `make test` (tests/e2e/test_attacks.py).

    python -m perf attacks [--seconds 30] [--attacks prompts64,streams256,...]

The server runs with `--auth keys` and the default model; the two keys are made through
the admin API (the attacker's with no limits but the default RPM lifted, so that only
admission stands in its way). First the victim runs alone (its TTFT baseline, same
run); then, for each attack, the attacker floods for `--seconds` while the victim keeps
sending one streamed chat request a second. Per attack: what the attacker got (answers
by status), what the victim saw (refusals, TTFT p50/p99 against alone), and the tokens
billed to both keys (`/admin/usage`) against what the engine counted
(`vllm:prompt_tokens_total` + `vllm:generation_tokens_total` deltas from /metrics).
Prints a markdown table; the rows go to perf/out/attacks/results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.results import output
from perf.harness.servers import LILAC, Server, free_port, lilac_argv

OUT = output("attacks")
ADMIN_KEY = "attacks-admin-key"
MAX_MODEL_LEN = 2048
GOAL_TTFT_RATIO = 2.0  # the victim's TTFT p50 under attack, against alone
VICTIM_TIMEOUT_S = 120.0  # a victim request not answered by then counts as failed


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
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    billed_tokens: int = 0
    engine_tokens: int = 0
    unfinished_after: float = 0.0  # engine requests left once the attack stopped


# ---------------------------------------------------------------- the server


def start(
    workdir: Path, extra_args: tuple[str, ...] = (), attacker_max_concurrent: int | None = None
) -> Target:
    """`lilac-serve serve --auth keys` on a free port, and the two keys (the attacker's
    with no limit but `attacker_max_concurrent`, RPM lifted)."""
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    bootstrap = subprocess.run(
        [LILAC, "keys", "create", "--name", "bootstrap", "--data-dir", str(data)],
        capture_output=True,
        text=True,
    )
    if bootstrap.returncode != 0:
        raise RuntimeError(f"keys create failed: {bootstrap.stderr.strip()}")
    port = free_port()
    argv = lilac_argv(
        port, "--auth", "keys", "--data-dir", str(data),
        "--max-model-len", str(MAX_MODEL_LEN), "--cpu-kvcache-space-gib", "1", *extra_args,
    )  # fmt: skip
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "LILAC_ADMIN_KEY": ADMIN_KEY}
    server = Server(argv, workdir / "server.log", port=port, env=env)
    try:
        server.wait_healthy(900)
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


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    workers: int
    send: Send


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

    long_what = "~1,800-token prompts, max_tokens 1, 32 at once"
    return {
        a.name: a
        for a in (
            Attack("prompts64", "64-prompt completions, max_tokens 512, 17 at once", 17, prompts64),
            Attack("streams256", "256 concurrent streams, max_tokens 512", 256, streams),
            Attack("largest", f"n={n} x max_tokens={max_tokens}, 8 at once", 8, largest),
            Attack("long_prompts", long_what, 32, long_prompts),
            Attack("bad_requests", "invalid requests (400/404), 64 at once", 64, bad),
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


async def victim(target: Target, seconds: float, tag: str) -> tuple[list[float], list[str]]:
    """One streamed chat request a second (each its own prompt): TTFTs (ms) and the
    refusals or failures, as `status code` strings."""
    ttfts: list[float] = []
    refusals: list[str] = []

    async def one(client: httpx.AsyncClient, i: int) -> None:
        body = chat_body(f"{tag} {i}: name a colour and a fruit.", 8, stream=True)
        started = time.monotonic()
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    status, code = _outcome(response)
                    refusals.append(f"{status} {code}")
                    return
                first = None
                async for line in response.aiter_lines():
                    if first is None and line.startswith("data: {") and '"content"' in line:
                        first = time.monotonic()
                if first is not None:
                    ttfts.append((first - started) * 1000)
        except httpx.HTTPError as exc:
            refusals.append(type(exc).__name__)

    async with target.client(target.victim) as client:
        client.timeout = httpx.Timeout(VICTIM_TIMEOUT_S)
        tasks = []
        start = time.monotonic()
        for i in range(max(1, int(seconds))):
            await asyncio.sleep(max(0.0, start + i - time.monotonic()))
            tasks.append(asyncio.create_task(one(client, i)))
        await asyncio.gather(*tasks)
    return ttfts, refusals


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def alone(target: Target, seconds: float) -> Row:
    before_bill, before_engine = billed(target), engine_tokens(target.url)
    ttfts, refusals = await victim(target, seconds, "alone")
    row = Row("alone", "the victim alone", victim_requests=int(seconds))
    _fill(row, ttfts, refusals)
    row.unfinished_after = await settle(target)
    _bill(row, target, before_bill, before_engine)
    return row


async def run_attack(target: Target, attack: Attack, seconds: float) -> Row:
    before_bill, before_engine = billed(target), engine_tokens(target.url)
    before_admission = admission_counters(target)
    stop = asyncio.Event()
    flooding = asyncio.create_task(flood(target, attack, stop))
    await asyncio.sleep(min(2.0, seconds / 4))  # the flood builds up first
    ttfts, refusals = await victim(target, seconds, attack.name)
    stop.set()
    got, cut = await flooding
    row = Row(attack.name, attack.what, dict(got), cut, victim_requests=int(seconds))
    _fill(row, ttfts, refusals)
    row.unfinished_after = await settle(target)
    _tickets(row, admission_counters(target) - before_admission, refusals)
    _bill(row, target, before_bill, before_engine)
    return row


def _tickets(row: Row, delta: collections.Counter[str], refusals: list[str]) -> None:
    """The attacker's part of admission's counters: all of them, less the victim's
    (one ticket per request; its refusals by code)."""
    row.attacker_tickets = delta["admitted"] - (row.victim_requests - len(refusals))
    refused = collections.Counter(
        {k.removeprefix("rejected_"): v for k, v in delta.items() if k.startswith("rejected_")}
    )
    refused.subtract(r.split(" ", 1)[-1] for r in refusals)
    row.attacker_refused_tickets = {k: v for k, v in refused.items() if v > 0}


def _fill(row: Row, ttfts: list[float], refusals: list[str]) -> None:
    row.victim_refusals = len(refusals)
    row.victim_errors = refusals
    row.ttft_p50_ms = percentile(ttfts, 0.5)
    row.ttft_p99_ms = percentile(ttfts, 0.99)


def _bill(row: Row, target: Target, before: dict[str, int], engine_before: int) -> None:
    after = billed(target)
    row.billed_tokens = sum(after.values()) - sum(before.values())
    row.engine_tokens = engine_tokens(target.url) - engine_before


async def matrix(target: Target, names: list[str], seconds: float) -> list[Row]:
    rows = [await alone(target, seconds)]
    known = attacks(target)  # after a request has run: the KV budget is known
    for name in names:
        rows.append(await run_attack(target, known[name], seconds))
    return rows


# ---------------------------------------------------------------- the table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(rows: list[Row]) -> str:
    base = rows[0].ttft_p50_ms if rows and rows[0].attack == "alone" else None
    lines = [
        "| attack | attacker's answers | attacker's prompts admitted / refused "
        "| victim refused | victim TTFT p50 / p99 (ms) | p50 vs alone "
        "| billed tokens | engine tokens |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        got = ", ".join(f"{k}: {v}" for k, v in sorted(row.attacker.items()))
        if row.attacker_cut:
            got += f"{', ' if got else ''}open at the end: {row.attacker_cut}"
        refused = ", ".join(f"{k} {v}" for k, v in sorted(row.attacker_refused_tickets.items()))
        tickets = "-" if row.attack == "alone" else f"{row.attacker_tickets} / {refused or 0}"
        ratio = "-"
        if base and row.ttft_p50_ms is not None:
            ratio = f"{row.ttft_p50_ms / base:.2f}x"
        lines.append(
            f"| {row.attack}: {row.what} | {got or '-'} | {tickets} | {row.victim_refusals} of "
            f"{row.victim_requests} | {_ms(row.ttft_p50_ms)} / {_ms(row.ttft_p99_ms)} "
            f"| {ratio} | {row.billed_tokens} | {row.engine_tokens} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per attack (and alone)")
    names = "prompts64,streams256,largest,long_prompts,bad_requests"
    parser.add_argument("--attacks", default=names, help=f"comma-separated, of {names}")
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
    args.output.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="lilac-attacks-") as tmp:
        target = start(Path(tmp), attacker_max_concurrent=args.attacker_max_concurrent)
        try:
            rows = asyncio.run(matrix(target, chosen, args.seconds))
        finally:
            if target.server is not None:
                target.server.stop()
                log = Path(tmp) / "server.log"
                (args.output / "server.log").write_bytes(log.read_bytes())
    (args.output / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    print(table(rows))
    base = rows[0].ttft_p50_ms or 0.0
    met = all(
        r.victim_refusals == 0
        and r.ttft_p50_ms is not None
        and r.ttft_p50_ms <= GOAL_TTFT_RATIO * base
        for r in rows[1:]
    )
    print(
        f"\ngoal (victim 0 refusals, TTFT p50 within {GOAL_TTFT_RATIO:g}x of alone): "
        f"{'met' if met else 'NOT met'}"
    )
    return 0
