"""Per-request bounds of the HTTP side: priority clamping and the output-token budget."""

import pytest

from app.errors import InvalidRequest
from app.services.generation.admission import check_request_work, clamp_priority
from engine.protocol import GenerateRequest, SamplingOptions


def test_clamp_priority_keeps_later_and_floors_sooner() -> None:
    assert clamp_priority(-1) == 0
    assert clamp_priority(-1000) == 0
    assert clamp_priority(7) == 7
    assert clamp_priority(-3, floor=-5) == -3  # a tier may allow urgency
    assert clamp_priority(-9, floor=-5) == -5


def generate(n: int, max_tokens: int | None) -> GenerateRequest:
    return GenerateRequest("r", SamplingOptions(n=n, max_tokens=max_tokens), prompt="hi")


def test_n_times_max_tokens_is_bounded() -> None:
    check_request_work([generate(4, 100)], 2048, 400)
    with pytest.raises(InvalidRequest) as refused:
        check_request_work([generate(4, 101)], 2048, 400)
    assert (refused.value.param, refused.value.code) == ("n", "request_too_large")


def test_max_tokens_left_out_counts_the_model_default() -> None:
    check_request_work([generate(1, None)], 2048, 512)  # default: a quarter of 2048
    with pytest.raises(InvalidRequest):
        check_request_work([generate(2, None)], 2048, 1000)


def test_every_prompt_counts() -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_request_work([generate(1, 300), generate(1, 300)], 2048, 500)
    assert refused.value.param == "max_tokens"


def test_zero_lifts_the_bound() -> None:
    check_request_work([generate(128, 4096)], 8192, 0)
