"""A copy of the SmolLM2 checkpoint whose tokenizer knows every family's markers.

There are no Kimi, GLM, Gemma or MiniMax weights here, so the family tests serve the
SmolLM2 weights under each family's template. SmolLM2's vocabulary has no room to grow
(the embedding has exactly 49152 rows), but ids 3..16 are StarCoder special tokens a
chat model never uses (`<repo_name>`, `<jupyter_code>`...): the copy renames them to
the families' markers, so each marker is one token, as in the real tokenizers. The
weights are symlinked, not copied.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# The markers the families' reasoning parsers look up as single tokens, plus turn
# boundaries they use to find where the current turn starts.
MARKERS = (
    "<think>",
    "</think>",
    "<|channel>",
    "<channel|>",
    "<mm:think>",
    "</mm:think>",
    "<|turn>",
    "<turn|>",
    "<|tool_call>",
    "<tool_call|>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<|observation|>",
)
FIRST_FREE_ID = 3  # 0..2 are <|endoftext|>, <|im_start|>, <|im_end|>


def make_family_checkpoint(source: Path, target: Path) -> Path:
    """Write the copy into `target` (created) and return it."""
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name == "tokenizer.json":
            continue
        if item.suffix == ".safetensors":
            (target / item.name).symlink_to(item.resolve())
        elif item.is_file():
            shutil.copy(item, target / item.name)
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    renames = {FIRST_FREE_ID + i: marker for i, marker in enumerate(MARKERS)}
    vocab = tokenizer["model"]["vocab"]
    for added in tokenizer["added_tokens"]:
        marker = renames.get(added["id"])
        if marker is not None:
            del vocab[added["content"]]
            vocab[marker] = added["id"]
            added["content"] = marker
            # Not "special": xgrammar then lets a regex produce the marker as one token.
            added["special"] = False
    (target / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    return target
