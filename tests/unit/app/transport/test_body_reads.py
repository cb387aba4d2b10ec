"""Bodies that arrive slowly or never whole, driven through the whole app over raw ASGI
(the scripted engine): a body that stops arriving gets a 408 `request_timeout` with
`Connection: close` after the read timeout, on JSON routes and uploads alike; a body
that keeps coming, however slowly, is not cut; one client past its bound on bodies in
flight gets a 429 at once while another address is unaffected; GETs are not counted,
and the counts go back to zero however the bodies end."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import Any

import pytest
from litestar import Litestar

from app.config.settings import Settings
from app.main import create_app
from app.transport.body_reads import SLOW_START_S, BodyReads, ClientCounts, expects_body
from engine.scripted import ScriptedEngine
from tests.client import scratch_data_dir

TIMEOUT_S = 0.3
CHAT = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}).encode()
HALF = CHAT[: len(CHAT) // 2]
HERE = ("127.0.0.1", 50000)
ELSEWHERE = ("10.0.0.2", 50000)


def build(timeout_s: float = TIMEOUT_S, per_client: int = 2) -> Litestar:
    settings = Settings(
        data_dir=scratch_data_dir(),
        body_read_timeout_s=timeout_s,
        max_bodies_in_flight_per_client=per_client,
    )
    return create_app(settings, engine=ScriptedEngine(["ok"]))


def counts(app: Litestar) -> ClientCounts:
    reads: BodyReads = app.state["body_reads"]
    return reads.counts


class Exchange:
    """One request over raw ASGI: the test feeds the body's parts; the app's messages
    are kept."""

    def __init__(
        self,
        app: Litestar,
        *,
        method: str = "POST",
        path: str = "/v1/chat/completions",
        length: int = len(CHAT),
        client: tuple[str, int] = HERE,
        headers: Iterable[tuple[bytes, bytes]] = ((b"content-type", b"application/json"),),
    ) -> None:
        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        all_headers = [(b"host", b"127.0.0.1:8000"), *headers]
        if method != "GET":
            all_headers.append((b"content-length", str(length).encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": all_headers,
            "client": client,
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        asgi: Any = app  # raw ASGI messages, as a server hands them
        self.task = asyncio.create_task(asgi(scope, self.incoming.get, self._send))

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def part(self, body: bytes, more: bool = True) -> None:
        self.incoming.put_nowait({"type": "http.request", "body": body, "more_body": more})

    def leave(self) -> None:
        self.incoming.put_nowait({"type": "http.disconnect"})

    async def done(self, within_s: float = 5.0) -> None:
        async with asyncio.timeout(within_s):
            await self.task

    @property
    def status(self) -> int:
        return int(next(m["status"] for m in self.sent if m["type"] == "http.response.start"))

    @property
    def headers(self) -> dict[str, str]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {k.decode().lower(): v.decode() for k, v in start["headers"]}

    def error(self) -> dict[str, Any]:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return dict(json.loads(body)["error"])


async def test_a_body_that_stops_arriving_gets_a_408_after_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = build()
    caplog.set_level(logging.INFO, logger="lilac.access")
    started = asyncio.get_running_loop().time()
    request = Exchange(app)
    request.part(HALF)
    await request.done()
    waited = asyncio.get_running_loop().time() - started
    assert request.status == 408
    assert request.error() == {
        "message": request.error()["message"],
        "type": "invalid_request_error",
        "param": None,
        "code": "request_timeout",
    }
    assert request.headers["connection"] == "close"
    assert TIMEOUT_S <= waited < TIMEOUT_S + 1.0
    assert counts(app).total() == 0
    access = [r for r in caplog.records if r.name == "lilac.access"]
    assert [r.access["status"] for r in access] == [408]  # type: ignore[attr-defined]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback


async def test_a_body_that_never_starts_gets_a_408_too() -> None:
    app = build()
    request = Exchange(app)
    await request.done()
    assert request.status == 408 and request.error()["code"] == "request_timeout"


async def test_an_upload_that_stops_arriving_gets_a_408() -> None:
    app = build()
    boundary = b"b0undary"
    form = b"--" + boundary + b'\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch'
    request = Exchange(
        app,
        path="/v1/files",
        length=len(form) + 1000,
        headers=[(b"content-type", b"multipart/form-data; boundary=" + boundary)],
    )
    request.part(form)
    await request.done()
    assert request.status == 408 and request.error()["code"] == "request_timeout"
    assert counts(app).total() == 0


async def test_a_body_that_arrives_slowly_but_keeps_coming_is_not_cut() -> None:
    app = build()
    request = Exchange(app)
    pieces = [CHAT[i : i + 8] for i in range(0, len(CHAT), 8)]
    for piece in pieces[:-1]:
        request.part(piece)
        await asyncio.sleep(TIMEOUT_S / 3)  # all of it takes several timeouts
    assert counts(app).of(HERE[0]) == 1
    request.part(pieces[-1], more=False)
    await request.done()
    assert request.status == 200, request.sent
    assert counts(app).total() == 0


async def test_one_client_past_its_bound_gets_a_429_at_once_and_others_are_unaffected() -> None:
    app = build(timeout_s=5.0, per_client=2)
    held = [Exchange(app) for _ in range(2)]
    for request in held:
        request.part(HALF)
    await asyncio.sleep(0.05)
    assert counts(app).of(HERE[0]) == 2

    refused = Exchange(app)  # half a body too: refused as it is seen arriving in parts
    refused.part(HALF)
    await refused.done(within_s=1.0)
    assert refused.status == 429
    assert refused.error()["code"] == "too_many_bodies_in_flight"
    assert refused.error()["type"] == "rate_limit_exceeded"
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["connection"] == "close"
    assert counts(app).of(HERE[0]) == 2
    silent = Exchange(app)  # headers, then nothing: in flight once its body is late
    await silent.done(within_s=SLOW_START_S + 1.0)
    assert silent.status == 429 and counts(app).of(HERE[0]) == 2

    other = Exchange(app, client=ELSEWHERE)  # another address has its own count
    other.part(CHAT, more=False)
    await other.done()
    assert other.status == 200

    looking = Exchange(app, method="GET", path="/v1/models")  # no body: not counted
    await looking.done()
    assert looking.status == 200

    for request in held:
        request.part(CHAT[len(HALF) :], more=False)
    for request in held:
        await request.done()
        assert request.status == 200
    assert counts(app).total() == 0
    again = Exchange(app)  # the bound is free again
    again.part(CHAT, more=False)
    await again.done()
    assert again.status == 200


async def test_the_counts_drop_back_when_bodies_time_out_or_clients_leave() -> None:
    app = build(per_client=3)
    stalled = [Exchange(app) for _ in range(2)]
    leaving = Exchange(app)
    for request in [*stalled, leaving]:
        request.part(HALF)
    await asyncio.sleep(0.05)
    assert counts(app).of(HERE[0]) == 3
    leaving.leave()
    await leaving.done()
    assert leaving.status == 499 and counts(app).of(HERE[0]) == 2
    for request in stalled:
        await request.done()
        assert request.status == 408
    assert counts(app).total() == 0


async def test_a_request_refused_before_its_body_is_read_leaves_the_count() -> None:
    app = build(per_client=1)
    wrong_type = Exchange(app, path="/v1/files", headers=[(b"content-type", b"text/plain")])
    wrong_type.part(HALF)  # refused (415) on its headers: the rest is never waited for
    await wrong_type.done()
    assert wrong_type.status == 415 and counts(app).total() == 0


async def test_no_timeout_and_no_bound_when_set_to_zero() -> None:
    app = build(timeout_s=0, per_client=0)
    held = [Exchange(app) for _ in range(5)]
    for request in held:
        request.part(HALF)
    await asyncio.sleep(TIMEOUT_S * 2)
    assert not any(request.task.done() for request in held)
    for request in held:
        request.part(CHAT[len(HALF) :], more=False)
        await request.done()
        assert request.status == 200
    assert counts(app).total() == 0


def test_the_counts_forget_a_client_at_zero() -> None:
    table = ClientCounts(limit=2)
    assert table.enter("a") and table.enter("a") and not table.enter("a")
    assert table.enter("b")
    table.leave("a")
    table.leave("a")
    table.leave("b")
    assert table.total() == 0 and table._counts == {}


@pytest.mark.parametrize(
    "headers, method, http_version, expected",
    [
        ([(b"content-length", b"12")], "POST", "1.1", True),
        ([(b"content-length", b"0")], "POST", "1.1", False),
        ([(b"content-length", b"000")], "POST", "1.1", False),
        ([(b"transfer-encoding", b"chunked")], "POST", "1.1", True),
        ([], "POST", "1.1", False),
        ([], "POST", "2", True),
        ([], "GET", "2", False),
    ],
)
def test_which_requests_expect_a_body(
    headers: list[tuple[bytes, bytes]], method: str, http_version: str, expected: bool
) -> None:
    scope = {"headers": headers, "method": method, "http_version": http_version}
    assert expects_body(scope) is expected


async def test_bodies_that_arrive_whole_are_never_counted() -> None:
    """A burst far over the bound from one client, each body whole at once (a load
    generator's 256 streams): every one answered."""
    app = build(timeout_s=5.0, per_client=2)
    burst = [Exchange(app) for _ in range(16)]
    for request in burst:
        request.part(CHAT, more=False)
    for request in burst:
        await request.done()
    assert [request.status for request in burst] == [200] * 16
    assert counts(app).total() == 0
