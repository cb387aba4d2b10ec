"""Admission as a lease around one generation, the way httpx reduces a transport to one
method: `AdmissionController.lease(request)` admits (or raises `AdmissionRejected`) on
entry and gives the slot back on exit; `admitted` is that lease held around an engine's
stream, ending it with `Drained` once a drain's grace period has run out. The HTTP side
maps both errors in `app.errors`; nothing else about the engine passes through here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING

from engine.admission.queue import Ticket
from engine.errors import Drained
from engine.protocol import GenerateOutput, GenerateRequest, Generator

if TYPE_CHECKING:
    from engine.admission.runtime import AdmissionController


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


async def admitted(
    admission: AdmissionController, generator: Generator, request: GenerateRequest
) -> AsyncGenerator[GenerateOutput, None]:
    """`generator`'s stream for `request`, inside an admission lease held exactly as
    long as the stream runs. Errors come before the first output, as from the engine;
    closing this iterator closes (and so aborts) the engine's stream at once."""
    async with admission.lease(request) as lease:
        async with aclosing(generator.generate(request)) as outputs:
            async for output in outputs:
                lease.check()
                lease.first_output()
                yield output
        lease.check()  # the engine ended it early because admission aborted it
