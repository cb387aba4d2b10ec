"""Requests routed by model: three real servers (one serving `alpha`, one `beta`, one
both) sharing one keys database (a SQLite file), behind a real vllm-router in its plain
mode (round robin with retries, no `--enable-igw`), traffic from the official openai
client, as docs/fleet.md recommends. The replicas publish their models in the shared
database: a replica without the requested model answers 429 `model_not_here` and the
router retries elsewhere, so each request reaches a replica that serves its model, and
`GET /v1/models` through the router (forwarded to one replica) lists the fleet's models
in OpenAI's shape, filtered by the key. With `--prefer-awake-elsewhere`, a model asleep
on one replica and awake on another is served by the awake one. A replica that stops
drops out of the list.

The replicas run the scripted engine (seconds to start): routing is the HTTP side's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app.config.sources import parse_args
from app.db.engine import open_database
from app.tenancy.keys.store import KeyLimits, KeyStore
from perf.harness.servers import free_port, scripted_argv
from perf.scenarios.fleet import _settings_json

ROOT = Path(__file__).resolve().parents[2]
ROUTER = str(Path(sys.executable).with_name("vllm-router"))
REPLICAS = {"a": ("alpha",), "b": ("beta",), "c": ("alpha", "beta")}
ADMIN = "routing-admin-key"
HEARTBEAT_S = 1.0  # the replicas' fleet heartbeat: a replica gone drops out after 3


class Fleet:
    def __init__(
        self,
        router: str,
        replicas: dict[str, tuple[int, Path]],
        processes: dict[str, subprocess.Popen[bytes]],
        secrets: dict[str, str],
    ) -> None:
        self.router = router
        self.replicas = replicas
        self.processes = processes
        self.secrets = secrets
        self.client = self.sdk(secrets["all"])

    def sdk(self, secret: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.router}/v1", api_key=secret, max_retries=0)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.replicas[name][0]}"

    def chat(self, model: str, text: str = "hi", request_id: str | None = None) -> None:
        headers = {"X-Request-Id": request_id} if request_id else None
        reply = self.client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": text}],
            max_tokens=2,
            extra_headers=headers,
        )
        assert reply.model == model

    def events(self, name: str) -> list[dict[str, object]]:
        log = self.replicas[name][1]
        return [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]

    def served_after(self, before: dict[str, Counter[str]], total: int) -> dict[str, Counter[str]]:
        """Requests answered since `before`, once `total` of them are in the logs (the
        access line is written as the request ends)."""
        deadline = time.monotonic() + 10
        while True:
            now = self.served()
            delta = {name: now[name] - before.get(name, Counter()) for name in now}
            if sum(sum(c.values()) for c in delta.values()) >= total:
                return delta
            assert time.monotonic() < deadline, delta
            time.sleep(0.2)

    def outcomes(self, outcome: str) -> dict[str, int]:
        """Chat attempts each replica refused with `outcome`."""
        return {
            name: sum(1 for e in self.events(name) if e.get("outcome") == outcome)
            for name in self.replicas
        }

    def attempts(self, request_id: str) -> int:
        """Attempts the router made for one request: its access lines on every replica
        (the router forwards the client's X-Request-Id unchanged)."""
        return sum(
            1
            for name in self.replicas
            for e in self.events(name)
            if e.get("request_id") == request_id
        )

    def served(self) -> dict[str, Counter[str]]:
        """Chat requests each replica answered, by model (from its JSON access log)."""
        counts: dict[str, Counter[str]] = {}
        for name in self.replicas:
            counts[name] = Counter()
            for event in self.events(name):
                if event.get("endpoint") == "/v1/chat/completions" and event.get("status") == 200:
                    counts[name][str(event["model"])] += 1
        return counts


def _wait(url: str, process: subprocess.Popen[bytes], log: Path, path: str = "/health") -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} not ready:\n{log.read_text()[-3000:]}")


def _replica(port: int, models: tuple[str, ...], log: Path, data: Path) -> subprocess.Popen[bytes]:
    flags = ["--port", str(port), "--log-format", "json", "--prefer-awake-elsewhere"]
    flags += ["--admin-key", ADMIN, "--auth", "keys", "--data-dir", str(data)]
    flags += ["--fleet-models-heartbeat-s", str(HEARTBEAT_S)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LILAC_SCRIPTED_MODELS": ",".join(models)}
    env["LILAC_SETTINGS_JSON"] = json.dumps(_settings_json(parse_args(flags)))
    with log.open("wb") as out:
        command = scripted_argv(port, "build")
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True
        )


async def _keys(data: Path) -> dict[str, str]:
    """A key for every model, and one restricted to `beta`, in the shared database."""
    database = await open_database(f"sqlite:///{data}/lilac.db")
    store = KeyStore(database)
    _, everything = await store.create("routing", KeyLimits())
    _, beta_only = await store.create("beta-only", KeyLimits(models=("beta",)))
    await database.dispose()
    return {"all": everything, "beta": beta_only}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("model-routing")
    secrets = asyncio.run(_keys(folder))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        replicas: dict[str, tuple[int, Path]] = {}
        for name, models in REPLICAS.items():
            port, log = free_port(), folder / f"replica-{name}.log"
            processes.append(_replica(port, models, log, folder))
            replicas[name] = (port, log)
        port, log = free_port(), folder / "router.log"
        workers = [f"http://127.0.0.1:{port_}" for port_, _ in replicas.values()]
        command = [
            ROUTER, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
            "--policy", "round_robin", "--health-check-endpoint", "/health",
            "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
            "--retry-max-retries", "6", "--retry-initial-backoff-ms", "10",
            "--retry-max-backoff-ms", "200", "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port()), "--log-level", "warning",
        ]  # fmt: skip
        for (port_, log_), process in zip(replicas.values(), processes, strict=True):
            _wait(f"http://127.0.0.1:{port_}", process, log_)
        with log.open("wb") as out:
            processes.append(subprocess.Popen(command, stdout=out, stderr=out))
        router = f"http://127.0.0.1:{port}"
        _wait(router, processes[-1], log, "/health")
        time.sleep(2 * HEARTBEAT_S)  # every replica has seen the others' first heartbeat
        yield Fleet(router, replicas, dict(zip(REPLICAS, processes, strict=False)), secrets)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            process.wait(timeout=30)


def test_each_models_requests_reach_replicas_that_serve_it(fleet: Fleet) -> None:
    asked = ["alpha", "beta"] * 8 + ["alpha"] * 4 + ["beta"] * 4 + ["alpha", "beta"] * 4
    timings: list[tuple[str, float]] = []
    for index, model in enumerate(asked):
        request_id = f"route-{index}-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        fleet.chat(model, request_id=request_id)
        timings.append((request_id, time.perf_counter() - started))
    served = fleet.served_after({}, len(asked))
    print(f"\nrequests per model per replica: { {k: dict(v) for k, v in served.items()} }")
    assert set(served["a"]) == {"alpha"} and set(served["b"]) == {"beta"}
    assert served["a"]["alpha"] > 0 and served["b"]["beta"] > 0
    assert served["c"]["alpha"] > 0 and served["c"]["beta"] > 0
    for model in ("alpha", "beta"):
        assert sum(counts[model] for counts in served.values()) == asked.count(model)

    # What a misroute cost: the router's attempts per request, and the time beside a
    # request that got there first.
    hops = {request_id: fleet.attempts(request_id) for request_id, _ in timings}
    assert all(n >= 1 for n in hops.values()), hops
    misroutes = fleet.outcomes("model_not_here")
    assert sum(misroutes.values()) == sum(hops.values()) - len(asked)
    assert misroutes["c"] == 0  # c serves both: it refuses nothing
    by_hops: dict[int, list[float]] = {}
    for request_id, seconds in timings:
        by_hops.setdefault(hops[request_id], []).append(seconds)
    medians = {n: round(statistics.median(s) * 1000, 1) for n, s in sorted(by_hops.items())}
    print(f"attempts per request: {dict(Counter(hops.values()))}")
    print(f"median ms by attempts: {medians}; refused per replica: {misroutes}")

    # A model no replica serves: the replica's own 404 in OpenAI's shape.
    with pytest.raises(openai.NotFoundError):
        fleet.chat("gamma")


def test_the_router_lists_the_fleets_models_in_openais_shape(fleet: Fleet) -> None:
    listed = fleet.client.models.list()
    assert sorted(card.id for card in listed) == ["alpha", "beta"]
    # vllm-router 0.1.17 forwards GET /v1/models/{id} without the client's Authorization
    # header (GET /v1/models keeps it): with keys, the replica answers 401. Each
    # replica's own GET /v1/models/{id} gives the fleet's card (docs/fleet.md).
    with pytest.raises(openai.AuthenticationError):
        fleet.client.models.retrieve("beta")
    own = fleet.sdk(fleet.secrets["all"])
    own.base_url = httpx.URL(f"{fleet.url('a')}/v1/")
    card = own.models.retrieve("beta")  # served by b and c, not a
    assert card.id == "beta" and card.object == "model"
    raw = httpx.get(
        f"{fleet.router}/v1/models", headers={"authorization": f"Bearer {fleet.secrets['all']}"}
    )
    assert raw.json()["object"] == "list"

    # A key restricted to beta sees beta alone, wherever the router sends the call.
    beta_only = fleet.sdk(fleet.secrets["beta"])
    for _ in range(3):  # round robin: each replica answers one
        assert [card.id for card in beta_only.models.list()] == ["beta"]
    direct = fleet.sdk(fleet.secrets["beta"])
    direct.base_url = httpx.URL(f"{fleet.url('b')}/v1/")  # the router drops the key there
    with pytest.raises(openai.NotFoundError):
        direct.models.retrieve("alpha")
    with pytest.raises(openai.NotFoundError):
        beta_only.chat.completions.create(
            model="alpha", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    reply = beta_only.chat.completions.create(
        model="beta", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.model == "beta"


def _sleep(fleet: Fleet, replica: str, model: str) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    url = f"{fleet.url(replica)}/admin/models/{model}/sleep"
    response = httpx.post(url, headers=admin, timeout=10)
    assert response.status_code == 200 and response.json()["state"] == "asleep", response.text


def _state(fleet: Fleet, replica: str, model: str) -> str:
    auth = {"authorization": f"Bearer {fleet.secrets['all']}"}
    card = httpx.get(f"{fleet.url(replica)}/v1/models/{model}", headers=auth, timeout=10).json()
    return str(card["state"])


def test_a_model_asleep_on_one_replica_goes_to_the_one_where_it_is_awake(fleet: Fleet) -> None:
    _sleep(fleet, "a", "alpha")
    before = fleet.served()
    refused_before = fleet.outcomes("model_asleep_here")["a"]
    for index in range(8):
        fleet.chat("alpha", f"awake elsewhere {index}")  # distinct requests
    served = fleet.served_after(before, 8)
    refused = fleet.outcomes("model_asleep_here")["a"] - refused_before
    print(f"\nalpha asleep on a, awake on c: { {k: dict(v) for k, v in served.items()} }")
    print(f"first attempts a sent elsewhere: {refused}")
    assert served["c"]["alpha"] == 8 and served["a"]["alpha"] == 0
    assert refused > 0  # round robin did try a: its refusals sent them to c
    assert _state(fleet, "a", "alpha") == "asleep"  # never woken

    # Replica c stops (its rows leave the database): no replica has alpha awake, so a
    # wakes it for the first request that reaches it.
    fleet.processes["c"].terminate()
    fleet.processes["c"].wait(timeout=30)
    time.sleep(2 * HEARTBEAT_S)  # a's next heartbeat reads the fleet without c
    before = fleet.served()
    for index in range(4):
        fleet.chat("alpha", f"only asleep left {index}")
    served = fleet.served_after(before, 4)
    print(f"c gone: { {k: dict(v) for k, v in served.items()} }")
    assert served["a"]["alpha"] == 4
    assert _state(fleet, "a", "alpha") == "awake"


def test_a_replica_killed_drops_out_of_the_list_within_the_expiry_bound(fleet: Fleet) -> None:
    assert sorted(card.id for card in fleet.client.models.list()) == ["alpha", "beta"]
    # No clean shutdown: its rows stay. The whole process group goes, as a box does when
    # it dies: killing granian's main process alone leaves its worker serving.
    os.killpg(fleet.processes["b"].pid, signal.SIGKILL)
    fleet.processes["b"].wait(timeout=30)
    killed = time.monotonic()
    listed = _listed(fleet)
    while listed != ["alpha"]:
        waited = time.monotonic() - killed
        assert waited < 3 * HEARTBEAT_S + 2 * HEARTBEAT_S + 1, (waited, listed)
        time.sleep(0.2)
        listed = _listed(fleet)
    print(f"\nbeta gone from the list {time.monotonic() - killed:.2f} s after b was killed")
    with pytest.raises(openai.NotFoundError):  # nobody serves it now: a 404, not a 429
        fleet.chat("beta")


def _listed(fleet: Fleet) -> list[str] | None:
    """The fleet's models through the router; None while the router still picks the
    killed replica (until its health check drops it)."""
    try:
        return sorted(card.id for card in fleet.client.models.list())
    except openai.APIError:
        return None
