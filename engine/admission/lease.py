"""Admission as a lease around one generation, the way httpx reduces a transport to one
method: `AdmissionController.lease(request)` admits (or raises `AdmissionRejected`) on
entry and gives the slot back on exit; `admitted` is that lease held around an engine's
stream, ending it with `Drained` once a drain's grace period has run out. The HTTP side
maps both errors in `app.errors`; nothing else about the engine passes through here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Protocol

from engine.admission.queue import Ticket, estimate_tokens
from engine.errors import Drained
from engine.protocol import GenerateOutput, GenerateRequest, Generator, ModelInfo


def ticket_for(ticket_id: int, request: GenerateRequest, model: ModelInfo) -> Ticket:
    """The queue's ticket for one engine request on `model` (its arrival and deadline
    are set when it is offered): the KV tokens it may take, of them its prompt."""
    sampling = request.sampling
    token_ids = len(request.prompt_token_ids or ())
    messages, prompt, context = request.messages, request.prompt, model.max_model_len
    tokens = estimate_tokens(messages, prompt, sampling.max_tokens, context, sampling.n, token_ids)
    prompt_tokens = estimate_tokens(messages, prompt, 0, context, prompt_token_ids=token_ids)
    client = request.client or "anonymous"
    return Ticket(
        ticket_id,
        client,
        request.priority,
        tokens,
        0.0,
        0.0,
        prompt_tokens,
        model.name,
        request.weight,
    )


class Lease:
    """One admitted generation; `revoked` once a drain's grace period has run out."""

    __slots__ = ("_drained", "_prefilled", "request_id", "revoked", "ticket")

    def __init__(
        self,
        ticket: Ticket,
        request_id: str,
        drained: Callable[[], Drained],
        prefilled: Callable[[Lease], None] | None = None,
    ) -> None:
        self.ticket = ticket
        self.request_id = request_id
        self.revoked = False
        self._drained = drained
        self._prefilled = prefilled  # called once, at the first output

    def first_output(self) -> None:
        """The engine's first output for this generation: its prompt is prefilled."""
        prefilled, self._prefilled = self._prefilled, None
        if prefilled is not None:
            prefilled(self)

    def check(self) -> None:
        """Raise `Drained` once revoked: the generation must end now."""
        if self.revoked:
            raise self._drained()


class Leasing(Protocol):
    """What `admitted` needs of admission (engine.admission.runtime's controller)."""

    def lease(
        self, request: GenerateRequest, model: ModelInfo | None = None
    ) -> AbstractAsyncContextManager[Lease]: ...


async def admitted(
    admission: Leasing, generator: Generator, request: GenerateRequest
) -> AsyncGenerator[GenerateOutput, None]:
    """`generator`'s stream for `request`, inside an admission lease held exactly as
    long as the stream runs, against the budget of the generator's model (an engine's
    or a warm model's `model`; the host's own model for a generator without one).
    Errors come before the first output, as from the engine; closing this iterator
    closes (and so aborts) the engine's stream at once."""
    model = getattr(generator, "model", None)
    info = model if isinstance(model, ModelInfo) else None
    async with admission.lease(request, info) as lease:
        async with aclosing(generator.generate(request)) as outputs:
            async for output in outputs:
                lease.check()
                lease.first_output()
                yield output
        lease.check()  # the engine ended it early because admission aborted it
