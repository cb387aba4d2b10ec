"""vLLM's `prompt_logprobs`: the shaping of engine prompt logprobs into vLLM's per-token-id
maps, and the HTTP side over a scripted engine (both endpoints, the bounds, streams)."""

from __future__ import annotations

import httpx
import msgspec
import pytest

from app.services.generation.prompt_logprobs import engine_count, wire_prompt_logprobs
from engine.protocol import TokenLogprob, TopLogprob
from engine.scripted import ScriptedEngine

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _entry(token_id: int, rank: int, tops: list[tuple[int, str, float]]) -> TokenLogprob:
    top = [TopLogprob(text, lp, token_id=i, rank=r + 1) for r, (i, text, lp) in enumerate(tops)]
    return TokenLogprob(f"t{token_id}", -3.0, top, token_id=token_id, rank=rank)


def test_first_entry_is_null_and_the_prompt_token_comes_first() -> None:
    entries = [None, _entry(7, 3, [(1, "a", -0.5), (2, "b", -1.0), (3, "c", -1.5)])]
    wire = wire_prompt_logprobs(entries, top_k=2)
    assert wire is not None and wire[0] is None
    plain = msgspec.to_builtins(wire[1])
    assert list(plain) == ["7", "1", "2"]  # the prompt's token, then the top 2 by rank
    assert plain["7"] == {"logprob": -3.0, "rank": 3, "decoded_token": "t7"}
    assert plain["2"] == {"logprob": -1.0, "rank": 2, "decoded_token": "b"}


def test_a_prompt_token_among_the_top_is_not_repeated() -> None:
    entries = [None, _entry(2, 2, [(1, "a", -0.5), (2, "t2", -3.0)])]
    wire = wire_prompt_logprobs(entries, top_k=2)
    assert wire is not None and wire[1] is not None
    assert list(wire[1]) == ["2", "1"]  # k entries, not k + 1


def test_zero_keeps_only_the_prompt_token() -> None:
    wire = wire_prompt_logprobs([None, _entry(5, 9, [(1, "a", -0.5)])], top_k=0)
    assert wire is not None and wire[1] is not None
    assert list(wire[1]) == ["5"]


def test_no_engine_entries_is_null() -> None:
    assert wire_prompt_logprobs(None, top_k=2) is None


def test_engine_count_is_the_largest_request() -> None:
    assert engine_count(None, None) is None
    assert engine_count(2, None) == 2
    assert engine_count(1, 4) == 4
    assert engine_count(0, None) == 0


# ------------------------------------------------------------ over HTTP (scripted engine)


def _check_shape(prompt_logprobs: list, tokens: int, k: int) -> None:
    assert len(prompt_logprobs) == tokens
    assert prompt_logprobs[0] is None
    for position in prompt_logprobs[1:]:
        assert 1 <= len(position) <= k + 1
        for token_id, entry in position.items():
            assert int(token_id) >= 0
            assert set(entry) == {"logprob", "rank", "decoded_token"}


async def test_completions_carry_prompt_logprobs_per_choice(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    body = {"model": "scripted", "prompt": ["a bb ccc", "dddd e"], "n": 2, "max_tokens": 1}
    response = await client.post(COMPLETIONS, json={**body, "prompt_logprobs": 2})
    assert response.status_code == 200, response.text
    choices = response.json()["choices"]
    assert [request.sampling.prompt_logprobs for request in scripted_engine.requests] == [2, 2]
    _check_shape(choices[0]["prompt_logprobs"], 3, 2)
    assert choices[0]["prompt_logprobs"] == choices[1]["prompt_logprobs"]  # same prompt
    _check_shape(choices[2]["prompt_logprobs"], 2, 2)
    # The scripted engine's word ids are their lengths: "bb" is 2, ranked behind "alt".
    assert choices[0]["prompt_logprobs"][1] == {
        "2": {"logprob": -2.0, "rank": 2, "decoded_token": " bb"},
        "0": {"logprob": -1.0, "rank": 1, "decoded_token": "alt"},
    }
    assert choices[0]["logprobs"] is None  # echo's lists are not asked for


async def test_completions_without_prompt_logprobs_have_no_field(
    client: httpx.AsyncClient,
) -> None:
    body = {"model": "scripted", "prompt": "a b", "max_tokens": 1}
    choice = (await client.post(COMPLETIONS, json=body)).json()["choices"][0]
    assert "prompt_logprobs" not in choice


async def test_echo_lists_keep_their_own_top_k(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine
) -> None:
    body = {"model": "scripted", "prompt": "a bb", "max_tokens": 1, "echo": True, "logprobs": 1}
    plain = (await client.post(COMPLETIONS, json=body)).json()["choices"][0]
    both = (await client.post(COMPLETIONS, json={**body, "prompt_logprobs": 3})).json()
    choice = both["choices"][0]
    assert scripted_engine.requests[-1].sampling.prompt_logprobs == 3
    assert choice["logprobs"] == plain["logprobs"]  # one alternative each, as asked
    assert choice["logprobs"]["top_logprobs"][1] == {"alt": -1.0}
    assert len(choice["prompt_logprobs"][1]) == 3  # " bb" (rank 2), "alt", "alt3"


async def test_chat_carries_prompt_logprobs_at_the_top(client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "one two three"}]
    body = {"model": "scripted", "messages": messages, "max_tokens": 1, "prompt_logprobs": 1}
    answer = (await client.post(CHAT, json=body)).json()
    _check_shape(answer["prompt_logprobs"], 3, 1)
    assert "prompt_logprobs" not in answer["choices"][0]
    del body["prompt_logprobs"]
    assert "prompt_logprobs" not in (await client.post(CHAT, json=body)).json()


@pytest.mark.parametrize("url", [CHAT, COMPLETIONS])
@pytest.mark.parametrize(
    "fields",
    [
        {"prompt_logprobs": -1},  # vLLM's whole vocabulary
        {"prompt_logprobs": 21},  # over vLLM's max_logprobs
        {"prompt_logprobs": "2"},
        {"prompt_logprobs": 0, "stream": True},  # vLLM ignores 0 on streams; refused here
        {"prompt_logprobs": 2, "stream": True},
    ],
)
async def test_bad_prompt_logprobs_are_400s(
    client: httpx.AsyncClient, scripted_engine: ScriptedEngine, url: str, fields: dict
) -> None:
    body: dict = {"model": "scripted", "max_tokens": 1, **fields}
    if url == CHAT:
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    response = await client.post(url, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "prompt_logprobs"
    assert not scripted_engine.requests
