"""Batches of `/v1/responses` lines over HTTP (scripted engine, real keys database on both
backends): each line's `response.body` is the Response `/v1/responses` answers, never
stored; a bad line (an unknown item type, a stored response to continue) lands in the
error file with its custom_id and the endpoint's own error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from tests.unit.app.deferred.test_batches_http import file_lines, finished, upload
from tests.unit.app.tenancy.helpers import bearer, keyed_app, new_key

RESPONSES = "/v1/responses"


def responses_line(custom_id: str, **body: Any) -> dict[str, Any]:
    request = {"model": "scripted", "input": f"say {custom_id}", "max_output_tokens": 4}
    return {"custom_id": custom_id, "method": "POST", "url": RESPONSES, "body": {**request, **body}}


async def test_responses_lines_answer_as_the_endpoint(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        unknown_item = [{"type": "no_such_item", "text": "x"}]
        lines = [
            responses_line("r0"),
            responses_line("r1", instructions="Be brief."),
            responses_line("bad-item", input=unknown_item),
            responses_line("continues", previous_response_id="resp_123"),
        ]
        created = await http.post(
            "/v1/batches",
            json={
                "input_file_id": await upload(http, key_id, lines),
                "endpoint": RESPONSES,
                "completion_window": "24h",
            },
            headers=bearer(secret),
        )
        assert created.status_code == 200, created.text
        assert created.json()["status"] == "validating"
        done = await finished(http, secret, created.json())
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": 4, "completed": 2, "failed": 2}

        direct = await http.post(
            RESPONSES, json={**lines[0]["body"], "store": False}, headers=bearer(secret)
        )
        assert direct.status_code == 200, direct.text
        out = {
            line["custom_id"]: line
            for line in await file_lines(http, key_id, done["output_file_id"])
        }
        assert sorted(out) == ["r0", "r1"]
        body = out["r0"]["response"]["body"]
        assert out["r0"]["response"]["status_code"] == 200
        assert body["object"] == "response" and body["id"].startswith("resp_")
        assert body["id"] == out["r0"]["response"]["request_id"]
        for field in ("status", "output", "usage", "model", "store", "instructions"):
            if field == "output":
                assert [i["content"] for i in body["output"]] == [
                    i["content"] for i in direct.json()["output"]
                ]
            else:
                assert body[field] == direct.json()[field], field
        assert body["store"] is False
        assert out["r1"]["response"]["body"]["instructions"] == "Be brief."
        # Not stored: the line's response cannot be read back.
        stored = await http.get(f"{RESPONSES}/{body['id']}", headers=bearer(secret))
        assert stored.status_code == 404

        errors = {e["custom_id"]: e for e in await file_lines(http, key_id, done["error_file_id"])}
        assert sorted(errors) == ["bad-item", "continues"]
        bad_direct = await http.post(RESPONSES, json=lines[2]["body"], headers=bearer(secret))
        assert bad_direct.status_code == 400
        bad = errors["bad-item"]["response"]
        assert bad["status_code"] == 400 and bad["body"] == bad_direct.json()
        assert bad["body"]["error"]["param"] == "input[0].type"
        refused = errors["continues"]["response"]
        assert refused["status_code"] == 400
        assert refused["body"]["error"]["param"] == "previous_response_id"


async def test_a_responses_line_in_a_chat_batch_fails_validation(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool.jsonl") as (http, tenancy):
        key_id, secret = await new_key(tenancy)
        created = await http.post(
            "/v1/batches",
            json={
                "input_file_id": await upload(http, key_id, [responses_line("r0")]),
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            },
            headers=bearer(secret),
        )
        done = await finished(http, secret, created.json())
        assert done["status"] == "failed"
        assert [(e["code"], e["line"]) for e in done["errors"]["data"]] == [("mismatched_url", 1)]
        assert done["errors"]["object"] == "list"
