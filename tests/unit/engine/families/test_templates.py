"""Each family's template against prompt text written from the family's published format."""

import pytest

from engine.families import FAMILIES, get, resolve
from engine.templates import load_template_file, render_chat

SYSTEM = {"role": "system", "content": "Be brief."}
HI = {"role": "user", "content": "hi"}
HELLO = {"role": "assistant", "content": "hello", "reasoning": "greet back"}
AGAIN = {"role": "user", "content": "and now?"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "id": "functions.weather:0",
            "type": "function",
            "function": {"name": "weather", "arguments": {"city": "Paris"}},
        }
    ],
}
RESULT = {
    "role": "tool",
    "tool_call_id": "functions.weather:0",
    "name": "weather",
    "content": "sun",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def render(name: str, messages: list, kwargs: dict | None = None, top: dict | None = None) -> str:
    variables, _ = resolve(get(name), kwargs or {}, top or {})
    return render_chat(
        load_template_file(get(name).template),
        messages,
        special_tokens={"bos_token": "<bos>", "eos_token": "<eos>"},
        template_kwargs=variables,
    )


def test_every_family_has_its_template() -> None:
    for family in FAMILIES.values():
        assert render(family.name, [HI])


def test_smollm2_matches_the_tokenizer_template() -> None:
    assert render("smollm2", [HI]) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render("smollm2", [SYSTEM, HI]).startswith("<|im_start|>system\nBe brief.<|im_end|>\n")


# ---------------------------------------------------------------- Kimi K2.6


def test_kimi_multi_turn_thinking_on() -> None:
    assert render("kimi_k2", [SYSTEM, HI, HELLO, AGAIN]) == (
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>hello<|im_end|>"
        "<|im_user|>user<|im_middle|>and now?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>"
    )


def test_kimi_default_system_and_thinking_off() -> None:
    assert render("kimi_k2", [HI], {"thinking": False}) == (
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
        "<|im_end|><|im_user|>user<|im_middle|>hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>"
    )


def test_kimi_tools_calls_and_results() -> None:
    text = render("kimi_k2", [HI, CALL, RESULT], {"tools": TOOLS})
    assert text.startswith('<|im_system|>tool_declare<|im_middle|>[{"type": "function"')
    assert (
        "<|im_assistant|>assistant<|im_middle|><think></think><|tool_calls_section_begin|>"
        '<|tool_call_begin|>functions.weather:0<|tool_call_argument_begin|>{"city": "Paris"}'
        "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.weather:0\nsun<|im_end|>"
    ) in text


def test_kimi_keeps_reasoning_after_the_last_user_turn() -> None:
    text = render("kimi_k2", [HI, HELLO])
    assert "<think>greet back</think>hello" in text


# ---------------------------------------------------------------- GLM 5.2


def test_glm_multi_turn_thinking_on_default_effort() -> None:
    assert render("glm45", [SYSTEM, HI, HELLO, AGAIN]) == (
        "[gMASK]<sop><|system|>Reasoning Effort: High<|system|>Be brief.<|user|>hi"
        "<|assistant|><think></think>hello<|user|>and now?<|assistant|><think>"
    )


def test_glm_thinking_off_drops_the_effort_line() -> None:
    assert render("glm45", [HI], {"enable_thinking": False}, {"reasoning_effort": "max"}) == (
        "[gMASK]<sop><|user|>hi<|assistant|><think></think>"
    )


def test_glm_effort_max() -> None:
    assert render("glm45", [HI], top={"reasoning_effort": "max"}).startswith(
        "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>"
    )


def test_glm_tools_calls_and_results() -> None:
    text = render("glm45", [HI, CALL, RESULT, RESULT], {"tools": TOOLS})
    assert "<tools>\n" + '{"type": "function", "function": {"name": "weather"' in text
    assert (
        "<|assistant|><think></think><tool_call>weather<arg_key>city</arg_key>"
        "<arg_value>Paris</arg_value></tool_call>"
        "<|observation|><tool_response>sun</tool_response><tool_response>sun</tool_response>"
        "<|assistant|><think>"
    ) in text


# ---------------------------------------------------------------- Gemma 4


def test_gemma_multi_turn_thinking_off() -> None:
    assert render("gemma4", [SYSTEM, HI, HELLO, AGAIN]) == (
        "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nhi<turn|>\n"
        "<|turn>model\nhello<turn|>\n<|turn>user\nand now?<turn|>\n<|turn>model\n"
    )


def test_gemma_thinking_on_opens_the_system_turn() -> None:
    assert render("gemma4", [HI], {"enable_thinking": True}) == (
        "<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n"
    )


def test_gemma_tools_calls_and_results_stay_in_one_model_turn() -> None:
    text = render("gemma4", [HI, CALL, RESULT], {"tools": TOOLS})
    assert (
        '<|tool>declaration:weather{description:<|"|>Weather now<|"|>,parameters:{type:'
        '<|"|>object<|"|>,properties:{city:{type:<|"|>string<|"|>}}}}<tool|>'
    ) in text
    assert text.endswith(
        '<|turn>model\n<|tool_call>call:weather{city:<|"|>Paris<|"|>}<tool_call|>'
        '<|tool_response>response:weather{value:<|"|>sun<|"|>}<tool_response|>'
    )


# ---------------------------------------------------------------- MiniMax M3


@pytest.mark.parametrize(
    ("mode", "tail"),
    [("adaptive", ""), ("enabled", "<mm:think>"), ("disabled", "<mm:think></mm:think>")],
)
def test_minimax_generation_prompt_per_mode(mode, tail) -> None:
    assert render("minimax_m3", [SYSTEM, HI, HELLO, AGAIN], {"thinking_mode": mode}) == (
        "]~!b[]~b]system\nBe brief.[e~[\n]~b]user\nhi[e~[\n]~b]ai\nhello[e~[\n"
        "]~b]user\nand now?[e~[\n]~b]ai\n" + tail
    )


def test_minimax_tools_calls_and_results() -> None:
    text = render("minimax_m3", [HI, CALL, RESULT, RESULT], {"tools": TOOLS})
    assert text.startswith("]~!b[]~b]system\nYou are a helpful assistant.\n\n# Tools\n")
    ns = "]<]minimax[>["
    assert (
        f']~b]ai\n{ns}<tool_call>\n{ns}<invoke name="weather">{ns}<city>Paris{ns}</city>'
        f"{ns}</invoke>\n{ns}</tool_call>[e~[\n"
        "]~b]tool\n<response>sun</response>\n<response>sun</response>[e~[\n]~b]ai\n"
    ) in text


def test_request_content_is_not_template_code() -> None:
    for family in FAMILIES.values():
        text = render(
            family.name, [{"role": "user", "content": "{{ 7 * 7 }}{% if 1 %}x{% endif %}"}]
        )
        assert "{{ 7 * 7 }}" in text and "49" not in text


def test_smollm2_renders_tools_calls_and_results_in_hermes_format() -> None:
    text = render("smollm2", [HI, CALL, RESULT], {"tools": TOOLS})
    assert text.startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "\n\n# Tools\n"
    )
    assert '<tools>\n{"type": "function", "function": {"name": "weather"' in text
    assert text.count("<tool_call>") == 3  # twice in the format description, once the call
    assert '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert text.endswith(
        "<|im_start|>user\n<tool_response>\nsun\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_smollm2_without_tools_is_unchanged_by_them() -> None:
    assert "# Tools" not in render("smollm2", [SYSTEM, HI])
