"""/admin/keys and a key's weight: set when the key is made, changed by PATCH, shown in
every key response; a weight a key may not have is a 400 naming `weight`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.unit.app.tenancy.helpers import ADMIN_KEY, bearer, keyed_app

ADMIN = bearer(ADMIN_KEY)
BAD_WEIGHTS: list[Any] = [0, -1, "x", 1e9, None, 1000.5]


def assert_bad_weight(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "weight"


async def test_a_keys_weight_is_made_changed_and_shown(
    database: AsyncEngine, tmp_path: Path
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, _):
        made = await http.post("/admin/keys", json={"name": "heavy", "weight": 2.5}, headers=ADMIN)
        assert made.status_code == 201 and made.json()["weight"] == 2.5
        plain = await http.post("/admin/keys", json={"name": "plain"}, headers=ADMIN)
        assert plain.json()["weight"] == 1.0
        key_id = made.json()["id"]
        changed = await http.patch(f"/admin/keys/{key_id}", json={"weight": 1000}, headers=ADMIN)
        assert changed.status_code == 200 and changed.json()["weight"] == 1000.0
        other = await http.patch(f"/admin/keys/{key_id}", json={"rpm": 9}, headers=ADMIN)
        assert other.json()["weight"] == 1000.0 and other.json()["rpm"] == 9
        listed = (await http.get("/admin/keys", headers=ADMIN)).json()["data"]
        assert {k["name"]: k["weight"] for k in listed} == {"heavy": 1000.0, "plain": 1.0}
        revoked = await http.delete(f"/admin/keys/{key_id}", headers=ADMIN)
        assert revoked.json()["weight"] == 1000.0


@pytest.mark.parametrize("weight", BAD_WEIGHTS)
async def test_a_weight_a_key_may_not_have_is_a_400_naming_it(
    database: AsyncEngine, tmp_path: Path, weight: Any
) -> None:
    async with keyed_app(database, tmp_path / "spool") as (http, _):
        body = {"name": "bad", "weight": weight}
        assert_bad_weight(await http.post("/admin/keys", json=body, headers=ADMIN))
        made = await http.post("/admin/keys", json={"name": "good"}, headers=ADMIN)
        key_id = made.json()["id"]
        changed = await http.patch(f"/admin/keys/{key_id}", json={"weight": weight}, headers=ADMIN)
        assert_bad_weight(changed)
        listed = (await http.get("/admin/keys", headers=ADMIN)).json()["data"]
        assert [(k["name"], k["weight"]) for k in listed] == [("good", 1.0)]
