"""The Files API's expiry, stored-bytes quota and request rate, over the scripted engine
and a real keys database (SQLite and PostgreSQL): `expires_after` taken, returned and
checked; an expired file gone from every read; a key at its quota refused while another
uploads, and freed by a delete at once; a keyless server's one owner under the quota;
uploads and reads counted against the key's requests per minute."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from app.config.settings import Settings
from app.db.schema import files
from app.main import create_app
from engine.scripted import ScriptedEngine
from tests.client import AppClient
from tests.unit.app.routes.test_files import GOOD, client, files_app
from tests.unit.app.tenancy.helpers import bearer, new_key

DAY = 86_400


def form(**fields: str) -> dict[str, Any]:
    return {"files": {"file": ("a.jsonl", GOOD)}, "data": {"purpose": "batch", **fields}}


async def test_expires_after_is_taken_and_returned(database: AsyncEngine, tmp_path: Path) -> None:
    async with files_app(database, tmp_path, file_retention_days=2) as (http, tenancy):
        _, secret = await new_key(tenancy)
        sdk = client(http, secret)
        made = await sdk.files.create(
            file=("a.jsonl", io.BytesIO(GOOD)),
            purpose="batch",
            expires_after={"anchor": "created_at", "seconds": 3600},
        )
        assert made.expires_at == made.created_at + 3600
        assert (await sdk.files.retrieve(made.id)).expires_at == made.expires_at
        default = await sdk.files.create(file=("b.jsonl", io.BytesIO(GOOD)), purpose="batch")
        assert default.expires_at == default.created_at + 2 * DAY  # --file-retention-days
    async with files_app(database, tmp_path, file_retention_days=0) as (http, tenancy):
        _, secret = await new_key(tenancy)
        forever = await client(http, secret).files.create(
            file=("c.jsonl", io.BytesIO(GOOD)), purpose="batch"
        )
        assert forever.expires_at is None


async def test_bad_expires_after_is_a_400_naming_the_field(
    database: AsyncEngine, tmp_path: Path
) -> None:
    anchor, seconds = "expires_after[anchor]", "expires_after[seconds]"
    async with files_app(database, tmp_path) as (http, tenancy):
        _, secret = await new_key(tenancy)
        for fields, param in [
            ({anchor: "last_accessed_at", seconds: "3600"}, anchor),
            ({seconds: "3600"}, anchor),
            ({anchor: "created_at"}, seconds),
            ({anchor: "created_at", seconds: "3599"}, seconds),
            ({anchor: "created_at", seconds: "2592001"}, seconds),
            ({anchor: "created_at", seconds: "an hour"}, seconds),
        ]:
            response = await http.post("/v1/files", headers=bearer(secret), **form(**fields))
            assert response.status_code == 400, fields
            error = response.json()["error"]
            assert (error["type"], error["param"]) == ("invalid_request_error", param), fields
        ok = await http.post(
            "/v1/files",
            headers=bearer(secret),
            **form(**{anchor: "created_at", seconds: "2592000"}),
        )
        assert ok.status_code == 200
        assert [
            f["id"] for f in (await http.get("/v1/files", headers=bearer(secret))).json()["data"]
        ] == [ok.json()["id"]]


async def test_an_expired_file_is_gone_from_every_read(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with files_app(database, tmp_path) as (http, tenancy):
        _, secret = await new_key(tenancy)
        sdk = client(http, secret)
        made = await sdk.files.create(file=("a.jsonl", io.BytesIO(GOOD)), purpose="batch")
        other = await sdk.files.create(file=("b.jsonl", io.BytesIO(GOOD)), purpose="batch")
        async with database.begin() as conn:  # its expiry passes
            await conn.execute(
                update(files).where(files.c.id == made.id).values(expires_at=time.time() - 1)
            )
        for path in (f"/v1/files/{made.id}", f"/v1/files/{made.id}/content"):
            response = await http.get(path, headers=bearer(secret))
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "file_not_found"
        assert [f.id for f in (await sdk.files.list()).data] == [other.id]


async def test_a_key_at_its_quota_is_refused_and_another_is_not(
    database: AsyncEngine, tmp_path: Path
) -> None:
    quota = 2 * len(GOOD) + 10
    async with files_app(database, tmp_path, max_stored_bytes_per_key=quota) as (http, tenancy):
        (_, alice), (_, bob) = await new_key(tenancy), await new_key(tenancy)
        first = await http.post("/v1/files", headers=bearer(alice), **form())
        second = await http.post("/v1/files", headers=bearer(alice), **form())
        assert first.status_code == second.status_code == 200
        refused = await http.post("/v1/files", headers=bearer(alice), **form())
        assert refused.status_code == 413
        error = refused.json()["error"]
        assert (error["code"], error["type"], error["param"]) == (
            "storage_quota_exceeded", "invalid_request_error", "file",
        )  # fmt: skip
        assert f"holds {2 * len(GOOD)} bytes" in error["message"]
        assert f"quota of {quota} bytes" in error["message"]
        assert "DELETE /v1/files/{file_id}" in error["message"]
        assert (await http.post("/v1/files", headers=bearer(bob), **form())).status_code == 200
        # A delete frees its bytes at once.
        gone = await http.delete(f"/v1/files/{first.json()['id']}", headers=bearer(alice))
        assert gone.status_code == 200
        assert (await http.post("/v1/files", headers=bearer(alice), **form())).status_code == 200


async def test_uploads_and_reads_count_toward_the_keys_requests_per_minute(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with files_app(database, tmp_path) as (http, tenancy):
        _, secret = await new_key(tenancy, rpm=5)
        statuses = [
            (await http.post("/v1/files", headers=bearer(secret), **form())).status_code
            for _ in range(12)
        ]
        assert statuses[:5] == [200] * 5 and set(statuses[5:]) == {429}
        refused = await http.post("/v1/files", headers=bearer(secret), **form())
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert "retry-after" in refused.headers
        _, reader = await new_key(tenancy, rpm=2)
        assert (await http.get("/v1/files", headers=bearer(reader))).status_code == 200
        assert (await http.get("/v1/files/file-x", headers=bearer(reader))).status_code == 404
        assert (await http.get("/v1/files", headers=bearer(reader))).status_code == 429


async def test_a_keyless_server_has_one_quota_for_its_one_owner(tmp_path: Path) -> None:
    settings = Settings(
        auth="none", data_dir=str(tmp_path), max_stored_bytes_per_key=len(GOOD) + 10
    )
    app = create_app(settings, engine=ScriptedEngine())
    async with AppClient(app, timeout=10) as http:
        assert (await http.post("/v1/files", **form())).status_code == 200
        refused = await http.post("/v1/files", **form())
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "storage_quota_exceeded"


async def test_stored_responses_count_toward_the_quota(tmp_path: Path) -> None:
    settings = Settings(
        auth="none", data_dir=str(tmp_path), max_stored_bytes_per_key=len(GOOD) + 10
    )
    app = create_app(settings, engine=ScriptedEngine())
    async with AppClient(app, timeout=10) as http:
        made = await http.post(
            "/v1/responses", json={"model": "scripted", "input": "hi", "store": True}
        )
        assert made.status_code == 200
        refused = await http.post("/v1/files", **form())
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "storage_quota_exceeded"
