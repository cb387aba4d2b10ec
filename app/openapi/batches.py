"""OpenAI's Batch API: batches of a key, run from an uploaded JSONL file."""

from __future__ import annotations

from app.openapi.common import Route
from app.schemas.batches import Batch, BatchCreate, BatchList

BATCH_ID = ("batch_id", "path", {"type": "string"})

ROUTES = (
    Route(
        "post",
        "/v1/batches",
        "Create a batch from an uploaded JSONL file (purpose `batch`)",
        BatchCreate,
        Batch,
        errors=("400", "404"),
    ),
    Route(
        "get",
        "/v1/batches",
        "The key's batches, newest first",
        ok=BatchList,
        errors=("400",),
        params=(("after", "query", {"type": "string"}), ("limit", "query", {"type": "integer"})),
    ),
    Route(
        "get",
        "/v1/batches/{batch_id}",
        "One batch",
        ok=Batch,
        errors=("404",),
        params=(BATCH_ID,),
    ),
    Route(
        "post",
        "/v1/batches/{batch_id}/cancel",
        "Cancel a batch: lines not started are not run",
        ok=Batch,
        errors=("404", "409"),
        params=(BATCH_ID,),
    ),
)
