"""`lilac-serve serve --api-server-count 2` on the real engine, with real clients: two
frontend processes (granian workers) share one engine core the command launched; both
answer requests; a key's concurrency limit holds across both (through the PostgreSQL
keys database) while another key goes on being served; the engine's fair-share counters
are the one engine core's, the same read from either worker (/admin/fairness); SIGTERM
to the command drains both processes (a stream in flight on each finishes whole) and
then stops, within seconds, every process it started; the engine's frontend stays in
each worker (`--engine-frontend-process auto` is off with several). And one process (the
default) is today's path: the engine core is started by its granian worker's engine
process, and `/metrics` names no API server."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import psutil
import pytest

from app.db.engine import open_database
from app.tenancy.keys.store import KeyLimits, KeyStore
from engine.checkpoint import DEFAULT_MODEL_NAME
from perf.harness.servers import Server, launch_lilac
from tests.postgres import TempPostgres, start_postgres

MODEL = DEFAULT_MODEL_NAME
CHAT = [{"role": "user", "content": "Say hi."}]
FRESH = 12  # requests on fresh connections: the kernel spreads them over the workers
GRACE_S = 60
DRAIN_TOKENS = 128  # seconds of tokens here: still running when SIGTERM comes
RUNNING = re.compile(r"^lilac_admission_running (\S+)$", re.MULTILINE)
CHILD = "engine.remote.child"  # the engine's own process (engine.remote)
API_SERVER = re.compile(r'^lilac_api_server\{count="(\d+)",index="(\d+)",pid="(\d+)"\} 1\.0$')
ADMIN_KEY = "api-server-count-admin"  # for GET /admin/fairness


async def _make_keys(url: str) -> tuple[str, str]:
    engine = await open_database(url)
    try:
        store = KeyStore(engine)
        _, limited = await store.create("one-at-a-time", KeyLimits(rpm=None, max_concurrent=1))
        _, free = await store.create("unlimited", KeyLimits(rpm=None))
    finally:
        await engine.dispose()
    return limited, free


class Shared:
    def __init__(self, server: Server, limited: str, free: str, database_url: str = "") -> None:
        self.server = server
        self.limited = limited
        self.free = free
        self.database_url = database_url  # the keys database (keys made later work too)

    def client(self, key: str) -> openai.OpenAI:
        """A client of its own: its request opens a new connection (which worker
        accepts it is the kernel's choice)."""
        return openai.OpenAI(base_url=f"{self.server.base_url}/v1", api_key=key, max_retries=0)

    def chat(self, key: str) -> int:
        """The status of one tiny chat request on a fresh connection."""
        with self.client(key) as client:
            try:
                client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)  # type: ignore[arg-type]
            except openai.APIStatusError as exc:
                return exc.status_code
        return 200

    def wait_all_ready(self, timeout_s: float = 300) -> None:
        """Until both workers' engines are ready: /health answers for the worker that
        takes the connection, and the second may still be connecting to the engine."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.per_process_metrics()
            ready = [text for text in seen.values() if "\nlilac_engine_ready 1.0" in text]
            if len(ready) == 2:
                return
            assert time.monotonic() < deadline, f"not every worker ready: {sorted(seen)}"
            time.sleep(0.5)

    def per_process_metrics(self, tries: int = 60) -> dict[int, str]:
        """Each worker's /metrics (index -> text), scraping on fresh connections until
        every worker has answered one."""
        seen: dict[int, str] = {}
        for _ in range(tries):
            text = httpx.get(f"{self.server.base_url}/metrics", timeout=30).text
            for line in text.splitlines():
                match = API_SERVER.match(line)
                if match:
                    assert match[1] == "2"
                    seen[int(match[2])] = text
            if len(seen) == 2:
                break
        return seen


@pytest.fixture(scope="module")
def postgres() -> Iterator[TempPostgres]:
    pg = start_postgres()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="module")
def shared(postgres: TempPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    url = asyncio.run(postgres.new_database("apis"))
    limited, free = asyncio.run(_make_keys(url))
    workdir = tmp_path_factory.mktemp("api-server-count")
    server = launch_lilac(
        workdir,
        extra_args=(
            *("--api-server-count", "2", "--gpu-probe", "none"),
            *("--auth", "keys", "--database-url", url, "--limit-sync-interval-s", "0.2"),
            *("--grammar-warmup", "false"),
            # Later than the harness's 2 s: the drain test's streams finish inside it.
            *("--grace-period", str(GRACE_S)),
        ),
        extra_env={"LILAC_ADMIN_KEY": ADMIN_KEY},
    )
    try:
        server.wait_healthy()  # one worker is ready
        running = Shared(server, limited, free, url)
        running.wait_all_ready()
        yield running
    finally:
        if server.process.poll() is None:  # a test failed before the SIGTERM test
            server.kill_all()


def chat_statuses(text: str) -> dict[str, float]:
    """Chat requests this worker answered, by status."""
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("lilac_http_requests_total{") and "/v1/chat/completions" in line:
            status = re.search(r'status="(\d+)"', line)
            assert status is not None
            counts[status[1]] = counts.get(status[1], 0.0) + float(line.split()[-1])
    return counts


def test_two_worker_processes_share_one_engine_core(shared: Shared) -> None:
    server = shared.server
    workers = server.http_processes()
    core = server.engine_core()
    assert len(workers) == 2 and core is not None
    # The engine core is the command's child, not a worker's: the workers share it.
    assert core.ppid() == server.process.pid
    worker_pids = {worker.pid for worker in workers}
    assert [p for p in server.engine_processes() if p.ppid() in worker_pids] == []
    # `--engine-frontend-process auto` is off here, refusing nothing: vLLM's frontend is
    # in each worker, no engine process of its own beside it.
    beside = [c for w in workers for c in w.children() if CHILD in " ".join(c.cmdline())]
    assert beside == []
    statuses = [shared.chat(shared.free) for _ in range(FRESH)]
    assert statuses == [200] * FRESH
    seen = shared.per_process_metrics()
    assert sorted(seen) == [0, 1], "one worker never answered /metrics"
    pids = {
        int(match[3])
        for text in seen.values()
        for line in text.splitlines()
        if (match := API_SERVER.match(line))
    }
    assert pids == {worker.pid for worker in workers}
    # Both workers answered chat requests, each through the one engine core.
    for index, text in seen.items():
        assert chat_statuses(text).get("200", 0) > 0, f"worker {index} answered no chat"


def test_a_keys_concurrency_limit_holds_across_both_processes(shared: Shared) -> None:
    """The limited key runs one stream (on whichever worker took its connection); while
    it runs, every other request of that key is refused with a 429, on either worker,
    and the other key's requests all succeed on both."""
    before = {index: chat_statuses(text) for index, text in shared.per_process_metrics().items()}
    with shared.client(shared.limited) as client:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=CHAT,  # type: ignore[arg-type]
            max_tokens=256,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        next(iter(stream))  # running: the key's one slot is taken
        results: dict[str, list[int]] = {"limited": [], "free": []}

        def send(which: str, key: str) -> None:
            results[which].append(shared.chat(key))

        threads = [
            threading.Thread(target=send, args=(which, key))
            for which, key in (("limited", shared.limited), ("free", shared.free))
            for _ in range(FRESH)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        stream.close()  # the client leaves; the engine frees its work
    assert results["limited"] == [429] * FRESH, results
    assert results["free"] == [200] * FRESH, results
    after = {index: chat_statuses(text) for index, text in shared.per_process_metrics().items()}
    assert sorted(after) == [0, 1]
    for index in (0, 1):
        refused = after[index].get("429", 0) - before[index].get("429", 0)
        served = after[index].get("200", 0) - before[index].get("200", 0)
        # Each worker refused some of the limited key's requests: the other worker's
        # stream held the key's one slot there too, not only in its own process.
        assert refused > 0, (index, before, after)
        assert served > 0, (index, before, after)


async def _new_keys(url: str, names: list[str]) -> dict[str, tuple[str, str]]:
    """Keys made while the server runs: name -> (key id, secret)."""
    engine = await open_database(url)
    try:
        store = KeyStore(engine)
        made = {}
        for name in names:
            record, secret = await store.create(name, KeyLimits(rpm=None))
            made[name] = (record.id, secret)
    finally:
        await engine.dispose()
    return made


def answered(text: str, path: str) -> float:
    """Requests to `path` this worker answered with a 200."""
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("lilac_http_requests_total{") and path in line and 'status="200"' in line
    )


def fairness_view(shared: Shared, key_ids: set[str]) -> dict[str, tuple[int, int, float]]:
    """GET /admin/fairness on a fresh connection: the model's tenants of `key_ids`, as
    key id -> (tokens, requests in the engine, weight)."""
    reply = httpx.get(
        f"{shared.server.base_url}/admin/fairness",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    (model,) = [m for m in reply.json()["data"] if m["model"] == MODEL]
    assert model["fair_share"] is True, model
    return {
        t["key_id"]: (t["tokens"], t["active"], t["weight"])
        for t in model["tenants"]
        if t["key_id"] in key_ids
    }


FAIR_REQUESTS = {"fair-a": 6, "fair-b": 3}  # chats each new key sends


def test_the_engines_service_counters_are_one_per_engine_not_per_frontend(
    shared: Shared,
) -> None:
    """Two new keys' chats, each on a fresh connection (both workers take some), are
    counted once, in the one engine core's scheduler: /admin/fairness, asked of either
    worker several times, shows both keys with the tokens their answers' usage reported."""
    keys = asyncio.run(_new_keys(shared.database_url, list(FAIR_REQUESTS)))
    key_ids = {key_id for key_id, _ in keys.values()}
    before = shared.per_process_metrics()
    sent = dict.fromkeys(FAIR_REQUESTS, 0)
    rounds = range(max(FAIR_REQUESTS.values()))
    order = [name for r in rounds for name, count in FAIR_REQUESTS.items() if r < count]
    for i, name in enumerate(order):
        with shared.client(keys[name][1]) as client:
            reply = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"Say hi to {name}, guest {i}."}],
                max_tokens=3,
            )
        assert reply.usage is not None
        sent[name] += reply.usage.prompt_tokens + reply.usage.completion_tokens

    # The last request's end publishes at once; a few reads for a slow file system.
    expected = {keys[name][0]: name for name in FAIR_REQUESTS}
    deadline = time.monotonic() + 10
    while True:
        view = fairness_view(shared, key_ids)
        if set(view) == key_ids and all(active == 0 for _, active, _ in view.values()):
            break
        assert time.monotonic() < deadline, view
        time.sleep(0.2)
    views = [fairness_view(shared, key_ids) for _ in range(FRESH)]
    assert all(v == view for v in views), views  # every worker reads the one engine's
    for key_id, (tokens, _, weight) in view.items():
        name = expected[key_id]
        # The prompt and output tokens of all its requests, whichever worker took them
        # (the engine counts up to one fewer a request: the step that ends a prompt is
        # charged one prompt token short).
        assert sent[name] - FAIR_REQUESTS[name] <= tokens <= sent[name], (name, view, sent)
        assert weight == 1.0

    after = shared.per_process_metrics()
    assert sorted(after) == [0, 1]
    for index in (0, 1):
        chats = chat_statuses(after[index]).get("200", 0) - chat_statuses(before[index]).get(
            "200", 0
        )
        assert chats > 0, f"worker {index} took none of the chats"
        reads = answered(after[index], "/admin/fairness") - answered(
            before[index], "/admin/fairness"
        )
        assert reads > 0, f"worker {index} answered no /admin/fairness"


def running(text: str) -> float:
    match = RUNNING.search(text)
    assert match is not None, "no lilac_admission_running on /metrics"
    return float(match[1])


class Drained:
    """One stream opened before SIGTERM and read to its end after it."""

    def __init__(self, shared: Shared) -> None:
        self.client = shared.client(shared.free)
        stream = self.client.chat.completions.create(
            model=MODEL,
            messages=CHAT,  # type: ignore[arg-type]
            max_tokens=DRAIN_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        self.chunks = iter(stream)
        next(self.chunks)  # admitted and running on whichever worker took it
        self.finish_reasons: list[str | None] = []
        self.completion_tokens: int | None = None
        self.error: BaseException | None = None

    def read_to_end(self) -> None:
        try:
            for chunk in self.chunks:
                self.finish_reasons += [choice.finish_reason for choice in chunk.choices]
                if chunk.usage is not None:
                    self.completion_tokens = chunk.usage.completion_tokens
        except Exception as exc:  # said in the assertion, not lost in the thread
            self.error = exc
        finally:
            self.client.close()


def test_sigterm_drains_both_processes_then_stops_every_process(shared: Shared) -> None:
    """A stream in flight on each worker when SIGTERM comes finishes whole (one
    process's drain must not end the other's requests on the engine core they share);
    then the command exits 0 within seconds, leaving no process behind."""
    server = shared.server
    started = server.processes()[1:]
    names = {process.pid: process.name() for process in started}
    assert len(started) >= 3, names  # two workers and the engine core at least
    streams: list[Drained] = []
    for _ in range(FRESH):  # the kernel picks each connection's worker
        streams.append(Drained(shared))
        if len(streams) >= 2 and all(
            running(text) >= 1 for text in shared.per_process_metrics().values()
        ):
            break
    per_worker = {index: running(text) for index, text in shared.per_process_metrics().items()}
    assert sorted(per_worker) == [0, 1] and min(per_worker.values()) >= 1, per_worker
    server.process.send_signal(signal.SIGTERM)  # the command alone, not its group
    readers = [threading.Thread(target=stream.read_to_end) for stream in streams]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=GRACE_S + 30)
    drained = time.monotonic()
    for stream in streams:
        assert stream.error is None, stream.error
        assert stream.finish_reasons[-1:] == ["length"], stream.finish_reasons
        assert stream.completion_tokens == DRAIN_TOKENS
    assert server.process.wait(timeout=GRACE_S + 60) == 0, server.log_tail()
    stopped_after = time.monotonic() - drained
    _, alive = psutil.wait_procs(started, timeout=30)
    assert alive == [], {p.pid: names[p.pid] for p in alive}
    # The engine core stops in vLLM's 5 s of grace at most; the workers at once. A worker
    # that would not stop is killed only after granian's kill timeout (15 s and more),
    # past this bound. Granian's "refused to gracefully stop" line alone says nothing: it
    # is also logged for a worker already exiting (its pipe closed, not yet reaped 1 ms
    # later, as a large process can be while its memory is unmapped).
    assert stopped_after < 15.0, (stopped_after, server.log_tail())


def test_one_process_is_todays_path(server: Server) -> None:
    """The default: one granian worker, whose engine runs in a process of its own (its
    child, `--engine-frontend-process auto`), which starts the engine core itself."""
    worker = server.http_process(granian=True)
    core = server.engine_core()
    assert core is not None
    engine_process = psutil.Process(core.ppid())
    assert CHILD in " ".join(engine_process.cmdline())
    assert engine_process.ppid() == worker.pid
    assert len(server.http_processes()) == 1
    assert "lilac_api_server" not in server.metrics_text()
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="none", max_retries=0) as c:
        reply = c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)  # type: ignore[arg-type]
    assert reply.choices[0].message.content
