"""GLM 5.x (Z.ai; GLM 5.2 here, the GLM-4.5 lineage): `[gMASK]<sop><|user|>...<|assistant|>`.

Thinking is on by default: the generation prompt opens `<think>`; with
`enable_thinking: false` it writes an empty `<think></think>`. `reasoning_effort`
(`high`, the default, or `max`) becomes a `Reasoning Effort:` system line while
thinking is on. GLM 5.x sometimes reasons anyway with thinking off and closes with a
bare `</think>`: that leaked prefix is dropped from the content. Tools are declared
unwrapped (the function object, without `strict`). Tool calls come in
`<tool_call>...</tool_call>`, arguments as `<arg_key>`/`<arg_value>` pairs. Binds
GLM 5.2 only: GLM-4.5 to 4.7, 5 and 5.1 write other prompts.
"""

from engine.families.base import Family, Toggle

FAMILY = Family(
    name="glm45",
    template="glm45",
    toggles=(
        Toggle(key="enable_thinking", default=True),
        Toggle(
            key="reasoning_effort",
            default="high",
            values=("high", "max"),
            top_level=("reasoning_effort",),
            needs_reasoning=True,
            # OpenAI's levels: "none" turns thinking off (engine.families.base.resolve).
            aliases=(("minimal", "high"), ("low", "high"), ("medium", "high"), ("xhigh", "max")),
        ),
    ),
    reasoning_parser="glm45",
    tool_parser="glm47",
    special_tokens=(
        "[gMASK]",
        "<sop>",
        "<|system|>",
        "<|user|>",
        "<|assistant|>",
        "<|observation|>",
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
    ),
    name_patterns=("glm-5.2", "glm5.2", "glm-5p2", "glm_5.2"),
    # No model types: GLM-4.5 to 4.7 share `glm4_moe`, GLM 5 to 5.2 `glm_moe_dsa`.
    other_versions=("glm-4", "glm4", "glm-5", "glm5"),
    turn_ends=("<|user|>", "<|observation|>"),
    drop_leak_through="</think>",
    assistant_start="<|assistant|>",
)
