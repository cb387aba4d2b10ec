"""`lilac-serve serve` with the admission controller taken out of the request path.

It measures what the controller costs (the load benchmark's `ours-noadmit` run).

    PYTHONPATH=. python -m perf no-admission serve [FLAGS...]

Everything else is the real server: the same CLI, settings, app and engine; only each
generation's admission lease is skipped (the stream goes straight to the engine).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from litestar import Litestar

TARGET = "perf.load.no_admission:app_from_environment"


async def _straight_to_the_engine(
    admission: Any, generator: Any, request: Any
) -> AsyncGenerator[Any, None]:
    async with aclosing(generator.generate(request)) as outputs:
        async for output in outputs:
            yield output


def app_from_environment() -> Litestar:
    """granian's worker factory: the real one, with the lease skipped."""
    import app.services.generation.service as generation
    from app.launch.factory import app_from_environment as real

    generation.admitted = _straight_to_the_engine  # type: ignore[assignment]  # perf-only swap
    return real()


def main(argv: list[str] | None = None) -> int:
    import granian

    from app.launch import cli

    real = granian.Granian

    def swapped(target: str, **options: Any) -> Any:
        return real(TARGET, **options)

    granian.Granian = swapped  # type: ignore[misc]  # app.launch.cli.serve builds its server here
    return cli.main(argv)
