"""Admission over the real engine counts a deferred generation's prompt as prefilling
until the engine's first token for it, and tells the batch runner then (once per
generation, never for an interactive one): what lets batch lines enter the engine a
few at a time."""

from __future__ import annotations

import asyncio

from engine.admission.lease import admitted
from engine.admission.policy import Policy
from engine.admission.probes import ScriptedProbe
from engine.admission.runtime import AdmissionController
from engine.protocol import DEFERRED_PREFIX, GenerateRequest, SamplingOptions
from engine.vllm_backend.engine import VLLMEngine


def line(rid: str, client: str) -> GenerateRequest:
    return GenerateRequest(
        request_id=rid,
        sampling=SamplingOptions(max_tokens=3, ignore_eos=True),
        messages=[{"role": "user", "content": f"{rid}: name a colour."}],
        client=client,
    )


async def test_a_deferred_prompt_is_prefilling_until_the_engines_first_token(
    real_engine: VLLMEngine,
) -> None:
    controller = AdmissionController(Policy(max_concurrent=16), ScriptedProbe([]), real_engine)
    seen: list[int] = []  # deferred prompts still prefilling as each one's first token comes
    controller.deferred_prefilled.append(lambda: seen.append(controller.deferred_prefilling()))

    async def run(request: GenerateRequest) -> int:
        # Tokens, not outputs: the engine merges the deltas of a reader that falls behind.
        outputs = [o async for o in admitted(controller, real_engine, request)]
        return sum(choice.token_count for output in outputs for choice in output.choices)

    lines = [asyncio.create_task(run(line(f"pf-{i}", DEFERRED_PREFIX + "k"))) for i in range(4)]
    while controller.deferred_running() < 4 and not seen:
        await asyncio.sleep(0.005)
    if not seen:  # all four admitted before any token: all four are prefilling
        assert controller.deferred_prefilling() == 4
    interactive = await run(line("pf-interactive", "someone"))
    assert all(count == 3 for count in await asyncio.gather(*lines))
    assert interactive == 3
    assert len(seen) == 4, seen  # once per deferred generation, none for the interactive one
    assert seen == sorted(seen, reverse=True) and seen[-1] == 0
    assert controller.deferred_prefilling() == 0 and controller.deferred_running() == 0
