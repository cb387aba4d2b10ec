"""OpenAI's Responses API: creating a response, and the stored responses of a key."""

from __future__ import annotations

from app.openapi.common import Route
from app.schemas.responses import ResponsesRequest
from app.schemas.responses_output import Response as ResponseObject
from app.schemas.responses_output import StreamEvent as ResponsesStreamEvent
from app.schemas.stored_responses import InputItemList, ResponseDeleted

RESPONSES_STREAM = (
    "Server-sent events as OpenAI sends them: `event: <type>` and `data: <{name}>`, "
    "each with `sequence_number` (response.created, response.in_progress, "
    "response.output_item.added / .done, response.content_part.added / .done, "
    "response.output_text.delta / .done, response.reasoning_text.delta / .done, "
    "response.function_call_arguments.delta / .done, then response.completed or "
    "response.incomplete); an `error` event and `response.failed` if the engine fails "
    "mid-stream. No `[DONE]`."
)
RESPONSE_ID = ("response_id", "path", {"type": "string"})
INCLUDE = ("include", "query", {"type": "array", "items": {"type": "string"}})

CREATE = (
    Route(
        "post",
        "/v1/responses",
        "OpenAI Responses API: a response, whole or streamed (SSE), stored unless "
        "`store: false`; hosted tools are not served (`X-Tools-Not-Served`); "
        "`background: true` answers at once, `queued`, and runs on spare capacity",
        ResponsesRequest,
        ResponseObject,
        streams=ResponsesStreamEvent,
        stream_text=RESPONSES_STREAM,
    ),
)

STORED = (
    Route(
        "get",
        "/v1/responses/{response_id}",
        "A stored response of this key; for a background response, `stream=true` "
        "replays its events after `starting_after` (a sequence number), then follows "
        "them live until it is final (another response: a 400)",
        ok=ResponseObject,
        streams=ResponsesStreamEvent,
        stream_text=RESPONSES_STREAM,
        errors=("400", "404", "503"),
        params=(
            RESPONSE_ID,
            ("stream", "query", {"type": "boolean"}),
            ("starting_after", "query", {"type": "integer", "minimum": 0}),
            INCLUDE,
        ),
    ),
    Route(
        "post",
        "/v1/responses/{response_id}/cancel",
        "Cancel a background response of this key (queued or running): the response, "
        "`cancelled`; a response not made with `background: true`, or one finished, is a 400",
        ok=ResponseObject,
        errors=("400", "404", "503"),
        params=(RESPONSE_ID,),
    ),
    Route(
        "delete",
        "/v1/responses/{response_id}",
        "Delete a stored response of this key",
        ok=ResponseDeleted,
        errors=("404", "503"),
        params=(RESPONSE_ID,),
    ),
    Route(
        "get",
        "/v1/responses/{response_id}/input_items",
        "The input items of a stored response, a page at a time",
        ok=InputItemList,
        errors=("400", "404", "503"),
        params=(
            RESPONSE_ID,
            ("after", "query", {"type": "string"}),
            ("before", "query", {"type": "string"}),
            ("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
            ("order", "query", {"type": "string", "enum": ["asc", "desc"], "default": "desc"}),
            INCLUDE,
        ),
    ),
)
