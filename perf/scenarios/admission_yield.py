"""The admission controller on the real engine: yield latency and warm return.

Yield latency is owner active -> engine paused, nothing running; warm return is owner
idle -> first token; both against a cold start of the same engine.

    python -m perf admission-yield --cycles 8

A streaming load of `--streams` clients runs throughout; the owner is switched on and
off by a probe the script controls. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from engine.admission.lease import admitted
from engine.admission.policy import Policy
from engine.admission.probes import GpuSample
from engine.admission.runtime import AdmissionController
from engine.checkpoint import DEFAULT_MODEL_NAME, default_model_dir
from engine.errors import AdmissionRejected, Drained
from engine.protocol import GenerateOutput, GenerateRequest, SamplingOptions
from engine.vllm_backend.engine import EngineConfig, VLLMEngine

OWNER = GpuSample(95.0, 6000.0, 1)


class SwitchProbe:
    blocking = False

    def __init__(self) -> None:
        self.value = GpuSample()

    def sample(self) -> GpuSample:
        return self.value


class Recording(VLLMEngine):
    """Notes when each output leaves the engine."""

    outputs: list[float]

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateOutput]:
        async for output in super().generate(request):
            self.outputs.append(time.monotonic())
            yield output


async def load(
    controller: AdmissionController, engine: Recording, name: str, tokens: int, stop: asyncio.Event
) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        request = GenerateRequest(
            request_id=f"{name}-{n}",
            sampling=SamplingOptions(max_tokens=tokens, ignore_eos=True, temperature=0.0),
            messages=[{"role": "user", "content": "Tell me a long story about a dragon."}],
            client=name,
        )
        try:
            async for _ in admitted(controller, engine, request):
                pass
        except (AdmissionRejected, Drained):
            await asyncio.sleep(0.05)


def first_event(controller: AdmissionController, name: str, after: float) -> float:
    return next(t for t, e in controller.events if e == name and t >= after)


async def cycle(
    controller: AdmissionController, probe: SwitchProbe, engine: Recording, args: argparse.Namespace
) -> tuple[float, float, float, float]:
    await asyncio.sleep(args.serve_s)
    onset = time.monotonic()
    probe.value = OWNER
    while not [t for t, e in controller.events if e == "engine_paused" and t >= onset]:
        await asyncio.sleep(0.01)
    paused = first_event(controller, "engine_paused", onset)
    yielded = first_event(controller, "yielded", onset)
    await asyncio.sleep(args.owner_s)
    idle = time.monotonic()
    probe.value = GpuSample()
    while not [t for t in engine.outputs if t > idle]:
        await asyncio.sleep(0.01)
    first_token = next(t for t in engine.outputs if t > idle)
    resumed = first_event(controller, "engine_resumed", idle)
    return paused - onset, paused - yielded, first_token - idle, first_token - resumed


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(args: argparse.Namespace) -> None:
    config = EngineConfig(
        model=str(default_model_dir()),
        served_names=(DEFAULT_MODEL_NAME,),
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
    )
    engine = Recording(config)
    engine.outputs = []
    started = time.monotonic()
    await engine.start()
    ready = time.monotonic()
    warmup = GenerateRequest(
        request_id="cold",
        sampling=SamplingOptions(max_tokens=1),
        messages=[{"role": "user", "content": "Hi"}],
    )
    async for _ in engine.generate(warmup):
        break
    cold_start = time.monotonic() - started
    cold_ready = ready - started
    probe = SwitchProbe()
    policy = Policy(
        grace_s=args.grace_s, resume_after_s=args.resume_after_s, probe_interval_s=args.interval_s
    )
    controller = AdmissionController(policy, probe, engine)
    await controller.start()
    stop = asyncio.Event()
    clients = [
        asyncio.create_task(load(controller, engine, f"c{i}", args.tokens, stop))
        for i in range(args.streams)
    ]
    rows = [await cycle(controller, probe, engine, args) for _ in range(args.cycles)]
    stop.set()
    await asyncio.gather(*clients)
    await controller.close()
    idle_pause = []
    for _ in range(5):
        t0 = time.monotonic()
        await engine.pause()
        idle_pause.append(time.monotonic() - t0)
        await engine.resume()
    await engine.shutdown()

    columns = list(zip(*rows, strict=True))
    names = [
        "yield latency: owner active -> engine paused",
        "  of which pausing the engine (after the grace period or last request)",
        "warm return: owner idle -> first token (includes the hysteresis)",
        "  of which engine resume -> first token",
    ]
    print(
        f"\n{args.cycles} cycles, {args.streams} streams of {args.tokens} tokens, grace "
        f"{args.grace_s:g} s, hysteresis {args.resume_after_s:g} s, probe every "
        f"{args.interval_s:g} s\n"
    )
    print("| measure | p50 (s) | p99 (s) | max (s) |\n| --- | ---: | ---: | ---: |")
    for name, values in zip(names, columns, strict=True):
        print(
            f"| {name} | {pct(list(values), 0.5):.3f} | {pct(list(values), 0.99):.3f} | "
            f"{max(values):.3f} |"
        )
    print(
        f"| pausing the idle engine | {statistics.median(idle_pause):.3f} | "
        f"{max(idle_pause):.3f} | {max(idle_pause):.3f} |"
    )
    print(f"| cold start: engine start -> ready | {cold_ready:.1f} | | |")
    print(f"| cold start: engine start -> first token | {cold_start:.1f} | | |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--grace-s", type=float, default=2.0)
    parser.add_argument("--resume-after-s", type=float, default=1.0)
    parser.add_argument("--interval-s", type=float, default=0.2)
    parser.add_argument("--serve-s", type=float, default=3.0)
    parser.add_argument("--owner-s", type=float, default=2.0)
    asyncio.run(measure(parser.parse_args(argv)))
    return 0
