"""Running one batch line through the endpoint's own service.

A line's `body` is decoded into the endpoint's request type exactly as the endpoint
decodes a request body, checked and run by the same service (`ChatService`,
`CompletionService`, `ResponsesService`), so its `response.body` is what the endpoint
would have answered, and an invalid body gets the endpoint's error (status and error
body). The line runs as its batch's key (its model access, priority and prefix-cache
scope) in admission's deferred lane, and is metered as batch work under that key.

A `/v1/responses` line is converted to its chat run as the route converts a request
(`responses_line`), with two differences: it is never stored (`store` is false, and the
Response says so), and it cannot continue a stored response (`previous_response_id` is
refused), since a batch's lines run in no set order."""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from app.deferred.store import Job, Line
from app.deferred.work import Answer, Cut, RunBill, run_again
from app.errors import InvalidRequest
from app.errors.handlers import encode_error, to_api_error
from app.schemas.batches import (
    InputLine,
    LineError,
    LineResponse,
    OutputLine,
    input_line_decoder,
    line_model_decoder,
)
from app.schemas.chat import ChatCompletionRequest, chat_request_decoder
from app.schemas.completions import CompletionRequest, completion_request_decoder
from app.schemas.responses import responses_request_decoder
from app.services.generation.deferred import (
    LineMeter,
    as_key,
    key_weight,
    usage_record,
    within_limits,
)
from app.services.generation.service import GenerationService
from app.services.responses.request import ResponsesChatRequest, chat_request
from app.services.responses.sealing import ReasoningSeal
from app.tenancy.consumes import Consumes
from app.tenancy.deferred_limits import DeferredLimits
from app.tenancy.keys.store import KeyRecord
from app.tenancy.usage.records import UsageRecord
from app.transport.request_body import INLINE_BYTES, decode_checked
from engine.admission.runtime import DEFERRED_PREFIX
from engine.offload import off_loop

_encoder = msgspec.json.Encoder()
DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    "/v1/chat/completions": chat_request_decoder,
    "/v1/completions": completion_request_decoder,
}
RESPONSES = "/v1/responses"
# The service of a batch endpoint; which request type it takes follows from the endpoint
# a line names (`_request` decodes the one its service runs).
LineService: TypeAlias = (
    GenerationService[ChatCompletionRequest] | GenerationService[CompletionRequest]
)


def responses_line(body: bytes, owner: str, seal: ReasoningSeal | None) -> ResponsesChatRequest:
    """The chat run of a `/v1/responses` line's body, as the route builds it, unstored."""
    request = decode_checked(body, responses_request_decoder)
    if request.stream:
        raise InvalidRequest("Batch requests cannot be streamed.", param="stream")
    if request.previous_response_id is not None:
        raise InvalidRequest(
            "A batch request cannot continue a stored response.", param="previous_response_id"
        )
    request.store = False  # batch lines are not stored responses
    seal = seal or ReasoningSeal()
    chat = chat_request(request, owner, lambda blob, param: seal.open(owner, blob, param), [])
    chat.response_store = None
    return chat


def line_model(body: str) -> str | None:
    """The model a batch line's body names (None: none, or a line that does not parse)."""
    try:
        model = line_model_decoder.decode(input_line_decoder.decode(body).body).model
    except msgspec.DecodeError:
        return None
    return model if isinstance(model, str) else None


def line_id(job_id: str, seq: int) -> str:
    """The id of a line's answer (and of its usage row): the same on every replay."""
    return f"batch_req_{job_id.removeprefix('batch_')}_{seq}"


def output_line(
    job_id: str, seq: int, custom_id: str, status: int, request_id: str, body: bytes
) -> str:
    line = OutputLine(
        id=line_id(job_id, seq),
        custom_id=custom_id,
        response=LineResponse(status, request_id, msgspec.Raw(body)),
        error=None,
    )
    return _encoder.encode(line).decode()


def closed_line(job_id: str, seq: int, body: str, code: str, message: str) -> str:
    """The error-file line of a request that never ran (the batch expired, or was
    cancelled)."""
    try:
        custom_id = input_line_decoder.decode(body).custom_id
    except msgspec.DecodeError:
        custom_id = ""
    line = OutputLine(line_id(job_id, seq), custom_id, None, LineError(code, message))
    return _encoder.encode(line).decode()


async def _entry(body: str) -> InputLine:
    """A stored line's envelope (its `body` left raw); a large one decoded off the loop."""
    if len(body) <= INLINE_BYTES:
        return input_line_decoder.decode(body)
    return await off_loop(input_line_decoder.decode, body)


class LineRunner:
    def __init__(
        self, services: dict[str, LineService], limits: DeferredLimits | None = None
    ) -> None:
        self.services = services  # endpoint -> its service
        self.limits = limits or DeferredLimits()  # the keys' deferred work, counted

    async def run(
        self, job: Job, line: Line, key: KeyRecord | None, bill: RunBill | None = None
    ) -> Answer:
        entry = await _entry(line.body)  # checked when the batch was made
        endpoint = job.payload["endpoint"]
        meter = LineMeter(weight=key_weight(key))
        n = 1
        if bill is not None:  # a run cut or failed is billed what it did (n as decoded)
            bill.usage = lambda outcome: self._record(job, line, endpoint, meter, n, outcome)
        try:
            request = await self._request(entry, endpoint, key, job.owner)
            n, meter.model = request.n, request.model
            service = self.services[endpoint]
            tokens = service.reserved_tokens(request, len(entry.body))
            consumes = Consumes(endpoint, request.model, tokens, service.slots(request), n)
            with within_limits(self.limits, key, consumes, meter):
                body = await service.complete(request, DEFERRED_PREFIX + job.owner, meter)
        except Cut:
            raise
        except Exception as exc:
            error = to_api_error(exc)
            again = run_again(error, line)  # capacity, a drain, a failure with tries left
            if again is not None:
                raise again from exc
            generation = meter.usage_source
            request_id = generation.id if generation is not None else line_id(job.id, line.seq)
            result = output_line(
                job.id,
                line.seq,
                entry.custom_id,
                error.status_code,
                request_id,
                encode_error(error.body()),
            )
            record = self._record(job, line, endpoint, meter, n, "error")
            return Answer(result, False, record if generation is not None else None)
        response_id = meter.usage_source.id if meter.usage_source is not None else ""
        result = output_line(
            job.id, line.seq, entry.custom_id, 200, response_id, _encoder.encode(body)
        )
        record = self._record(job, line, endpoint, meter, n, "completed")
        return Answer(result, True, record)

    async def _request(
        self, entry: InputLine, endpoint: str, key: KeyRecord | None, owner: str
    ) -> Any:
        if endpoint == RESPONSES:
            seal = getattr(self.services[endpoint], "seal", None)
            body = bytes(entry.body)
            if len(body) <= INLINE_BYTES:  # as the route: a large body converts off the loop
                request = responses_line(body, owner, seal)
            else:
                request = await off_loop(responses_line, body, owner, seal)
        elif len(entry.body) <= INLINE_BYTES:
            request = decode_checked(bytes(entry.body), DECODERS[endpoint])
        else:  # as the route: a large body is decoded off the loop
            request = await off_loop(decode_checked, bytes(entry.body), DECODERS[endpoint])
        if request.stream:
            raise InvalidRequest("Batch requests cannot be streamed.", param="stream")
        return as_key(request, key)

    def _record(
        self, job: Job, line: Line, endpoint: str, meter: LineMeter, n: int, outcome: str
    ) -> UsageRecord | None:
        return usage_record(
            meter,
            key_id=job.key_id,
            request_id=line_id(job.id, line.seq),
            model=meter.model,
            endpoint=endpoint,
            outcome=outcome,
            n=n,
            batch_id=job.id,
        )
