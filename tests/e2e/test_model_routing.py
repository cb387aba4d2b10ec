"""Requests routed by model: three real servers (one serving `alpha`, one `beta`, one
both) behind a real vllm-router in its multi-model mode (`--enable-igw`), workers
registered with their model as docs/fleet.md says, traffic from the official openai
client. Each request must reach a replica that serves its model, every replica serving
a model must get some of it, and the router lists the union of the models. With
`--prefer-awake-elsewhere`, a model asleep on one replica and awake on another is
served by the awake one, and by the sleeping one (which wakes it) once the other is
gone.

The replicas run the scripted engine (seconds to start): routing is the HTTP side's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app.settings_sources import parse_args
from perf.harness.servers import free_port, scripted_argv
from perf.scenarios.fleet import _settings_json

ROOT = Path(__file__).resolve().parents[2]
ROUTER = str(Path(sys.executable).with_name("vllm-router"))
REPLICAS = {"a": ("alpha",), "b": ("beta",), "c": ("alpha", "beta")}
ADMIN = "routing-admin-key"


class Fleet:
    def __init__(
        self,
        router: str,
        replicas: dict[str, tuple[int, Path]],
        processes: dict[str, subprocess.Popen[bytes]],
    ) -> None:
        self.router = router
        self.replicas = replicas
        self.processes = processes
        self.client = openai.OpenAI(base_url=f"{router}/v1", api_key="none", max_retries=0)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.replicas[name][0]}"

    def chat(self, model: str, text: str = "hi") -> None:
        reply = self.client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": text}], max_tokens=2
        )
        assert reply.model == model

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

    def refused(self, name: str) -> int:
        """First attempts a replica sent elsewhere (429 `model_asleep_here`)."""
        log = self.replicas[name][1]
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        return sum(1 for e in lines if e.get("outcome") == "model_asleep_here")

    def served(self) -> dict[str, Counter[str]]:
        """Chat requests each replica answered, by model (from its JSON access log)."""
        counts: dict[str, Counter[str]] = {}
        for name, (_, log) in self.replicas.items():
            counts[name] = Counter()
            for line in log.read_text().splitlines():
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                if event.get("endpoint") == "/v1/chat/completions" and event.get("status") == 200:
                    counts[name][event["model"]] += 1
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


def _replica(port: int, models: tuple[str, ...], log: Path) -> subprocess.Popen[bytes]:
    flags = ["--port", str(port), "--log-format", "json", "--prefer-awake-elsewhere"]
    flags += ["--admin-key", ADMIN]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LILAC_SCRIPTED_MODELS": ",".join(models)}
    env["LILAC_SETTINGS_JSON"] = json.dumps(_settings_json(parse_args(flags)))
    with log.open("wb") as out:
        command = scripted_argv(port, "build")
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)


def register(router: str, url: str, model: str) -> None:
    """One worker per (URL, model): vllm-router keys workers by URL, so a box serving
    two models is registered under a second name for the second (here `localhost`
    beside `127.0.0.1`; on Kubernetes, one Service per model)."""
    body = {"url": url, "model_id": model}
    response = httpx.post(f"{router}/workers", json=body, timeout=10)
    assert response.status_code == 200 and response.json()["success"], response.text


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("model-routing")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        replicas: dict[str, tuple[int, Path]] = {}
        for name, models in REPLICAS.items():
            port, log = free_port(), folder / f"replica-{name}.log"
            processes.append(_replica(port, models, log))
            replicas[name] = (port, log)
        port, log = free_port(), folder / "router.log"
        command = [
            ROUTER, "--host", "127.0.0.1", "--port", str(port), "--enable-igw",
            "--policy", "round_robin", "--health-check-endpoint", "/health",
            "--health-check-interval-secs", "1", "--retry-max-retries", "6",
            "--retry-initial-backoff-ms", "50", "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port()), "--log-level", "warning",
        ]  # fmt: skip
        with log.open("wb") as out:
            processes.append(subprocess.Popen(command, stdout=out, stderr=out))
        router = f"http://127.0.0.1:{port}"
        for (port_, log_), process in zip(replicas.values(), processes, strict=False):
            _wait(f"http://127.0.0.1:{port_}", process, log_)
        _wait(router, processes[-1], log, "/health")
        for name, models in REPLICAS.items():
            hosts = ("127.0.0.1", "localhost")
            for host, model in zip(hosts, models, strict=False):
                register(router, f"http://{host}:{replicas[name][0]}", model)
        yield Fleet(router, replicas, dict(zip(REPLICAS, processes, strict=False)))
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            process.wait(timeout=30)


def test_each_models_requests_reach_replicas_that_serve_it(fleet: Fleet) -> None:
    asked = ["alpha"] * 12 + ["beta"] * 12
    for model in asked[0::2] + asked[1::2]:  # alternating, then the rest
        fleet.chat(model)
    served = fleet.served_after({}, len(asked))
    print(f"\nrequests per model per replica: { {k: dict(v) for k, v in served.items()} }")
    assert set(served["a"]) == {"alpha"} and set(served["b"]) == {"beta"}
    assert served["c"]["alpha"] > 0 and served["c"]["beta"] > 0
    for model in ("alpha", "beta"):
        assert sum(counts[model] for counts in served.values()) == 12

    # A model no replica serves: the replica's own 404 in OpenAI's shape.
    with pytest.raises(openai.NotFoundError):
        fleet.chat("gamma")


def test_the_router_lists_the_union_of_the_replicas_models(fleet: Fleet) -> None:
    # vllm-router 0.1.17 answers GET /v1/models itself, from its worker registry, in its
    # own shape (`{"models": [...]}`): the union of the registered ids, which is the
    # union of what the replicas list (each in OpenAI's shape).
    listed = httpx.get(f"{fleet.router}/v1/models", timeout=10).json()
    union: set[str] = set()
    for name in fleet.replicas:
        own = openai.OpenAI(base_url=f"{fleet.url(name)}/v1", api_key="none").models.list()
        union |= {card.id for card in own}
    assert sorted(listed["models"]) == sorted(union) == ["alpha", "beta"]
    # The openai client reads `data`, which that answer lacks: an empty list. No flag of
    # 0.1.17 changes it (docs/fleet.md).
    assert list(fleet.client.models.list()) == []
    # Each model's card (state, context length) from the boxes the registry names.
    workers = httpx.get(f"{fleet.router}/workers", timeout=10).json()["workers"]
    for worker in workers:
        card = httpx.get(f"{worker['url']}/v1/models/{worker['model_id']}", timeout=10)
        assert card.status_code == 200 and card.json()["state"] == "awake"
    assert {w["model_id"] for w in workers} == {"alpha", "beta"}


def _sleep(fleet: Fleet, replica: str, model: str) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    url = f"{fleet.url(replica)}/admin/models/{model}/sleep"
    response = httpx.post(url, headers=admin, timeout=10)
    assert response.status_code == 200 and response.json()["state"] == "asleep", response.text


def _state(fleet: Fleet, replica: str, model: str) -> str:
    card = httpx.get(f"{fleet.url(replica)}/v1/models/{model}", timeout=10).json()
    return str(card["state"])


def test_a_model_asleep_on_one_replica_goes_to_the_one_where_it_is_awake(fleet: Fleet) -> None:
    _sleep(fleet, "a", "alpha")
    before = fleet.served()
    for index in range(8):
        fleet.chat("alpha", f"awake elsewhere {index}")  # distinct requests
    served = fleet.served_after(before, 8)
    refused = fleet.refused("a")
    print(f"\nalpha asleep on a, awake on c: { {k: dict(v) for k, v in served.items()} }")
    print(f"first attempts a sent elsewhere: {refused}")
    assert served["c"]["alpha"] == 8 and served["a"]["alpha"] == 0
    assert refused > 0  # round robin did try a: its refusals sent them to c
    assert _state(fleet, "a", "alpha") == "asleep"  # never woken

    # Replica c gone: the requests still reach a, which wakes its model for them.
    fleet.processes["c"].terminate()
    fleet.processes["c"].wait(timeout=30)
    before = fleet.served()
    for index in range(4):
        fleet.chat("alpha", f"only asleep left {index}")
    served = fleet.served_after(before, 4)
    print(f"c gone: { {k: dict(v) for k, v in served.items()} }")
    assert served["a"]["alpha"] == 4
    assert _state(fleet, "a", "alpha") == "awake"
