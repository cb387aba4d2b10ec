"""vLLM's request extensions through the real engine: each one's effect on the output."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from engine.checkpoint import DEFAULT_MODEL_NAME
from engine.vllm_backend.engine import VLLMEngine

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PROMPT = "The capital of France is"
QUESTION = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]


async def post(client: httpx.AsyncClient, url: str, **fields: object) -> httpx.Response:
    body = {"model": DEFAULT_MODEL_NAME, "temperature": 0, **fields}
    return await client.post(url, json=body)


async def ok(client: httpx.AsyncClient, url: str, **fields: object) -> dict:
    response = await post(client, url, **fields)
    assert response.status_code == 200, response.text
    return response.json()


def content(body: dict) -> str:
    return body["choices"][0]["message"]["content"]


# ------------------------------------------------------------ structured outputs


@pytest.mark.parametrize(
    "constraint",
    [
        {"structured_outputs": {"choice": ["maybe", "perhaps"]}},
        {"guided_choice": ["maybe", "perhaps"]},
    ],
)
async def test_choice(real_client: httpx.AsyncClient, constraint: dict) -> None:
    body = await ok(real_client, CHAT, messages=QUESTION, max_tokens=8, **constraint)
    assert content(body) in ("maybe", "perhaps")


@pytest.mark.parametrize(
    "constraint",
    [{"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2}"}}, {"guided_regex": "[0-9]{3}-[a-z]{2}"}],
)
async def test_regex(real_client: httpx.AsyncClient, constraint: dict) -> None:
    body = await ok(real_client, CHAT, messages=QUESTION, max_tokens=10, **constraint)
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", content(body))


@pytest.mark.parametrize("field", ["structured_outputs", "guided_grammar"])
async def test_grammar(real_client: httpx.AsyncClient, field: str) -> None:
    grammar = 'root ::= "Answer: " ("Affirmative" | "Negative")'
    constraint = (
        {"structured_outputs": {"grammar": grammar}}
        if field != "guided_grammar"
        else {"guided_grammar": grammar}
    )
    body = await ok(real_client, CHAT, messages=QUESTION, max_tokens=16, **constraint)
    assert content(body) in ("Answer: Affirmative", "Answer: Negative")


async def test_json_schema_in_structured_outputs(real_client: httpx.AsyncClient) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "boolean"}},
        "required": ["answer"],
    }
    body = await ok(
        real_client, CHAT, messages=QUESTION, max_tokens=16, structured_outputs={"json": schema}
    )
    assert isinstance(json.loads(content(body))["answer"], bool)


async def test_structural_tag(real_client: httpx.AsyncClient) -> None:
    tag = {"type": "structural_tag", "format": {"type": "const_string", "value": "Blue it is."}}
    body = await ok(
        real_client,
        CHAT,
        messages=QUESTION,
        max_tokens=10,
        structured_outputs={"structural_tag": tag},
    )
    assert content(body) == "Blue it is."


async def test_guided_choice_on_completions(real_client: httpx.AsyncClient) -> None:
    body = await ok(real_client, COMPLETIONS, prompt=PROMPT, max_tokens=5, guided_choice=[" Lyon"])
    assert body["choices"][0]["text"] == " Lyon"


@pytest.mark.parametrize(
    ("constraint", "param"),
    [
        (
            {"structured_outputs": {"grammar": "root ::= undefined_rule"}},
            "structured_outputs.grammar",
        ),
        ({"guided_regex": "[unclosed"}, "guided_regex"),
        (
            {"structured_outputs": {"structural_tag": {"type": "nonsense"}}},
            "structured_outputs.structural_tag",
        ),
    ],
)
async def test_invalid_grammars_are_400s(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine, constraint: dict, param: str
) -> None:
    response = await post(real_client, CHAT, messages=QUESTION, max_tokens=4, **constraint)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert real_engine.unfinished_requests() == 0


# ------------------------------------------------------------ token-id prompts


async def test_token_id_prompts_match_their_text(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine
) -> None:
    ids = real_engine.tokenize(prompt=PROMPT)
    by_text = await ok(real_client, COMPLETIONS, prompt=PROMPT, max_tokens=3)
    by_ids = await ok(real_client, COMPLETIONS, prompt=ids, max_tokens=3)
    both = await ok(real_client, COMPLETIONS, prompt=[ids, ids[:3]], max_tokens=3)
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"]
    assert both["choices"][0]["text"] == by_text["choices"][0]["text"]
    assert by_ids["usage"]["prompt_tokens"] == len(ids)
    assert both["usage"]["prompt_tokens"] == len(ids) + 3


async def test_token_id_prompts_are_checked(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine
) -> None:
    vocab = real_engine.model.vocab_size
    outside = await post(real_client, COMPLETIONS, prompt=[1, vocab], max_tokens=1)
    assert outside.status_code == 400
    assert outside.json()["error"]["param"] == "prompt"
    too_long = await post(
        real_client, COMPLETIONS, prompt=[504] * real_engine.model.max_model_len, max_tokens=1
    )
    assert too_long.status_code == 400
    assert too_long.json()["error"]["code"] == "context_length_exceeded"
    assert real_engine.unfinished_requests() == 0


# ------------------------------------------------------------ echoed prompts


@pytest.mark.parametrize(
    "prompt",
    [PROMPT, "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"],
)
async def test_echoed_prompt_tokens_give_back_the_text(
    real_client: httpx.AsyncClient, prompt: str
) -> None:
    body = await ok(real_client, COMPLETIONS, prompt=prompt, echo=True, logprobs=1, max_tokens=2)
    choice = body["choices"][0]
    tokens, offsets = choice["logprobs"]["tokens"], choice["logprobs"]["text_offset"]
    assert "".join(tokens) == choice["text"]
    assert choice["text"].startswith(prompt)
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    assert tokens[0] != ""


# ------------------------------------------------------------ prompt_logprobs


def check_prompt_logprobs(
    prompt_logprobs: list, prompt_ids: list[int], k: int, real_engine: VLLMEngine
) -> None:
    """One entry per prompt token, the first null; each names the prompt's own token
    (its vocabulary rank ≥ 1, its text) and the k most likely ones (ranks 1..k), at most
    k + 1 ids, logprobs ≤ 0 and falling with rank."""
    assert len(prompt_logprobs) == len(prompt_ids) > 1
    assert prompt_logprobs[0] is None
    for token_id, position in zip(prompt_ids[1:], prompt_logprobs[1:], strict=True):
        assert 1 <= len(position) <= k + 1
        own = position[str(token_id)]
        assert own["rank"] >= 1
        assert own["decoded_token"] == real_engine.detokenize([token_id])
        by_rank = sorted(position.values(), key=lambda entry: entry["rank"])
        assert [entry["rank"] for entry in by_rank[:k]] == list(range(1, k + 1))
        logprobs = [entry["logprob"] for entry in by_rank]
        assert all(lp <= 0 for lp in logprobs)
        assert logprobs == sorted(logprobs, reverse=True)


async def test_prompt_logprobs_on_completions(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine
) -> None:
    tokenized = await real_client.post("/tokenize", json={"prompt": PROMPT})
    prompt_ids = tokenized.json()["tokens"]
    body = await ok(real_client, COMPLETIONS, prompt=PROMPT, max_tokens=1, prompt_logprobs=2)
    choice = body["choices"][0]
    check_prompt_logprobs(choice["prompt_logprobs"], prompt_ids, 2, real_engine)
    assert choice["logprobs"] is None
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)
    # A token that is not the prompt's own somewhere: the map holds more than one id.
    assert any(len(position) > 1 for position in choice["prompt_logprobs"][1:])


async def test_prompt_logprobs_on_chat(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine
) -> None:
    tokenized = await real_client.post("/tokenize", json={"messages": QUESTION})
    prompt_ids = tokenized.json()["tokens"]
    body = await ok(real_client, CHAT, messages=QUESTION, max_tokens=1, prompt_logprobs=2)
    check_prompt_logprobs(body["prompt_logprobs"], prompt_ids, 2, real_engine)
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)


async def test_prompt_logprobs_refused_on_streams(real_client: httpx.AsyncClient) -> None:
    response = await post(
        real_client, COMPLETIONS, prompt=PROMPT, max_tokens=1, prompt_logprobs=1, stream=True
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "prompt_logprobs"


# ------------------------------------------------------------ sampling extensions


async def test_allowed_token_ids(real_client: httpx.AsyncClient, real_engine: VLLMEngine) -> None:
    (bang,) = real_engine.tokenize(prompt="!")
    body = await ok(real_client, COMPLETIONS, prompt=PROMPT, max_tokens=3, allowed_token_ids=[bang])
    assert body["choices"][0]["text"] == "!!!"


async def test_bad_words(real_client: httpx.AsyncClient) -> None:
    plain = await ok(real_client, COMPLETIONS, prompt=PROMPT, max_tokens=3)
    banned = await ok(real_client, COMPLETIONS, prompt=PROMPT, max_tokens=3, bad_words=["Paris"])
    assert "Paris" in plain["choices"][0]["text"]
    assert "Paris" not in banned["choices"][0]["text"]


async def test_truncate_prompt_tokens(real_client: httpx.AsyncClient) -> None:
    long_prompt = "one two three four five six seven eight nine ten " * 4 + PROMPT
    body = await ok(
        real_client, COMPLETIONS, prompt=long_prompt, max_tokens=3, truncate_prompt_tokens=6
    )
    short = await ok(real_client, COMPLETIONS, prompt=PROMPT, max_tokens=3)
    assert body["usage"]["prompt_tokens"] == 6
    assert body["choices"][0]["text"] == short["choices"][0]["text"]  # the last 6: the prompt


async def test_add_special_tokens_is_accepted(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine
) -> None:
    # SmolLM2's tokenizer adds no special tokens, so the counts agree either way; what
    # matters here is the path (the scripted tests check what reaches the engine).
    for flag in (True, False):
        body = await ok(
            real_client, COMPLETIONS, prompt=PROMPT, max_tokens=1, add_special_tokens=flag
        )
        assert body["usage"]["prompt_tokens"] == len(real_engine.tokenize(prompt=PROMPT))


# ------------------------------------------------------------ chat prompt shapes


async def test_continue_final_message_with_echo(real_client: httpx.AsyncClient) -> None:
    messages = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is"},
    ]
    body = await ok(
        real_client,
        CHAT,
        messages=messages,
        max_tokens=3,
        echo=True,
        add_generation_prompt=False,
        continue_final_message=True,
    )
    text = content(body)
    assert text.startswith("The capital of France is")
    assert "Paris" in text[len("The capital of France is") :]
    # Without continuing, the assistant turn is closed and a new one starts.
    closed = await ok(real_client, CHAT, messages=messages, max_tokens=3)
    assert closed["usage"]["prompt_tokens"] > body["usage"]["prompt_tokens"]


async def test_documents_reach_a_template_that_uses_them(
    real_client: httpx.AsyncClient, real_engine: VLLMEngine
) -> None:
    template = (
        "{% for d in documents or [] %}<|im_start|>system\nDocument {{ d.title }}: "
        "{{ d.text }}<|im_end|>\n{% endfor %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    config = real_engine._config
    real_engine.bind_family(config.family_record, template)
    try:
        documents = [{"title": "Capitals", "text": "The capital of Zubrowka is Lutz."}]
        question = [{"role": "user", "content": "What is the capital of Zubrowka?"}]
        plain = await ok(real_client, CHAT, messages=question, max_tokens=2)
        cited = await ok(real_client, CHAT, messages=question, max_tokens=2, documents=documents)
    finally:
        real_engine.bind_family(config.family_record, config.chat_template)
    assert cited["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 10


async def test_reasoning_effort(real_client: httpx.AsyncClient) -> None:
    for effort in ("none", "low", "xhigh", "max"):
        await ok(real_client, CHAT, messages=QUESTION, max_tokens=1, reasoning_effort=effort)
    bad = await post(real_client, CHAT, messages=QUESTION, max_tokens=1, reasoning_effort="ultra")
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "reasoning_effort"
