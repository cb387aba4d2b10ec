"""What a prompt token and an output token cost this engine (fair-share weights).

The fair scheduler's service weights (engine.fairness), measured rather than copied.

    python -m perf token-costs [--rounds 3] [--batch 16]

One engine (the default model, float32, eager, 2,048 context), alternating two loads
`--rounds` times: prefill (`--batch` fresh prompts of about 1,000 tokens, one output
token each) and decode (`--batch` short prompts, 128 output tokens each, `ignore_eos`).
Engine seconds per token are each load's wall time over its tokens (its prompt tokens
for the first, its output tokens for the second: the short prompts' own prefill is a
few percent of that load); the ratio is what one output token costs in prompt tokens.
Prints a table and writes perf/out/token_costs/results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from dataclasses import asdict, dataclass

from engine.checkpoint import DEFAULT_MODEL_NAME, default_model_dir
from engine.protocol import GenerateRequest, SamplingOptions
from engine.vllm_backend.config import EngineConfig
from engine.vllm_backend.engine import VLLMEngine
from perf.harness.results import output

OUT = output("token_costs")
WORDS = [
    "river",
    "stone",
    "lantern",
    "meadow",
    "copper",
    "violet",
    "harbor",
    "thunder",
    "orchard",
    "silver",
    "canyon",
    "maple",
    "ember",
    "falcon",
    "glacier",
    "willow",
    "saffron",
    "pepper",
    "marble",
    "cobalt",
]


@dataclass
class Round:
    prefill_tokens: int
    prefill_s: float
    decode_tokens: int
    decode_s: float

    @property
    def ratio(self) -> float:
        return (self.decode_s / self.decode_tokens) / (self.prefill_s / self.prefill_tokens)


async def _run(engine: VLLMEngine, requests: list[GenerateRequest]) -> tuple[int, int, float]:
    async def one(request: GenerateRequest) -> tuple[int, int]:
        prompt = output_tokens = 0
        async for out in engine.generate(request):
            prompt = out.prompt_tokens
            output_tokens += sum(choice.token_count for choice in out.choices)
        return prompt, output_tokens

    start = time.perf_counter()
    counts = await asyncio.gather(*(one(r) for r in requests))
    seconds = time.perf_counter() - start
    return sum(p for p, _ in counts), sum(o for _, o in counts), seconds


def _prefill_load(rng: random.Random, batch: int, tag: str) -> list[GenerateRequest]:
    return [
        GenerateRequest(
            request_id=f"{tag}-p{i}",
            sampling=SamplingOptions(max_tokens=1),
            prompt=" ".join(rng.choice(WORDS) for _ in range(900)),
        )
        for i in range(batch)
    ]


def _decode_load(rng: random.Random, batch: int, tag: str) -> list[GenerateRequest]:
    return [
        GenerateRequest(
            request_id=f"{tag}-d{i}",
            sampling=SamplingOptions(max_tokens=128, ignore_eos=True),
            prompt=f"{rng.choice(WORDS)} {i}: tell a story.",
        )
        for i in range(batch)
    ]


async def measure(rounds: int, batch: int, step_tokens: int | None = None) -> list[Round]:
    engine = VLLMEngine(
        EngineConfig(
            model=str(default_model_dir()),
            served_names=(DEFAULT_MODEL_NAME,),
            dtype="float32",
            enforce_eager=True,
            max_model_len=2048,
            grammar_warmup=False,
            max_num_batched_tokens=step_tokens,
        )
    )
    await engine.start()
    rng = random.Random(7)
    results = []
    try:
        await _run(engine, _decode_load(rng, 2, "warm"))
        for r in range(rounds):
            prompt, _, prefill_s = await _run(engine, _prefill_load(rng, batch, f"r{r}"))
            _, decoded, decode_s = await _run(engine, _decode_load(rng, batch, f"r{r}"))
            results.append(Round(prompt, prefill_s, decoded, decode_s))
    finally:
        await engine.shutdown()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument(
        "--max-num-batched-tokens", type=int, default=None, help="an engine step's budget"
    )
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.rounds, args.batch, args.max_num_batched_tokens))
    print("| round | prompt tokens/s | output tokens/s | output token in prompt tokens |")
    print("| ---: | ---: | ---: | ---: |")
    for i, r in enumerate(results, 1):
        prefill_rate, decode_rate = r.prefill_tokens / r.prefill_s, r.decode_tokens / r.decode_s
        print(f"| {i} | {prefill_rate:.0f} | {decode_rate:.1f} | {r.ratio:.2f} |")
    median = statistics.median(r.ratio for r in results)
    print(f"\nmedian: one output token costs {median:.2f} prompt tokens (batch {args.batch})")
    OUT.mkdir(parents=True, exist_ok=True)
    payload = {"batch": args.batch, "rounds": [asdict(r) for r in results], "median": median}
    (OUT / "results.json").write_text(json.dumps(payload, indent=2))
    return 0
