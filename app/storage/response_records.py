"""A stored response's record and limits, and what goes with a response when it is
deleted (its events, its deferred job and line): shared by the store's reads, deletes
and purge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.config.settings import Settings
from app.db.deferred import deferred_jobs, deferred_lines
from app.errors import ChainTooLong
from app.storage.response_events import response_events

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class StoredResponse:
    id: str
    owner: str
    model: str
    created_at: float
    previous_response_id: str | None
    status: str
    response: bytes  # the Response object's JSON, exactly as GET /v1/responses/{id} returns it
    input_items: bytes  # JSON array of this request's input items, each with an "id"
    output_items: bytes  # JSON array of the response's output items


@dataclass(frozen=True, slots=True)
class ResponseLimits:
    retention_s: float = 30 * DAY_S
    max_stored_bytes: int = 16 * 1024 * 1024
    max_chain: int = 100  # responses in one chain, a continuation's new one included
    max_chain_bytes: int = 32 * 1024 * 1024  # input and output items of one chain

    @classmethod
    def from_settings(cls, settings: Settings) -> ResponseLimits:
        checks = {
            "--response-retention-days": settings.response_retention_days,
            "--max-stored-response-bytes": settings.max_stored_response_bytes,
            "--max-response-chain": settings.max_response_chain,
            "--max-response-chain-bytes": settings.max_response_chain_bytes,
        }
        for flag, value in checks.items():
            if not value > 0:
                raise SystemExit(f"{flag} must be positive, not {value}")
        return cls(
            retention_s=settings.response_retention_days * DAY_S,
            max_stored_bytes=settings.max_stored_response_bytes,
            max_chain=settings.max_response_chain,
            max_chain_bytes=settings.max_response_chain_bytes,
        )

    def check_chain(self, response_id: str, responses: int) -> None:
        if responses > self.max_chain:
            raise ChainTooLong(
                f"Continuing response '{response_id}' would make a chain of {responses} "
                f"responses; this server keeps chains of at most {self.max_chain}."
            )

    def check_chain_bytes(self, response_id: str, size: int) -> None:
        if size > self.max_chain_bytes:
            raise ChainTooLong(
                f"The chain of response '{response_id}' holds {size} bytes of items; this "
                f"server continues chains of at most {self.max_chain_bytes} bytes."
            )


async def delete_kept_with(conn: AsyncConnection, response_ids: list[str]) -> None:
    """What is kept with a background response and goes with it: its events, and its
    deferred job and line (the request as sent)."""
    events = response_events.c
    await conn.execute(delete(response_events).where(events.response_id.in_(response_ids)))
    await conn.execute(delete(deferred_lines).where(deferred_lines.c.job_id.in_(response_ids)))
    await conn.execute(delete(deferred_jobs).where(deferred_jobs.c.id.in_(response_ids)))


def stored_response(row: Row[Any]) -> StoredResponse:
    return StoredResponse(
        id=row.id,
        owner=row.owner,
        model=row.model,
        created_at=row.created_at,
        previous_response_id=row.previous_response_id,
        status=row.status,
        response=bytes(row.response),
        input_items=bytes(row.input_items),
        output_items=bytes(row.output_items),
    )
