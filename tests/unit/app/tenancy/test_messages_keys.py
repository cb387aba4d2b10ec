"""The Messages API and model retrieval with `--auth keys`: the key by `x-api-key`,
usage metered under its own endpoint, limits and model lists answered in Anthropic's
shape."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from tests.anthropic_sse import read_events
from tests.unit.app.tenancy.helpers import keyed_app, new_key, refusal_counts, usage_rows

URL = "/v1/messages"


def message(**extra: object) -> dict[str, object]:
    body = {"model": "scripted", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    return {**body, **extra}


async def test_messages_are_metered_and_limited(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        key_id, secret = await new_key(tenancy, rpm=2)
        headers = {"x-api-key": secret, "anthropic-version": "2023-06-01"}
        whole = await http.post(URL, json=message(), headers=headers)
        assert whole.status_code == 200
        assert whole.headers["x-ratelimit-remaining-requests"] == "1"
        streamed = await http.post(URL, json=message(stream=True), headers=headers)
        usage = read_events(streamed)[-2]["usage"]
        refused = await http.post(URL, json=message(), headers=headers)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["type"] == "error"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        await tenancy.writer.close()  # type: ignore[union-attr]  # rejections are not awaited
        rows = await usage_rows(database)
        refusals = await refusal_counts(database)
    # The refused request is a count, not a row.
    assert [(r.endpoint, r.outcome) for r in rows] == [(URL, "completed"), (URL, "completed")]
    assert refusals == {(key_id, "rate_limit_exceeded"): 1}
    assert rows[0].key_id == key_id and rows[0].request_id == whole.json()["id"]
    assert rows[0].completion_tokens == whole.json()["usage"]["output_tokens"] > 0
    assert rows[1].prompt_tokens == usage["input_tokens"] + usage["cache_read_input_tokens"]


async def test_a_model_the_key_may_not_use(database: AsyncEngine, tmp_path: Path) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, limited = await new_key(tenancy, models=["other"])
        headers = {"x-api-key": limited}
        for response in (
            await http.post(URL, json=message(), headers=headers),
            await http.post(URL + "/count_tokens", json=message(), headers=headers),
        ):
            assert response.status_code == 404
            assert response.json()["error"]["type"] == "not_found_error"
        hidden = await http.get("/v1/models/scripted", headers=headers)
        assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "model_not_found"
        _, allowed = await new_key(tenancy)
        card = await http.get("/v1/models/scripted", headers={"Authorization": f"Bearer {allowed}"})
        assert card.status_code == 200 and card.json()["id"] == "scripted"
        revoked = await http.post(URL, json=message(), headers={"x-api-key": "sk-wrong"})
        assert revoked.status_code == 401
        assert revoked.json()["error"]["type"] == "authentication_error"


async def test_count_tokens_takes_a_request_of_the_rate(
    database: AsyncEngine, tmp_path: Path
) -> None:
    """Each count is one of the key's requests per minute, refused past it as generation
    is (429, `Retry-After`, the x-ratelimit-* headers), and writes no usage row."""
    async with keyed_app(database, tmp_path / "spool") as (http, tenancy):
        _, secret = await new_key(tenancy, rpm=5)
        headers = {"x-api-key": secret, "anthropic-version": "2023-06-01"}
        counted = [
            await http.post(URL + "/count_tokens", json=message(), headers=headers)
            for _ in range(5)
        ]
        assert [r.status_code for r in counted] == [200] * 5
        assert [r.headers["x-ratelimit-remaining-requests"] for r in counted] == [
            "4",
            "3",
            "2",
            "1",
            "0",
        ]
        refused = await http.post(URL + "/count_tokens", json=message(), headers=headers)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert refused.headers["x-ratelimit-limit-requests"] == "5"
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        assert "x-ratelimit-reset-requests" in refused.headers
        # The counts and generation share the key's one rate.
        generation = await http.post(URL, json=message(), headers=headers)
        assert generation.status_code == 429
        await tenancy.writer.close()  # type: ignore[union-attr]
        assert await usage_rows(database) == []
