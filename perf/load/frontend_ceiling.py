"""Frontend ceiling: our app under granian over the scripted engine, many streams.

The engine yields its tokens instantly. Reports streamed tokens/s and requests/s, per
wall second and per CPU second of the HTTP process (= per core it keeps busy).

    python -m perf frontend-ceiling [--concurrency 64] [--tokens 256] [--duration 10]
        [--keys [--tenants N] [--writer-cores 1]] [--workers N]
        [--only streamed|non-streamed] [--tag NAME]

The load client is this process: raw HTTP/1.1 over asyncio streams with keep-alive, about
the cheapest client there is, so that on a small machine the server stays the bottleneck.
The server is `python -m perf scripted-app` (granian, one worker, uvloop). With
`--workers N` it runs N granian workers, each with its own scripted engine; the CPU is
summed over them, and "per core" is per CPU second of all of them together (what one
process gives per core it keeps busy), beside each worker's own share of the CPU.

With `--keys` each worker commits usage rows in a child process of its own
(app.tenancy.usage.child): its CPU is counted apart (`writer_cpu_s`), and "per core,
with the writer" is per CPU second of the workers and their writers together. With
`--writer-cores`, those children run on the cores named (from the warm-up on), as on a
box where the writer finds a core of its own: run the command under `taskset -c 0`, and
`--writer-cores 1` gives the writer the other core. With `--tenants N` the clients send
N keys (client i the key i mod N), as many tenants at once, each key's record read
again every second by the key cache; without it, one key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import psutil

from perf.harness.results import output
from perf.harness.servers import Server, cpu_seconds, scripted_argv

OUT = output("frontend-ceiling")
DONE = b"data: [DONE]\n\n"
TOKEN_MARK = b'"delta":'


@dataclass
class Tally:
    requests: int = 0
    tokens: int = 0
    errors: int = 0


AUTHORIZATION = ""  # "Authorization: Bearer ...\r\n" with --keys: the first key's
AUTHORIZATIONS: list[str] = []  # every key's, with --keys (client i sends key i mod N)
SCENARIOS = ("streamed", "non-streamed")


def output_file(stem: str, tag: str, suffix: str) -> Path:
    """Where a run writes `stem` (its server's log, its figures): `--tag` in the name."""
    return OUT / f"{stem}{'-' + tag if tag else ''}{suffix}"


def authorization_of(client: int) -> str:
    """The `Authorization` header line client number `client` sends (none without keys)."""
    keys = AUTHORIZATIONS
    return keys[client % len(keys)] if keys else ""


def _request(port: int, tokens: int, stream: bool, authorization: str = "") -> bytes:
    body = json.dumps(
        {
            "model": "scripted",
            "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": stream,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"{authorization}\r\n"
    )
    return head.encode() + body


async def _read_stream(reader: asyncio.StreamReader) -> int:
    """Read one chunked SSE response up to `data: [DONE]`; the number of token chunks."""
    count, tail = 0, b""
    while True:
        data = await reader.read(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        window = tail + data
        count += window.count(TOKEN_MARK) - tail.count(TOKEN_MARK)
        if DONE in window:
            # Drain the terminating zero-length chunk so the next request starts clean.
            while not window.endswith(b"0\r\n\r\n"):
                window += await reader.read(64)
            return count
        tail = window[-64:]


async def _read_plain(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    body = await reader.readexactly(length)
    return 1 if b'"content"' in body else 0


async def _client(
    port: int, tokens: int, stream: bool, until: float, tally: Tally, index: int
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = _request(port, tokens, stream, authorization_of(index))
    try:
        while time.monotonic() < until:
            writer.write(request)
            got = await (_read_stream(reader) if stream else _read_plain(reader))
            tally.requests += 1
            tally.tokens += got if stream else tokens
            if stream and got != tokens:
                tally.errors += 1
    finally:
        writer.close()


async def drive(port: int, concurrency: int, tokens: int, stream: bool, seconds: float) -> Tally:
    tally = Tally()
    until = time.monotonic() + seconds
    clients = (_client(port, tokens, stream, until, tally, i) for i in range(concurrency))
    await asyncio.gather(*clients)
    return tally


@dataclass
class Result:
    scenario: str
    workers: int
    concurrency: int
    tokens_per_request: int
    wall_s: float
    requests: int
    tokens: int
    errors: int
    server_cpu_s: float
    client_cpu_s: float
    tokens_per_s: float
    requests_per_s: float
    tokens_per_cpu_s: float
    requests_per_cpu_s: float
    worker_cpu_s: list[float]  # each worker's own CPU seconds
    load_avg_1m: float = 0.0
    # The usage writers' child processes (with --keys): their CPU seconds, and the
    # figures per CPU second of the workers and those children together.
    writer_cpu_s: float = 0.0
    tokens_per_cpu_s_with_writer: float = 0.0
    requests_per_cpu_s_with_writer: float = 0.0
    # Per thread of the worker (by name): CPU seconds, voluntary and involuntary
    # context switches over the run; with --keys, usage rows per group commit (one
    # worker only: /metrics answers for the worker that takes the scrape).
    threads: dict[str, list[float]] | None = None
    rows_per_commit: float | None = None


def measure(
    server: Server,
    port: int,
    concurrency: int,
    tokens: int,
    stream: bool,
    seconds: float,
    writer_cores: set[int] | None = None,
) -> Result:
    workers = server.http_processes()
    me = psutil.Process()
    asyncio.run(drive(port, concurrency, tokens, stream, min(1.0, seconds)))  # warm-up
    if writer_cores:  # the writers have started: their first rows were in the warm-up
        _pin_writers(workers, writer_cores)
    one = len(workers) == 1
    usage0 = _usage_counts(port) if one else (0.0, 0.0)
    threads0 = [_thread_stats(worker.pid) for worker in workers]
    writers0 = _writer_cpu(workers)
    before = [cpu_seconds(worker) for worker in workers]
    client0, t0 = cpu_seconds(me), time.perf_counter()
    tally = asyncio.run(drive(port, concurrency, tokens, stream, seconds))
    wall = time.perf_counter() - t0
    each = [cpu_seconds(worker) - start for worker, start in zip(workers, before, strict=True)]
    cpu, client = sum(each), cpu_seconds(me) - client0
    writers1 = _writer_cpu(workers)
    # A writer that started during the run counts from zero; one that ended is lost
    # (none does: a writer lives as long as its worker, unless it dies).
    writer = sum(value - writers0.get(pid, 0.0) for pid, value in writers1.items())
    whole = cpu + writer
    threads: dict[str, list[float]] = {}
    for index, (worker, start) in enumerate(zip(workers, threads0, strict=True)):
        prefix = "" if one else f"worker-{index + 1} "
        for name, row in _thread_delta(start, _thread_stats(worker.pid)).items():
            threads[prefix + name] = row
    usage = _usage_counts(port) if one else (0.0, 0.0)
    commits = usage[1] - usage0[1]
    return Result(
        scenario="streamed" if stream else "non-streamed",
        workers=len(workers),
        concurrency=concurrency,
        tokens_per_request=tokens,
        wall_s=round(wall, 2),
        requests=tally.requests,
        tokens=tally.tokens,
        errors=tally.errors,
        server_cpu_s=round(cpu, 2),
        client_cpu_s=round(client, 2),
        tokens_per_s=round(tally.tokens / wall),
        requests_per_s=round(tally.requests / wall, 1),
        tokens_per_cpu_s=round(tally.tokens / cpu) if cpu else 0,
        requests_per_cpu_s=round(tally.requests / cpu, 1) if cpu else 0,
        worker_cpu_s=[round(value, 2) for value in each],
        load_avg_1m=round(os.getloadavg()[0], 2),
        writer_cpu_s=round(writer, 2),
        tokens_per_cpu_s_with_writer=round(tally.tokens / whole) if whole else 0,
        requests_per_cpu_s_with_writer=round(tally.requests / whole, 1) if whole else 0,
        threads=threads,
        rows_per_commit=round((usage[0] - usage0[0]) / commits, 1) if commits else None,
    )


def _writer_cpu(workers: list[psutil.Process]) -> dict[int, float]:
    """CPU seconds so far of each worker's usage-writer child, by process id."""
    out: dict[int, float] = {}
    for worker in workers:
        for child in worker.children(recursive=True):
            try:
                if "app.tenancy.usage.child" in " ".join(child.cmdline()):
                    out[child.pid] = cpu_seconds(child)
            except psutil.Error:
                continue  # ended meanwhile
    return out


def _pin_writers(workers: list[psutil.Process], cores: set[int]) -> None:
    """Each worker's usage-writer child (not the worker, nor its other children) runs
    on `cores` from now on."""
    for pid in _writer_cpu(workers):
        os.sched_setaffinity(pid, cores)


def _thread_stats(pid: int) -> dict[str, tuple[str, float, int, int]]:
    """Per thread id: its name, CPU seconds (schedstat), voluntary and involuntary
    context switches."""
    stats = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/status") as file:
                status = file.read()
            with open(f"{base}/schedstat") as file:
                cpu = int(file.read().split()[0]) / 1e9
            with open(f"{base}/comm") as file:
                name = file.read().strip()
        except OSError:
            continue  # a thread that ended meanwhile
        voluntary = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        involuntary = int(status.split("\nnonvoluntary_ctxt_switches:")[1].split()[0])
        stats[tid] = (name, cpu, voluntary, involuntary)
    return stats


def _thread_delta(
    before: dict[str, tuple[str, float, int, int]], after: dict[str, tuple[str, float, int, int]]
) -> dict[str, list[float]]:
    """CPU seconds and context switches per thread (name and id) over the run (a thread
    that started during the run counts from zero)."""
    out: dict[str, list[float]] = {}
    for tid, (name, cpu, voluntary, involuntary) in after.items():
        _, cpu0, voluntary0, involuntary0 = before.get(tid, (name, 0.0, 0, 0))
        row = out.setdefault(f"{name} {tid}", [0.0, 0, 0])
        row[0] = round(row[0] + cpu - cpu0, 3)
        row[1] += voluntary - voluntary0
        row[2] += involuntary - involuntary0
    return {name: row for name, row in out.items() if row[0] > 0.001 or row[1]}


def _usage_counts(port: int) -> tuple[float, float]:
    """Usage rows written and group commits so far (0, 0 without keys)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0.0, 0.0
    values = {"lilac_usage_written_total": 0.0, "lilac_usage_commits_total": 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in values:
            values[name] = float(value)
    return values["lilac_usage_written_total"], values["lilac_usage_commits_total"]


def table(results: list[Result]) -> str:
    lines = [
        "| scenario | workers | conc. | tokens/req | tokens/s | req/s | HTTP-process CPU s "
        "(each) | tokens/s per core | req/s per core | writer CPU s | tokens/s per core, "
        "with the writer | req/s per core, with the writer | client CPU s | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        "---: | ---: |",
    ]
    for r in results:
        each = " + ".join(str(value) for value in r.worker_cpu_s)
        lines.append(
            f"| {r.scenario} | {r.workers} | {r.concurrency} | {r.tokens_per_request} | "
            f"{r.tokens_per_s:,} | {r.requests_per_s:,} | {r.server_cpu_s} ({each}) / "
            f"{r.wall_s} s | {r.tokens_per_cpu_s:,} | {r.requests_per_cpu_s:,} | "
            f"{r.writer_cpu_s} | {r.tokens_per_cpu_s_with_writer:,} | "
            f"{r.requests_per_cpu_s_with_writer:,} | {r.client_cpu_s} | {r.load_avg_1m} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256, help="tokens per streamed request")
    parser.add_argument("--short-tokens", type=int, default=16, help="tokens per plain request")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario")
    parser.add_argument("--only", choices=SCENARIOS, help="one scenario")
    parser.add_argument("--tag", default="", help="suffix of the output files' names")
    parser.add_argument("--granian-opt", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--keys",
        action="store_true",
        help="serve with --auth keys (a SQLite keys database, limits and usage metering)",
    )
    parser.add_argument(
        "--tenants",
        type=int,
        default=1,
        metavar="N",
        help="with --keys: the keys the clients send (client i the key i mod N)",
    )
    parser.add_argument(
        "--writer-cores",
        type=lambda text: {int(core) for core in text.split(",")},
        metavar="N[,N...]",
        help="with --keys: the cores the usage writers' children run on",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="granian worker processes, each with its own scripted engine",
    )
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.tenants < 1:
        parser.error("--tenants must be at least 1")
    env = _keys_env(args.tenants) if args.keys else None
    argv = scripted_argv(args.port, "create", *args.granian_opt, workers=args.workers)
    log = output_file("frontend_server", args.tag, ".log")
    server = Server(argv, log, port=args.port, env=env)
    try:
        server.wait_healthy(60)
        _wait_for_workers(server, args.workers)
        pids = ", ".join(str(worker.pid) for worker in server.http_processes())
        print(f"HTTP processes: pid {pids}", flush=True)
        results = [
            measure(
                server,
                args.port,
                args.concurrency,
                tokens,
                stream,
                args.duration,
                args.writer_cores,
            )
            for stream, tokens in ((True, args.tokens), (False, args.short_tokens))
            if args.only in (None, SCENARIOS[0] if stream else SCENARIOS[1])
        ]
    finally:
        server.stop()
    text = table(results)
    print(text)
    for r in results:
        print(f"{r.scenario}: load {r.load_avg_1m}, rows per commit {r.rows_per_commit}")
        for name, (cpu, voluntary, involuntary) in (r.threads or {}).items():
            print(
                f"    {name}: {cpu} s CPU, {voluntary} voluntary / {involuntary} "
                "involuntary switches"
            )
    output_file("frontend_ceiling", args.tag, ".md").write_text(text + "\n")
    figures = json.dumps([asdict(r) for r in results], indent=1)
    output_file("frontend_ceiling", args.tag, ".json").write_text(figures)
    return 0 if all(r.errors == 0 for r in results) else 1


def _wait_for_workers(server: Server, workers: int, timeout_s: float = 60.0) -> None:
    """Until every worker answers: the first to start answers /health before the
    others have built their app."""
    deadline = time.monotonic() + timeout_s
    while len(server.http_processes()) < workers and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # each worker's app builds in well under a second once spawned


def _keys_env(tenants: int = 1) -> dict[str, str]:
    """A fresh keys database with `tenants` keys whose limits never bind; the clients
    send them."""
    import tempfile

    from app.db.engine import open_database
    from app.tenancy.keys.store import KeyLimits, KeyStore

    global AUTHORIZATION
    folder = tempfile.mkdtemp(prefix="lilac-ceiling-")

    async def make_keys() -> list[str]:
        database = await open_database(f"sqlite:///{folder}/lilac.db")
        store = KeyStore(database)
        limits = KeyLimits(rpm=10**9, tpm=10**12)
        secrets = [(await store.create(f"ceiling-{i}", limits))[1] for i in range(tenants)]
        await database.dispose()
        return secrets

    AUTHORIZATIONS[:] = [f"Authorization: Bearer {key}\r\n" for key in asyncio.run(make_keys())]
    AUTHORIZATION = AUTHORIZATIONS[0]
    return {"LILAC_BENCH_KEYS_DIR": folder}
