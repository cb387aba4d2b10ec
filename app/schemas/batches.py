"""Wire types of the Batch API (OpenAI's): creating, reading and listing batches, and
the lines of a batch's input, output and error files."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Raw, Struct

COMPLETION_WINDOWS = ("24h",)
WINDOW_SECONDS = {"24h": 24 * 3600.0}
MAX_METADATA_PAIRS = 16

BatchStatus = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]
FINAL_STATUSES = ("failed", "completed", "expired", "cancelled")

MetadataKey = Annotated[str, Meta(max_length=64)]
MetadataValue = Annotated[str, Meta(max_length=512)]


class BatchCreate(Struct, kw_only=True, forbid_unknown_fields=False):
    input_file_id: Annotated[str, Meta(min_length=1, max_length=128)]
    endpoint: Annotated[str, Meta(max_length=64)]
    completion_window: Annotated[str, Meta(max_length=16)]
    metadata: dict[MetadataKey, MetadataValue] | None = None


class BatchError(Struct, omit_defaults=True):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(Struct):
    data: list[BatchError]
    object: str = "list"


class RequestCounts(Struct):
    total: int
    completed: int
    failed: int


class Batch(Struct, kw_only=True):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, str] | None


class BatchList(Struct):
    data: list[Batch]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: str = "list"


class InputLine(Struct, forbid_unknown_fields=False):
    """One line of a batch's input file (its `body` decoded later, as the endpoint's)."""

    custom_id: str
    url: str
    body: Raw
    method: str = "POST"


class LineModel(Struct, forbid_unknown_fields=False):
    """Just the model a line's body names (for the cheap checks at creation)."""

    model: Any = None


class LineResponse(Struct):
    status_code: int
    request_id: str
    body: Raw


class LineError(Struct):
    code: str
    message: str


class OutputLine(Struct):
    """One line of an output or error file, as OpenAI writes them."""

    id: str
    custom_id: str
    response: LineResponse | None
    error: LineError | None


input_line_decoder = msgspec.json.Decoder(InputLine)
line_model_decoder = msgspec.json.Decoder(LineModel)
batch_create_decoder = msgspec.json.Decoder(BatchCreate)
