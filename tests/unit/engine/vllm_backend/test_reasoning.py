"""Output parsing: each family's vLLM reasoning parser, fed the way the engine feeds it.

The tokenizer is SmolLM2's with the families' markers as single tokens (see
perf/harness/family_model.py). Every output is fed whole, token by token, and split in two at
every token boundary; all must give the same reasoning and content.
"""

from pathlib import Path

import pytest

from engine import families
from engine.checkpoint import default_model_dir
from engine.protocol import GenerateRequest, SamplingOptions
from engine.vllm_backend.reasoning import (
    LeakGuard,
    OutputParsing,
    PlainSplitter,
    RequestParsing,
    last_occurrence,
)
from perf.harness.family_model import make_family_checkpoint


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from vllm.tokenizers import get_tokenizer

    source = default_model_dir()
    assert (source / "tokenizer.json").is_file(), "run `lilac-serve prepare-model`"
    target = make_family_checkpoint(source, Path(tmp_path_factory.mktemp("tok")) / "ckpt")
    return get_tokenizer(str(target))


def split(parsing: OutputParsing, settings: dict, prompt: str, chunks: list[list[int]]):
    """Feed the chunks of token ids as deltas; return (reasoning, content)."""
    tok = parsing.tokenizer
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    splitter = parsing.splitter(settings, parsing.current_turn(prompt_ids))  # as the engine
    seen: list[int] = []
    text_so_far = ""
    reasoning, content = [], []
    for number, chunk in enumerate(chunks):
        seen += chunk
        text = tok.decode(seen, skip_special_tokens=False)
        delta, text_so_far = text[len(text_so_far) :], text
        r, c = splitter.feed(delta, chunk, finished=number == len(chunks) - 1)
        reasoning.append(r)
        content.append(c)
    return "".join(reasoning), "".join(content)


def every_split(parsing, settings, prompt, output) -> set[tuple[str, str]]:
    ids = parsing.tokenizer.encode(output, add_special_tokens=False)
    ways = [[ids], [[i] for i in ids]] + [[ids[:k], ids[k:]] for k in range(1, len(ids))]
    return {split(parsing, settings, prompt, chunks) for chunks in ways}


CASES = [
    # family, settings, prompt tail (as the template ends it), output, (reasoning, content)
    (
        "kimi_k2",
        {"thinking": True},
        "<think>",
        "let me see</think>It is 4.",
        ("let me see", "It is 4."),
    ),
    ("kimi_k2", {"thinking": False}, "<think></think>", "It is 4.", ("", "It is 4.")),
    (
        "glm45",
        {"enable_thinking": True},
        "<|assistant|><think>",
        "two and two</think>Four.",
        ("two and two", "Four."),
    ),
    ("glm45", {"enable_thinking": False}, "<|assistant|><think></think>", "Four.", ("", "Four.")),
    (
        "glm45",
        {"enable_thinking": False},
        "<|assistant|><think></think>",
        "oops</think>Four.",
        ("", "Four."),
    ),
    (
        "gemma4",
        {"enable_thinking": True},
        "<|turn>model\n",
        "<|channel>thought\nadd them<channel|>Four.",
        ("add them", "Four."),
    ),
    ("gemma4", {"enable_thinking": False}, "<|turn>model\n", "Four.", ("", "Four.")),
    (
        "minimax_m3",
        {"thinking_mode": "adaptive"},
        "]~b]ai\n",
        "<mm:think>quick sum</mm:think>Four.",
        ("quick sum", "Four."),
    ),
    ("minimax_m3", {"thinking_mode": "adaptive"}, "]~b]ai\n", "Four.", ("", "Four.")),
    (
        "minimax_m3",
        {"thinking_mode": "enabled"},
        "]~b]ai\n<mm:think>",
        "sum</mm:think>Four.",
        ("sum", "Four."),
    ),
]


@pytest.mark.parametrize(("name", "settings", "prompt", "output", "expected"), CASES)
def test_reasoning_split_at_every_position(
    tokenizer, name, settings, prompt, output, expected
) -> None:
    parsing = OutputParsing(families.get(name), tokenizer)
    assert every_split(parsing, settings, prompt, output) == {expected}


def test_no_family_and_no_parser_mean_plain_content(tokenizer) -> None:
    for family in (None, families.get("smollm2")):
        parsing = OutputParsing(family, tokenizer)
        assert isinstance(parsing.splitter({}, []), PlainSplitter)
        assert every_split(parsing, {}, "", "a <think>b</think>") == {("", "a <think>b</think>")}


def test_prepare_resolves_controls_and_keeps_markers_visible(tokenizer) -> None:
    parsing = OutputParsing(families.get("glm45"), tokenizer)
    request = GenerateRequest("r", SamplingOptions(), messages=[], template_kwargs={"x": 1})
    request.reasoning_controls = {"enable_thinking": False}
    prepared, per_request = parsing.prepare(request)
    assert prepared.template_kwargs == {"x": 1, "enable_thinking": False}
    assert prepared.sampling.skip_special_tokens is False
    assert request.sampling.skip_special_tokens is True  # the caller's copy is untouched
    kwargs = per_request.engine_kwargs["reasoning_parser_kwargs"]
    assert kwargs == {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["thinking", " hard</th", "ink>", "Answer", "."], ["", "", "", "Answer", "."]),
        (["no leak ", "here"], ["", "no leak here"]),  # held until the end, then all of it
        (["</think>", "A"], ["", "A"]),
        (["x</think>y</think>z"], ["y</think>z"]),  # only up to the first marker
    ],
)
def test_leak_guard(pieces, expected) -> None:
    guard = LeakGuard(PlainSplitter(), "</think>")
    out = [guard.feed(p, [], i == len(pieces) - 1)[1] for i, p in enumerate(pieces)]
    assert out == expected


# MiniMax M3's system turn quotes both markers; a past turn closed its reasoning too.
MINIMAX_HISTORY = (
    "]~!b[]~b]system\nUse <mm:think></mm:think> or answer after </mm:think>.[e~[\n"
    "]~b]user\nhi[e~[\n]~b]ai\n</mm:think>hello[e~[\n]~b]user\nagain[e~[\n"
)


@pytest.mark.parametrize(
    ("mode", "prefill", "ended"),
    [("adaptive", "", False), ("enabled", "<mm:think>", False), ("disabled", "</mm:think>", True)],
)
def test_only_the_current_turn_decides_whether_reasoning_ended(
    tokenizer, mode: str, prefill: str, ended: bool
) -> None:
    parsing = OutputParsing(families.get("minimax_m3"), tokenizer)
    settings = {"thinking_mode": mode}
    prompt = tokenizer.encode(MINIMAX_HISTORY + "]~b]ai\n" + prefill, add_special_tokens=False)
    turn = parsing.current_turn(prompt)
    assert tokenizer.decode(turn, skip_special_tokens=False).endswith("]~b]ai\n" + prefill)
    assert "user" not in tokenizer.decode(turn, skip_special_tokens=False)
    assert parsing.reasoning_ended(settings, turn) is ended
    if mode == "adaptive":  # the whole prompt would say it ended before it began
        assert parsing.reasoning_ended(settings, prompt) is True
    request = RequestParsing(parsing, settings, turn)
    assert request.engine_kwargs["reasoning_ended"] is ended
    output = "hello there</mm:think>fine" if mode == "enabled" else "fine"
    if mode == "adaptive":
        output = "<mm:think>hello there</mm:think>fine"
    expected = ("" if mode == "disabled" else "hello there", "fine")
    assert every_split(parsing, settings, MINIMAX_HISTORY + "]~b]ai\n" + prefill, output) == {
        expected
    }


def test_last_occurrence_is_the_last_suffix_holding_the_text(tokenizer) -> None:
    marker = "]~b]ai\n"
    ids = tokenizer.encode(MINIMAX_HISTORY + marker + "<mm:think>", add_special_tokens=False)
    for end in range(len(ids) + 1):
        ids_so_far = ids[:end]
        holding = [
            i
            for i in range(len(ids_so_far))
            if marker in tokenizer.decode(ids_so_far[i:], skip_special_tokens=False)
        ]
        assert last_occurrence(tokenizer, ids_so_far, marker) == (max(holding) if holding else None)


def test_no_assistant_start_means_the_whole_prompt(tokenizer) -> None:
    parsing = OutputParsing(families.get("minimax_m3"), tokenizer)
    prompt = tokenizer.encode("a raw completion prompt", add_special_tokens=False)
    assert parsing.current_turn(prompt) == prompt
