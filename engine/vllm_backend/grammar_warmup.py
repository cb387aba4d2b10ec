"""The grammar pieces every bounded schema shares, compiled once at start.

`engine.schema_bounds` gives every string a `maxLength`, and xgrammar's compile of a
bounded string is slow: 3.4-4 s of CPU for the default bound of 200 on SmolLM2's 49k
vocabulary (about linear in the bound up to 128, flat above), against milliseconds
for everything else in a family's tool-call grammar or a typical response format. So
that one repetition was nearly all of every tool-call grammar's compile (Kimi, GLM,
hermes: 3.4-4.4 s for one tool with one string argument).

xgrammar's compiler caches such pieces across grammars: once a grammar holding
`maxLength: 200` strings is compiled, another grammar with the same bound compiles in
about 25 ms. So at start the engine compiles a skeleton holding a string of the bound
the caps give every declared string (200), as a plain JSON schema and as the
arguments of a call in the served family's tool-call format, in the grammar gate's
compiler and in the engine core's (one one-token request each, before the engine
reports ready). The bounds below xgrammar's flat part cost less and are compiled on
first use: a free-form object's strings (80 and 60: `json_object` 1.7 s), the halved
caps of a tight `max_tokens` (100: 1.8 s, 50: 0.8 s).

(Writing the repetition as chunks, `(x x x x x x x x){0, 24} x{0, 7}`, compiles in
50 ms but costs 30-40 ms of token-mask work per generated token instead of 0.2 ms: the
compile's precomputation is what makes decoding cheap, so it is paid once instead.)
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from engine.errors import EngineRequestError
from engine.schema_bounds import DEFAULT_CAPS

if TYPE_CHECKING:
    from engine.vllm_backend.grammar_gate import GrammarGate

log = logging.getLogger("lilac.engine")

REQUEST_PREFIX = "grammar-warmup-"
TOOL_NAME = "grammar_warmup"


def skeleton_schema() -> dict[str, Any]:
    """An object of one string with the bound the caps give a declared string."""
    return {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": DEFAULT_CAPS.string}},
        "required": ["text"],
        "additionalProperties": False,
    }


def skeletons(tool_parser: str) -> list[Any]:
    """StructuredOutputsParams to compile at start: the skeleton as a JSON schema, and
    as the arguments of a call in `tool_parser`'s format (when it has a grammar)."""
    from vllm.sampling_params import StructuredOutputsParams

    from engine.vllm_backend.tool_calls import ToolRequest, structural_tag

    schema = skeleton_schema()
    found = [StructuredOutputsParams(json=json.dumps(schema))]
    tool = {"type": "function", "function": {"name": TOOL_NAME, "parameters": schema}}
    try:
        tag = structural_tag(ToolRequest([tool], "auto"), tool_parser)
    except EngineRequestError:  # an unknown parser: refused elsewhere, with its reason
        tag = None
    if tag is not None:
        found.append(tag)
    return found


async def warm_engine_core(llm: Any, specs: list[Any], token_id: int) -> None:
    """One one-token request per spec: the engine core compiles (and caches) each."""
    import asyncio

    from vllm.sampling_params import SamplingParams

    async def one(index: int, spec: Any) -> None:
        params = SamplingParams(max_tokens=1, structured_outputs=spec)
        request_id = f"{REQUEST_PREFIX}{index}"
        try:
            async for _ in llm.generate({"prompt_token_ids": [token_id]}, params, request_id):
                pass
        except Exception:  # a warm-up is an optimisation: serving goes on without it
            log.warning("grammar warm-up request failed", exc_info=True)

    await asyncio.gather(*(one(i, spec) for i, spec in enumerate(specs)))


async def warm_grammars(
    llm: Any, tool_parser: str, token_id: int, gate: GrammarGate | None
) -> None:
    """The bounded strings every tool call and response format holds, compiled in the
    gate's compiler and in the engine core's at once."""
    specs = await asyncio.to_thread(skeletons, tool_parser)
    jobs = [warm_engine_core(llm, specs, token_id)]
    if gate is not None and gate.timeout_s > 0:
        jobs.append(asyncio.to_thread(gate.warm, specs))
    started = time.perf_counter()
    await asyncio.gather(*jobs)
    log.info("grammar warm-up took %.1f s", time.perf_counter() - started)
