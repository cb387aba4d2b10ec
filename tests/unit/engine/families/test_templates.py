"""Each family's template on the points where a published format is easy to get wrong
(the full comparison with the published templates is test_fidelity.py)."""

import pytest

from engine.families import FAMILIES, get, resolve
from engine.templates import load_template_file, render_chat

SYSTEM = {"role": "system", "content": "Be brief."}
HI = {"role": "user", "content": "hi"}
HELLO = {"role": "assistant", "content": "hello", "reasoning_content": "greet back"}
AGAIN = {"role": "user", "content": "and now?"}
CALL = {
    "role": "assistant",
    "content": "",
    "reasoning_content": "look it up",
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
    family = get(name)
    variables, _ = resolve(family, kwargs or {}, top or {})
    if variables.get("tools") and family.template_context is not None:
        variables.update(family.template_context(variables["tools"]))
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


def test_kimi_declares_tools_in_typescript_and_replays_kimi_ids() -> None:
    text = render("kimi_k2", [HI, CALL, {**RESULT, "name": None}], {"tools": TOOLS})
    assert text.startswith(
        "<|im_system|>tool_declare<|im_middle|># Tools\n\n## functions\nnamespace functions {\n"
        "// Weather now\ntype weather = (_: {\n  city?: string\n}) => any;\n}\n<|im_end|>"
    )
    assert (
        "<|im_assistant|>assistant<|im_middle|><think>look it up</think>"
        "<|tool_calls_section_begin|>"
        '<|tool_call_begin|>functions.weather:0<|tool_call_argument_begin|>{"city": "Paris"}'
        "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.weather:0\nsun<|im_end|>"
    ) in text


def test_kimi_keeps_reasoning_after_the_last_answer_without_tool_calls() -> None:
    # HELLO answered without tool calls: its reasoning is history; the call after it is not.
    text = render("kimi_k2", [HI, HELLO, AGAIN, CALL, RESULT])
    assert "<think></think>hello" in text and "<think>look it up</think>" in text


def test_kimi_thinking_off_drops_the_current_turns_reasoning() -> None:
    text = render("kimi_k2", [HI, CALL, RESULT], {"thinking": False})
    assert "look it up" not in text and text.endswith("<think></think>")


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


def test_glm_declares_tools_unwrapped_without_strict() -> None:
    strict = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]
    text = render("glm45", [HI, CALL, RESULT, RESULT], {"tools": strict})
    assert '<tools>\n{"name": "weather", "description": "Weather now", "parameters": {' in text
    assert "strict" not in text
    assert "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>..." in text
    assert (
        "<|assistant|><think>look it up</think><tool_call>weather<arg_key>city</arg_key>"
        "<arg_value>Paris</arg_value></tool_call>"
        "<|observation|><tool_response>sun</tool_response><tool_response>sun</tool_response>"
        "<|assistant|><think>"
    ) in text


# ---------------------------------------------------------------- Gemma 4


def test_gemma_multi_turn_thinking_off_prefills_an_empty_thought() -> None:
    assert render("gemma4", [SYSTEM, HI, HELLO, AGAIN]) == (
        "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nhi<turn|>\n"
        "<|turn>model\nhello<turn|>\n<|turn>user\nand now?<turn|>\n"
        "<|turn>model\n<|channel>thought\n<channel|>"
    )


def test_gemma_thinking_on_opens_the_system_turn() -> None:
    assert render("gemma4", [HI], {"enable_thinking": True}) == (
        "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n"
    )


def test_gemma_tools_in_gemma_notation_responses_named_by_function() -> None:
    text = render("gemma4", [HI, CALL, RESULT], {"tools": TOOLS})
    assert (
        '<|tool>declaration:weather{description:<|"|>Weather now<|"|>,parameters:{properties:'
        '{city:{type:<|"|>STRING<|"|>}},type:<|"|>OBJECT<|"|>}}<tool|>'
    ) in text
    unnamed = {**RESULT, "name": None}  # the name comes from the call the id points to
    assert render("gemma4", [HI, CALL, unnamed], {"tools": TOOLS}) == text
    assert text.endswith(
        "<|turn>model\n<|channel>thought\nlook it up\n<channel|>"
        '<|tool_call>call:weather{city:<|"|>Paris<|"|>}<tool_call|>'
        '<|tool_response>response:weather{value:<|"|>sun<|"|>}<tool_response|>'
    )


# ---------------------------------------------------------------- MiniMax M3

MINIMAX_MODES = {
    "adaptive": "You are encouraged to think for complex decision-making",
    "enabled": "You MUST think step by step",
    "disabled": "Do not output any thinking process.",
}


@pytest.mark.parametrize(
    ("mode", "tail"),
    [("adaptive", ""), ("enabled", "<mm:think>"), ("disabled", "</mm:think>")],
)
def test_minimax_states_the_mode_and_prefills(mode, tail) -> None:
    text = render("minimax_m3", [SYSTEM, HI, HELLO, AGAIN], {"thinking_mode": mode})
    assert text.startswith("]~!b[]~b]system\nYour model version is MiniMax-M3")
    assert "<thinking_instructions>\n" in text
    assert f"Current thinking mode: {mode}. {MINIMAX_MODES[mode]}" in text
    assert text.endswith(
        "[e~[\n]~b]developer\nBe brief.[e~[\n]~b]user\nhi[e~[\n"
        "]~b]ai\n<mm:think>greet back</mm:think>hello[e~[\n"
        "]~b]user\nand now?[e~[\n]~b]ai\n" + tail
    )


def test_minimax_tools_calls_and_results() -> None:
    plain_hello = {"role": "assistant", "content": "hello"}
    messages = [HI, plain_hello, AGAIN, CALL, RESULT, RESULT]
    text = render("minimax_m3", messages, {"tools": TOOLS})
    assert "[e~[\n]~b]developer\nYou are a helpful assistant.\n\n# Tools\n" in text
    assert '<tool>{"name": "weather", "description": "Weather now"' in text
    ns = "]<]minimax[>["
    assert "]~b]ai\n</mm:think>hello[e~[" in text  # no reasoning: the bare end marker
    assert (
        f']~b]ai\n<mm:think>look it up</mm:think>{ns}<tool_call>\n{ns}<invoke name="weather">'
        f"{ns}<city>Paris{ns}</city>{ns}</invoke>\n{ns}</tool_call>[e~[\n"
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
