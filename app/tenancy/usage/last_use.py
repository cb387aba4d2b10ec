"""Each key's `last_used_at`, from the usage records the database took: written at
most every `TOUCH_EVERY_S` per key (a transaction of its own per batch would double
the commits, for a field `keys list` shows to the minute), for all the keys of a batch
in one statement, after the batch's requests have their answer."""

from __future__ import annotations

import logging

from app.tenancy.keys.store import KeyStore
from app.tenancy.usage.faults import reason
from app.tenancy.usage.records import UsageRecord

log = logging.getLogger("lilac.usage")

TOUCH_EVERY_S = 30.0


class LastUse:
    def __init__(self, keys: KeyStore | None) -> None:
        self._keys = keys
        self._touched: dict[str, float] = {}  # key id -> created_at last written

    async def record(self, records: list[UsageRecord]) -> None:
        if self._keys is None or not records:
            return
        # Each key's last record in the batch: one look per key, not per record.
        latest = {record.key_id: record.created_at for record in records}
        last_used: dict[str, float] = {}
        for key_id, at in latest.items():
            if key_id is not None and at - self._touched.get(key_id, 0.0) >= TOUCH_EVERY_S:
                last_used[key_id] = self._touched[key_id] = at
        if not last_used:
            return
        try:
            await self._keys.touch(last_used)
        except Exception as exc:  # the records are committed; `last_used_at` can wait
            log.warning("usage: could not update keys' last use (%s)", reason(exc))
