"""Engine-neutral sampling options -> vLLM SamplingParams."""

from __future__ import annotations

from vllm.sampling_params import RequestOutputKind, SamplingParams

from engine.protocol import SamplingOptions


def to_sampling_params(options: SamplingOptions, max_tokens: int) -> SamplingParams:
    return SamplingParams(
        n=options.n,
        temperature=options.temperature,
        top_p=options.top_p,
        seed=options.seed,
        stop=list(options.stop) or None,
        max_tokens=max_tokens,
        ignore_eos=options.ignore_eos,
        skip_special_tokens=options.skip_special_tokens,
        output_kind=RequestOutputKind.DELTA,
    )
