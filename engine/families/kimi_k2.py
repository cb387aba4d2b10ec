"""Kimi K2.x (Moonshot AI; K2.6 here): `<|im_user|>user<|im_middle|>...<|im_end|>` turns.

`thinking` (a boolean, in `chat_template_kwargs` or at the top level) is on by default.
The generation prompt opens `<think>` when thinking is on and writes an empty
`<think></think>` when it is off, so the model's output starts inside the reasoning
block: vLLM's `kimi_k2` parser expects exactly that. `thinking: false` also drops the
reasoning of the current turn (the turns after the last answer without tool calls);
`preserve_thinking: true` keeps earlier turns' reasoning. Tools are declared as a
TypeScript `namespace functions` block (`kimi_tools`, as Moonshot's tokenizer does).
Tool calls come in `<|tool_calls_section_begin|>...<|tool_calls_section_end|>`, with
Kimi's own ids, `functions.NAME:IDX`, kept end to end. Binds K2.5 and K2.6 only.
"""

from engine.families import kimi_tools
from engine.families.base import Family, Toggle

FAMILY = Family(
    name="kimi_k2",
    template="kimi_k2",
    toggles=(Toggle(key="thinking", default=True),),
    reasoning_parser="kimi_k2",
    tool_parser="kimi_k2",
    special_tokens=(
        "<|im_system|>",
        "<|im_user|>",
        "<|im_assistant|>",
        "<|im_middle|>",
        "<|im_end|>",
        "<think>",
        "</think>",
    ),
    name_patterns=("kimi-k2.6", "kimi-k2.5", "kimi_k2.6", "kimi_k2.5", "kimi-k2p6", "kimi-k2p5"),
    model_types=("kimi_k25",),  # K2.5 and K2.6 (K2 and K2-Thinking are `kimi_k2`)
    other_versions=("kimi-k2", "kimi_k2"),
    turn_ends=("<|im_end|>",),
    template_context=kimi_tools.template_context,
    assistant_start="<|im_assistant|>",
)
