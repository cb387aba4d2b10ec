"""The `response` kind of deferred work: background responses (`background: true`).

A background response is a job of one line (the request as sent) whose id is the
response's. It is stored `queued` when made; the runner starts its line on spare
capacity, before any batch line (`precedence`), in admission's deferred lane, so below
every interactive request. Its run streams the response (`ResponsesService`), records
its events (app.services.background.events), and stores the final Response; the line's
answer and its usage row then commit in one transaction, so it is billed once.

- Cut (the owner took the GPU back, a drain, a restart, an interactive request needing
  the slot): what the run had the engine do is billed (outcome `cut`, under the run's
  own id), its events are discarded, the response is `queued` again and its line
  pending; it runs again from its stored input when there is room.
- Its key revoked (or deleted): cancelled as below, at the runner's next look at the
  jobs on any replica.
- Cancelled (`POST /v1/responses/{id}/cancel`): a run on this replica stops at its next
  event, one on another replica at its next batch of events; the engine request is
  aborted, and what the engine ran until then (prompt and tokens generated) is billed,
  once, with the `cancelled` response. A response cancelled before it ran bills nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import ExitStack, aclosing

import msgspec

from app.deferred.store import CANCELLED, DeferredStore, Job, Line, LineCounts
from app.deferred.work import (
    INTERRUPTED,
    INTERRUPTED_MESSAGE,
    Answer,
    Cut,
    RunBill,
    interrupted,
    run_again,
)
from app.errors import APIError, InvalidKey, ResponseNotFound, StoredTooLarge
from app.errors.handlers import to_api_error
from app.schemas.responses_output import (
    ErrorEvent,
    Response,
    ResponseErrorBody,
    ResponseFailed,
)
from app.services.background.events import EventHub, EventRecorder, OverBound, frame_response
from app.services.generation.deferred import LineMeter, key_weight, usage_record, within_limits
from app.services.generation.streaming import SSEBody
from app.services.responses.deferred import ENDPOINT, line_request
from app.services.responses.service import ResponsesService
from app.services.responses.wire import ResponsesGeneration, event_frame
from app.storage.response_events import EventStore
from app.storage.responses import ResponseStore
from app.tenancy.consumes import Consumes
from app.tenancy.deferred_limits import DeferredLimits
from app.tenancy.keys.store import KeyNotFound, KeyRecord, KeyStore
from app.tenancy.usage.records import UsageRecord
from engine.admission.runtime import DEFERRED_PREFIX

log = logging.getLogger("lilac.responses")

KIND = "response"
# Job states: `queued` until its line first runs, `in_progress` (its line runs, or waits
# again after a cut), `cancelling` (asked to stop), `done` (the line answered or closed).
RUNNABLE = ("queued", "in_progress")
_encoder = msgspec.json.Encoder()
_response = msgspec.json.Decoder(Response)
_CANCELLED = '{"status": "cancelled"}'
KEY_READ_EVERY_S = 0.5  # under a tick of the jobs (1 s): each tick reads each key once
MAX_KEYS_REMEMBERED = 10_000


class BackgroundResponses:
    """The runner's handler of `response` jobs."""

    kind = KIND
    precedence = 1  # before batch lines (0)
    active_states: tuple[str, ...] = (*RUNNABLE, "cancelling")
    runnable_states: tuple[str, ...] = RUNNABLE

    def __init__(
        self,
        store: DeferredStore,
        responses: ResponsesService,
        response_store: ResponseStore,
        events: EventStore,
        hub: EventHub,
        keys: KeyStore | None,
        replica: str = "",
        limits: DeferredLimits | None = None,
    ) -> None:
        self.replica = replica
        self.limits = limits or DeferredLimits()  # the keys' deferred work, counted
        self.store = store
        self.responses = responses
        self.response_store = response_store
        self.events = events
        self.hub = hub
        self.keys = keys
        self.cancels: dict[str, asyncio.Event] = {}  # responses running here -> stop
        self._revocations: dict[str, tuple[float, bool]] = {}  # key id -> (read at, revoked)

    def cancel_here(self, response_id: str) -> bool:
        """Stop the run of `response_id` if this replica runs it."""
        flag = self.cancels.get(response_id)
        if flag is not None:
            flag.set()
        return flag is not None

    # ------------------------------------------------------------ the runner's calls

    def line_model(self, job: Job, line: Line) -> str | None:
        model = job.payload.get("model")
        return model if isinstance(model, str) else None

    async def run(self, job: Job, line: Line, bill: RunBill | None = None) -> Answer:
        current = await self.store.get(job.id)
        if current is None or current.state not in RUNNABLE:  # cancelled before it ran
            await self.set_cancelled(job)
            return Answer(_CANCELLED, False, None)
        flag = self.cancels.setdefault(job.id, asyncio.Event())
        recorder = EventRecorder(
            self.events, self.hub, job.id, self.response_store.limits.max_stored_bytes
        )
        try:
            if interrupted(line):
                return await self._interrupted(job, recorder)
            with ExitStack() as held:  # the key's deferred limits, while it runs
                return await self._run(job, line, recorder, flag, bill or RunBill(), held)
        except (Cut, asyncio.CancelledError):
            await asyncio.shield(self._requeue(job, recorder))
            raise
        finally:
            self.cancels.pop(job.id, None)

    async def tend(self, job: Job, counts: LineCounts) -> None:
        if job.state in RUNNABLE and await self._revoked(job):
            # A revoked (or deleted) key's response ends now: cancelled, its run here
            # stopped at its next event (on another replica at its next batch of
            # events), what ran billed.
            await self.store.move(job.id, RUNNABLE, "cancelling")
            job.state = "cancelling"
            self.cancel_here(job.id)
            log.info("background response %s: its key was revoked; cancelled", job.id)
        if job.state == "cancelling" and counts.unfinished:
            closed = await self.store.close_pending(job.id, CANCELLED)
            # Running on a replica that died before it saw the cancel: its lease ran out,
            # so the line is this replica's to answer, cancelled (what it ran is lost
            # with that replica, and not billed).
            for line in [] if closed else await self.store.claim(job.id, self.replica, 1, 60.0):
                await self.store.answer(job.id, line.seq, self.replica, _CANCELLED, False, None)
                closed += 1
            if closed:
                await self.set_cancelled(job)
                counts = (await self.store.counts([job.id]))[job.id]
        if counts.unfinished == 0:
            await self.store.move(job.id, self.active_states, "done")

    # ------------------------------------------------------------ one run

    async def _run(
        self,
        job: Job,
        line: Line,
        recorder: EventRecorder,
        flag: asyncio.Event,
        bill: RunBill,
        held: ExitStack,
    ) -> Answer:
        meter = LineMeter()
        # A run cut (or failed, to run again) is billed what the engine did for it.
        bill.usage = lambda outcome: _record(job, meter, outcome)
        try:
            key = await self._key(job)
            meter.weight = key_weight(key)
            chat = await line_request(
                line.body.encode(), job.owner, key, self.responses.seal, self.response_store
            )
            meter.model = chat.model
            chat.response_id, chat.created_at = job.id, job.created_at
            tokens = self.responses.reserved_tokens(chat, len(line.body))
            consumes = Consumes("/v1/responses", chat.model, tokens, slots=1)
            held.enter_context(within_limits(self.limits, key, consumes, meter))
            await recorder.discard()  # a run a crash cut left its events
            await self.store.move(job.id, ("queued",), "in_progress")
            await self._set_status(job, "in_progress")
            stream = await self.responses.open_stream(chat, DEFERRED_PREFIX + job.owner, meter)
            assert isinstance(stream, SSEBody)
            body = stream
        except ResponseNotFound:  # deleted (or expired) meanwhile: nothing left to run
            return Answer('{"status": "deleted"}', False, None)
        except Exception as exc:
            error = self._failure(exc, line)
            return await self._failed(job, recorder, meter, error)
        cancelled = over = False
        try:
            async with aclosing(body):
                async for chunk in body:
                    recorder.add(chunk)
                    if flag.is_set():
                        cancelled = True
                        break
                    if recorder.due():
                        await recorder.flush()
                        cancelled = await self._cancelling(job)
                        if cancelled:
                            break
        except OverBound:
            over = True
        if meter.failure is not None:
            self._failure(meter.failure, line)  # capacity or a drain: Cut, run again
        if over:
            error = StoredTooLarge(recorder.size, recorder.max_bytes)
            return await self._failed(job, recorder, meter, error)
        if cancelled:
            return await self._cancelled(job, recorder, meter)
        await recorder.flush()
        final = frame_response(recorder.last or b"")
        if final is None:  # pragma: no cover - every stream ends in a lifecycle event
            raise Cut("the stream ended without its last event")
        response = _response.decode(final)
        await self._finish(job, response)
        outcome = "completed" if response.status in ("completed", "incomplete") else "error"
        return _answer(job, meter, response, outcome)

    async def _interrupted(self, job: Job, recorder: EventRecorder) -> Answer:
        """A response cut too often to run again: failed, with nothing run."""
        error = APIError(INTERRUPTED_MESSAGE, code=INTERRUPTED)
        try:
            return await self._failed(job, recorder, LineMeter(), error)
        except ResponseNotFound:  # deleted meanwhile
            return Answer('{"status": "deleted"}', False, None)

    def _failure(self, exc: BaseException, line: Line) -> APIError:
        """The error a run ended in; raises `Cut` for what is no fault of the request
        (no capacity, a drain, a restart), and for an engine failure before its last try."""
        if isinstance(exc, Cut):
            raise exc
        error = to_api_error(exc) if isinstance(exc, Exception) else to_api_error(Cut())
        again = run_again(error, line)
        if again is not None:
            raise again from exc
        return error

    async def _failed(
        self, job: Job, recorder: EventRecorder, meter: LineMeter, error: APIError
    ) -> Answer:
        generation = meter.usage_source
        response = await self._stored_response(job)
        if isinstance(generation, ResponsesGeneration):
            response = generation.response("failed", [], generation.usage())
        response.status = "failed"
        response.error = ResponseErrorBody(error.code or error.error_type, error.message)
        if recorder.count:  # a stream began: it ends as a failed stream ends
            seq = recorder.next_seq()
            recorder.add_final(event_frame(ErrorEvent(error.code, error.message, error.param, seq)))
            recorder.add_final(event_frame(ResponseFailed(response, seq + 1)))
            await recorder.flush()
        await self._finish(job, response)
        return _answer(job, meter, response, "error")

    async def _cancelled(self, job: Job, recorder: EventRecorder, meter: LineMeter) -> Answer:
        await recorder.flush()
        generation = meter.usage_source
        assert isinstance(generation, ResponsesGeneration)
        response = generation.finish()  # what was written until the abort
        response.status = "cancelled"
        response.completed_at = None
        response.incomplete_details = None
        await self._finish(job, response)
        return _answer(job, meter, response, "cancelled")

    async def _finish(self, job: Job, response: Response) -> None:
        """Store the final response (one too large to store is stored failed)."""
        try:
            await self.response_store.update(
                job.owner,
                job.id,
                response.status,
                _encoder.encode(response),
                _encoder.encode(response.output),
            )
        except StoredTooLarge as exc:
            response.output = []
            response.status = "failed"
            response.error = ResponseErrorBody(exc.code or "", exc.message)
            await self.response_store.update(
                job.owner, job.id, "failed", _encoder.encode(response), b"[]"
            )
        except ResponseNotFound:
            pass  # deleted meanwhile: its line goes with it

    async def _requeue(self, job: Job, recorder: EventRecorder) -> None:
        """A cut run leaves nothing: its events go, the response is queued again."""
        try:
            await recorder.discard()
            await self._set_status(job, "queued")
        except Exception:  # the database failed: the next run discards them instead
            log.exception("background response %s: its cut run could not be undone", job.id)

    # ------------------------------------------------------------ state

    async def _cancelling(self, job: Job) -> bool:
        current = await self.store.get(job.id)
        return current is None or current.state not in RUNNABLE

    async def _stored_response(self, job: Job) -> Response:
        stored = await self.response_store.get(job.owner, job.id)
        return _response.decode(stored.response)

    async def _set_status(self, job: Job, status: str) -> None:
        try:
            response = await self._stored_response(job)
        except ResponseNotFound:
            return
        if response.status in ("completed", "incomplete", "failed", "cancelled"):
            return
        response.status = status  # type: ignore[assignment]  # one of Status
        await self.response_store.update(
            job.owner, job.id, status, _encoder.encode(response), b"[]"
        )

    async def set_cancelled(self, job: Job) -> None:
        """A response cancelled before it ran: `cancelled`, no output, nothing billed."""
        await self._set_status(job, "cancelled")

    async def _revoked(self, job: Job) -> bool:
        """Whether the response's key has been revoked or deleted, as the database has
        it (read at most once per tick of the jobs per key)."""
        if job.key_id is None or self.keys is None:
            return False
        now = time.monotonic()
        known = self._revocations.get(job.key_id)
        if known is not None and now - known[0] < KEY_READ_EVERY_S:
            return known[1]
        try:
            await self._key(job)
            revoked = False
        except InvalidKey:
            revoked = True
        if len(self._revocations) > MAX_KEYS_REMEMBERED:
            self._revocations.clear()
        self._revocations[job.key_id] = (now, revoked)
        return revoked

    async def _key(self, job: Job) -> KeyRecord | None:
        """The response's key as the database has it now (its models, priority, group);
        a key revoked or deleted since runs nothing."""
        if job.key_id is None or self.keys is None:
            return None
        try:
            key = await self.keys.get(job.key_id)
        except KeyNotFound:
            key = None
        if key is None or key.revoked:
            raise InvalidKey()
        return key


def _status(response: Response) -> str:
    return _encoder.encode({"status": response.status}).decode()


def _answer(job: Job, meter: LineMeter, response: Response, outcome: str) -> Answer:
    """The line's answer: the response's status, and its usage row with `outcome`."""
    return Answer(_status(response), outcome == "completed", _record(job, meter, outcome))


def _record(job: Job, meter: LineMeter, outcome: str) -> UsageRecord | None:
    return usage_record(
        meter,
        key_id=job.key_id,
        request_id=job.id,
        model=meter.model,
        endpoint=ENDPOINT,
        outcome=outcome,
    )
