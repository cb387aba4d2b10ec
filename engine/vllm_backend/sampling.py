"""Engine-neutral sampling options -> vLLM SamplingParams."""

from __future__ import annotations

from vllm.sampling_params import RequestOutputKind, SamplingParams

from engine.protocol import SamplingOptions


def to_sampling_params(
    options: SamplingOptions,
    max_tokens: int,
    turn_end_ids: tuple[int, ...] = (),
    turn_end_texts: tuple[str, ...] = (),
) -> SamplingParams:
    """`turn_end_ids` and `turn_end_texts`: the family's end-of-turn tokens, as ids and as
    text. They stop like EOS (so not under `ignore_eos`, which benchmarks set). The ids
    stop a turn end written as its single token; the texts (vLLM stop strings, cut from
    the output) stop one spelled over several tokens, which the id check cannot see."""
    stop_ids = list(options.stop_token_ids)
    stop = list(options.stop)
    if not options.ignore_eos:
        stop_ids += [i for i in turn_end_ids if i not in stop_ids]
        stop += [text for text in turn_end_texts if text not in stop]
    return SamplingParams(
        n=options.n,
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=max(options.top_k, 0),  # vLLM: 0 disables
        min_p=options.min_p,
        seed=options.seed,
        stop=stop or None,
        stop_token_ids=stop_ids or None,
        include_stop_str_in_output=options.include_stop_str_in_output,
        max_tokens=max_tokens,
        min_tokens=options.min_tokens,
        ignore_eos=options.ignore_eos,
        frequency_penalty=options.frequency_penalty,
        presence_penalty=options.presence_penalty,
        repetition_penalty=options.repetition_penalty,
        logit_bias=dict(options.logit_bias) or None,
        logprobs=options.logprobs,
        prompt_logprobs=options.prompt_logprobs,
        skip_special_tokens=options.skip_special_tokens,
        allowed_token_ids=list(options.allowed_token_ids) if options.allowed_token_ids else None,
        bad_words=list(options.bad_words) or None,
        output_kind=RequestOutputKind.DELTA,
    )
