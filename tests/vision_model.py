"""A tiny Idefics3 (SmolVLM-style) checkpoint with random weights, for the vision tests.

No small vision-language model is reachable here (no model hub), so the tests make one:
an Idefics3 config with a 1-layer vision tower and a 2-layer Llama text model, the
SmolLM2 tokenizer with Idefics3's image tokens added, an Idefics3 image processor
configured by hand (no image splitting, 64x64 pixels), and random weights written as
safetensors. vLLM serves it like SmolVLM: the output is gibberish, but images go through
the real multi-modal path (processor, vision tower, placeholder expansion), and the image
tokens count in the prompt.

Idefics3 rather than LLaVA: vLLM's llava module imports the Pixtral image processor,
which needs torchvision, and this environment has none that matches its torch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

IMAGE_SIZE = 64
PATCH_SIZE = 8
SCALE_FACTOR = 2
# Idefics3 merges SCALE_FACTOR**2 patches into one token; no image splitting here.
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
# What one image costs in the prompt: <fake_token_around_image> <global-img>
# <image> * IMAGE_SEQ_LEN <fake_token_around_image>, in place of one `<image>`.
IMAGE_PROMPT_TOKENS = IMAGE_SEQ_LEN + 3
IMAGE_TOKEN = "<image>"
MARKER = "lilac-tiny-vlm.json"
VERSION = 1

# SmolLM2's ChatML, with image parts written as `<image>` where they stand.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tiny_vlm(target: Path, tokenizer_source: Path) -> Path:
    """Write the checkpoint into `target` (idempotent); `tokenizer_source` is a folder
    with SmolLM2's tokenizer (the prepared default model)."""
    marker = target / MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("version") == VERSION:
        return target
    import torch
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    grid = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tokenizer.add_special_tokens(
        {
            "additional_special_tokens": [
                "<fake_token_around_image>",
                IMAGE_TOKEN,
                "<end_of_utterance>",
                "<global-img>",
                *grid,
            ]
        }
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": IMAGE_SIZE},
        max_image_size={"longest_edge": IMAGE_SIZE},
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "tie_word_embeddings": True,
        },
        vision_config={
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        pad_token_id=tokenizer.pad_token_id,
        scale_factor=SCALE_FACTOR,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config).to(torch.float32)
    model.save_pretrained(target, safe_serialization=True)
    processor.save_pretrained(target)
    tokenizer.save_pretrained(target)
    marker.write_text(json.dumps({"version": VERSION, "image_seq_len": IMAGE_SEQ_LEN}))
    return target


if __name__ == "__main__":
    import sys

    from engine.checkpoint import default_model_dir

    print(build_tiny_vlm(Path(sys.argv[1]), default_model_dir()))
