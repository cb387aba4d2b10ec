"""What a generation reports of its usage: the one shape the usage meter
(app.tenancy.service), the access line (app.observability.logs) and the SSE body
(app.services.generation.streaming) read. `app.services.generation.service.Generation`
fills it as the engine's outputs come."""

from __future__ import annotations

from typing import Protocol

from app.schemas.chat import Usage


class UsageSource(Protocol):
    @property
    def id(self) -> str:
        """The response's id."""

    @property
    def first_output_at(self) -> float | None:
        """`time.monotonic()` of the first output, None before it."""

    @property
    def engine_prompt_tokens(self) -> int:
        """The engine's own count of the prompt tokens it took: what is billed."""

    @property
    def engine_completion_tokens(self) -> int:
        """The engine's own count of the tokens it generated: what is billed."""

    @property
    def cached_tokens(self) -> int:
        """The prompt tokens read from the prefix cache, as `usage()` reports them."""

    @property
    def reasoning_tokens(self) -> int:
        """The reasoning tokens, as `usage()` reports them."""

    def usage(self) -> Usage:
        """The usage the response reports."""
