"""The Files API over the scripted engine and a real keys database (SQLite and
PostgreSQL), through the real `openai` client and raw HTTP: two keys' files kept apart,
and every bad upload a 400, 413 or 415 in the API's error shape, never a 500."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.main import create_app
from app.tenancy.service import Tenancy
from engine.scripted import ScriptedEngine
from tests.client import AppClient
from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, new_key

MAX_BYTES = 4096
MAX_LINES = 20


def line(custom_id: Any = "req-1", **changes: Any) -> dict[str, Any]:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
    request = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": body,
    }
    request.update(changes)
    if custom_id is None:
        del request["custom_id"]
    return request


def jsonl(*lines: dict[str, Any] | str) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


GOOD = jsonl(*(line(f"req-{i}") for i in range(5)))


@asynccontextmanager
async def files_app(
    database: AsyncEngine, tmp_path: Path, **settings: Any
) -> AsyncIterator[tuple[AppClient, Tenancy]]:
    tenancy = Tenancy.with_database(database, tmp_path / "spool.jsonl")
    options = {"max_file_bytes": MAX_BYTES, "max_file_lines": MAX_LINES, **settings}
    app = create_app(
        Settings(admin_key=ADMIN_KEY, auth="keys", **options),
        engine=ScriptedEngine(),
        tenancy=tenancy,
    )
    async with AppClient(app, timeout=10) as http:
        yield http, tenancy
    assert tenancy.writer is not None
    await tenancy.writer.close()


def client(http: AppClient, secret: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key=secret, http_client=http, max_retries=0
    )


async def test_the_openai_client_uploads_lists_reads_and_deletes(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with files_app(database, tmp_path) as (http, tenancy):
        _, secret = await new_key(tenancy)
        sdk = client(http, secret)
        made = await sdk.files.create(file=("requests.jsonl", io.BytesIO(GOOD)), purpose="batch")
        assert made.id.startswith("file-") and made.object == "file"
        assert (made.bytes, made.filename, made.purpose, made.status) == (
            len(GOOD), "requests.jsonl", "batch", "processed",
        )  # fmt: skip
        assert (await sdk.files.retrieve(made.id)).model_dump() == made.model_dump()
        assert (await sdk.files.content(made.id)).read() == GOOD
        second = await sdk.files.create(file=("b.jsonl", io.BytesIO(GOOD)), purpose="batch")
        page = await sdk.files.list(limit=1)
        assert [f.id for f in page.data] == [second.id] and page.has_more
        everything = [f.id async for f in sdk.files.list(limit=1)]  # the SDK follows `after`
        assert everything == [second.id, made.id]
        oldest = await sdk.files.list(order="asc", purpose="batch")
        assert [f.id for f in oldest.data] == [made.id, second.id] and not oldest.has_more
        gone = await sdk.files.delete(made.id)
        assert (gone.id, gone.deleted, gone.object) == (made.id, True, "file")
        with pytest.raises(openai.NotFoundError) as missing:
            await sdk.files.retrieve(made.id)
        assert missing.value.code == "file_not_found"


async def test_one_key_cannot_see_read_list_or_delete_anothers_file(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with files_app(database, tmp_path) as (http, tenancy):
        (_, alice), (_, bob) = await new_key(tenancy), await new_key(tenancy)
        made = await client(http, alice).files.create(
            file=("a.jsonl", io.BytesIO(GOOD)), purpose="batch"
        )
        for method, path in [
            ("GET", f"/v1/files/{made.id}"),
            ("GET", f"/v1/files/{made.id}/content"),
            ("DELETE", f"/v1/files/{made.id}"),
            ("GET", f"/v1/files?after={made.id}"),
        ]:
            response = await http.request(method, path, headers=bearer(bob))
            assert response.status_code == 404, (method, path)
            assert response.json()["error"]["code"] == "file_not_found"
            assert made.id in response.json()["error"]["message"]
        listed = await http.get("/v1/files", headers=bearer(bob))
        assert listed.json() == {
            "object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False,
        }  # fmt: skip
        # All still there for its owner.
        kept = await http.get(f"/v1/files/{made.id}/content", headers=bearer(alice))
        assert kept.content == GOOD
        assert kept.headers["content-length"] == str(len(GOOD))


async def test_a_file_with_a_model_the_key_may_not_use_is_refused(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with files_app(database, tmp_path) as (http, tenancy):
        _, narrow = await new_key(tenancy, models=("other",))
        with pytest.raises(openai.BadRequestError) as refused:
            await client(http, narrow).files.create(
                file=("a.jsonl", io.BytesIO(GOOD)), purpose="batch"
            )
        assert refused.value.code == "invalid_batch_line"
        assert "line 1 (custom_id 'req-0'): the model 'scripted' does not exist" in str(
            refused.value.message
        )


BAD_FILES = [
    ("not JSON", jsonl(line("a"), "{nope"), "line 2: the line is not valid JSON"),
    ("not an object", jsonl("[1, 2]"), "line 1: the line is not a JSON object"),
    ("no custom_id", jsonl(line("a"), line(None)), "line 2: custom_id is missing"),
    ("custom_id not a string", jsonl(line(7)), "line 1: custom_id must be a string"),
    (
        "duplicate custom_id",
        jsonl(line("a"), line("b"), line("a")),
        "line 3 (custom_id 'a'): custom_id is used by an earlier line",
    ),
    (
        "unserved url",
        b"\n" + jsonl(line("a"), line("req-9", url="/v1/embeddings")),
        "line 3 (custom_id 'req-9'): url '/v1/embeddings' is not served; served: "
        "/v1/chat/completions, /v1/completions",
    ),
    ("method", jsonl(line("a", method="GET")), "line 1 (custom_id 'a'): method 'GET'"),
    (
        "unserved model",
        jsonl(line("a", body={"model": "gpt-9", "messages": []})),
        "line 1 (custom_id 'a'): the model 'gpt-9' does not exist",
    ),
    (
        "no body",
        jsonl({"custom_id": "a", "method": "POST", "url": "/v1/completions"}),
        "line 1 (custom_id 'a'): body is missing",
    ),
    ("body not an object", jsonl(line("a", body=[1])), "line 1 (custom_id 'a'): body must be"),
    ("no model", jsonl(line("a", body={"prompt": "x"})), "line 1 (custom_id 'a'): body.model"),
    (
        "too deep",
        jsonl(line("a"), '{"custom_id": "b", "x": ' + "[" * 70 + "]" * 70 + "}"),
        "line 2: the line nests JSON deeper than 64 levels",
    ),
    ("over the line bound", jsonl(*(line(f"r{i}") for i in range(21))), "more than 20 lines"),
]


async def test_bad_batch_files_are_a_400_naming_the_line(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with files_app(database, tmp_path, max_file_bytes=100_000) as (http, tenancy):
        _, secret = await new_key(tenancy)
        for case, content, message in BAD_FILES:
            response = await http.post(
                "/v1/files",
                headers=bearer(secret),
                files={"file": ("in.jsonl", content)},
                data={"purpose": "batch"},
            )
            assert response.status_code == 400, (case, response.text)
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error", case
            assert error["param"] == "file", case
            assert error["message"].startswith(message) or message in error["message"], error
        listed = await http.get("/v1/files", headers=bearer(secret))
        assert listed.json()["data"] == []  # nothing stored


async def test_bad_forms_get_their_documented_status(database: AsyncEngine, tmp_path: Path) -> None:
    async with files_app(database, tmp_path) as (http, tenancy):
        _, secret = await new_key(tenancy)
        auth = bearer(secret)

        async def upload(**kwargs: Any) -> tuple[int, dict[str, Any]]:
            headers = kwargs.pop("headers", auth)
            response = await http.post("/v1/files", headers=headers, **kwargs)
            return response.status_code, response.json()["error"]

        status, error = await upload(files={"file": ("a", GOOD)}, data={"purpose": "fine-tune"})
        assert status == 400 and error["param"] == "purpose"
        assert error["message"] == "purpose 'fine-tune' is not served; served: 'batch'."
        status, error = await upload(files={"file": ("a", GOOD)})
        assert status == 400 and error["param"] == "purpose"
        status, error = await upload(files={"other": ("a", GOOD)}, data={"purpose": "batch"})
        assert (status, error["param"]) == (400, "file")
        status, error = await upload(data={"purpose": "batch"}, files={"x": ("", b"")})
        assert (status, error["param"]) == (400, "file")
        status, error = await upload(json={"purpose": "batch"})
        assert (status, error["code"]) == (415, "unsupported_media_type")
        status, error = await upload(
            content=b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc',
            headers={**auth, "content-type": "multipart/form-data; boundary=b"},
        )
        assert (status, error["code"]) == (400, "invalid_multipart")
        big = jsonl(*(line(f"r{i}", pad="x" * 300) for i in range(15)))
        assert len(big) > MAX_BYTES
        status, error = await upload(files={"file": ("a", big)}, data={"purpose": "batch"})
        assert (status, error["code"], error["param"]) == (413, "file_too_large", "file")
        assert str(MAX_BYTES) in error["message"]
        listed = await http.get("/v1/files", headers=auth)
        assert listed.json()["data"] == []


async def test_bad_list_parameters_are_a_400(database: AsyncEngine, tmp_path: Path) -> None:
    async with files_app(database, tmp_path) as (http, tenancy):
        _, secret = await new_key(tenancy)
        for query, param in [("limit=0", "limit"), ("limit=x", "limit"), ("order=up", "order"),
                             ("after=file-nope", "after")]:  # fmt: skip
            response = await http.get(f"/v1/files?{query}", headers=bearer(secret))
            assert response.status_code in (400, 404), query
            assert response.json()["error"]["param"] == param


async def test_without_a_key_a_request_needs_one(database: AsyncEngine, tmp_path: Path) -> None:
    async with files_app(database, tmp_path) as (http, _):
        response = await http.get("/v1/files")
        assert response.status_code == 401


class StreamedUpload:
    """An upload sent straight through the app's ASGI interface in 64 KiB pieces, as a
    client that keeps sending would: how many pieces the app took before answering."""

    PIECE = b"x" * 65536

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.taken = 0
        self.status: int | None = None
        self.body = b""

    async def receive(self) -> dict[str, Any]:
        if self.taken == 0:
            head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n'
            self.taken += 1
            return {"type": "http.request", "body": head, "more_body": True}
        self.taken += 1
        more = self.taken < self.pieces
        return {"type": "http.request", "body": self.PIECE, "more_body": more}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")

    async def run(self, app: Any, headers: list[tuple[bytes, bytes]]) -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/v1/files", "raw_path": b"/v1/files",
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "headers": [
                (b"host", b"127.0.0.1"),
                (b"content-type", b"multipart/form-data; boundary=b"),
                *headers,
            ],
        }  # fmt: skip
        await app(scope, self.receive, self.send)


async def test_an_upload_over_the_byte_bound_is_refused_as_it_streams(tmp_path: Path) -> None:
    """A 64 MB body to a server that takes 4 KiB files: the 413 comes after the first
    pieces, the rest is never read (nor buffered); with a Content-Length that says so,
    before any."""
    app = create_app(
        Settings(data_dir=str(tmp_path), max_file_bytes=MAX_BYTES), engine=ScriptedEngine()
    )
    streamed = StreamedUpload(pieces=1000)
    await streamed.run(app, [])
    assert streamed.status == 413 and streamed.taken <= 2
    assert json.loads(streamed.body)["error"]["code"] == "file_too_large"

    declared = StreamedUpload(pieces=1000)
    await declared.run(app, [(b"content-length", str(1000 * 65536).encode())])
    assert declared.status == 413 and declared.taken == 0

    bigger = create_app(
        Settings(data_dir=str(tmp_path), max_file_bytes=20_000_000), engine=ScriptedEngine()
    )
    allowed = StreamedUpload(pieces=200)  # 13 MB: over Litestar's 10 MB default
    await allowed.run(bigger, [])
    assert allowed.taken == 200
    assert allowed.status == 400  # read whole, then refused: the form never closed
    assert json.loads(allowed.body)["error"]["code"] == "invalid_multipart"


class LeavingUpload(StreamedUpload):
    """A client that leaves after sending `pieces` pieces."""

    async def receive(self) -> dict[str, Any]:
        if self.taken >= self.pieces:
            return {"type": "http.disconnect"}
        message = await super().receive()
        return {**message, "more_body": True}


async def test_a_client_that_leaves_mid_upload_stores_nothing(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)), engine=ScriptedEngine())
    leaving = LeavingUpload(pieces=3)
    await leaving.run(app, [])
    assert leaving.status == 499  # logged as the client's leaving, not a 500
    async with AppClient(app, timeout=10) as http:  # without keys: the anonymous owner's
        assert (await http.get("/v1/files")).json()["data"] == []
        made = await http.post(
            "/v1/files", files={"file": ("a.jsonl", GOOD)}, data={"purpose": "batch"}
        )
        assert made.status_code == 200, made.text
        listed = (await http.get("/v1/files")).json()["data"]
        assert [f["id"] for f in listed] == [made.json()["id"]]
