"""Engine-neutral sampling options -> vLLM's SamplingParams: the family's turn ends."""

from engine.protocol import SamplingOptions
from engine.vllm_backend.sampling import to_sampling_params


def test_turn_end_tokens_stop_generation_after_the_clients_own() -> None:
    params = to_sampling_params(SamplingOptions(stop_token_ids=[7]), 16, (50, 106, 7))
    assert params.stop_token_ids == [7, 50, 106]


def test_ignore_eos_ignores_turn_ends_too() -> None:
    params = to_sampling_params(SamplingOptions(ignore_eos=True), 16, (50, 106))
    assert not params.stop_token_ids


def test_turn_end_texts_are_stop_strings_after_the_clients_own() -> None:
    # A turn end spelled over several tokens escapes the id check: the text stops it.
    options = SamplingOptions(stop=["END"])
    params = to_sampling_params(options, 16, (106,), ("<turn|>", "END"))
    assert params.stop == ["END", "<turn|>"]
    assert not params.include_stop_str_in_output


def test_ignore_eos_ignores_turn_end_texts_too() -> None:
    params = to_sampling_params(SamplingOptions(ignore_eos=True), 16, (106,), ("<turn|>",))
    assert not params.stop
