import json
from pathlib import Path

import pytest

from engine.checkpoint import (
    GGUF_SHA256,
    MARKER,
    MARKER_VERSION,
    ModelPreparationError,
    check_gguf_digest,
    is_prepared,
    resolve_model,
)


def write_checkpoint(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    marker = {
        "version": MARKER_VERSION,
        "gguf_sha256": GGUF_SHA256,
        "files": {"model.safetensors": {"size": 10}},
    }
    (folder / MARKER).write_text(json.dumps(marker))


def test_prepared_checkpoint_is_recognised(tmp_path: Path) -> None:
    write_checkpoint(tmp_path)
    assert is_prepared(tmp_path)


def test_truncated_file_is_not_prepared(tmp_path: Path) -> None:
    write_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert not is_prepared(tmp_path)


def test_missing_marker_is_not_prepared(tmp_path: Path) -> None:
    assert not is_prepared(tmp_path)


def test_resolve_local_folder_and_hub_id(tmp_path: Path) -> None:
    assert resolve_model(str(tmp_path))[0] == str(tmp_path.resolve())
    assert resolve_model("Qwen/Qwen3-0.6B") == ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B")


def test_checkpoint_of_another_gguf_is_not_prepared(tmp_path: Path) -> None:
    write_checkpoint(tmp_path)
    marker = json.loads((tmp_path / MARKER).read_text())
    marker["gguf_sha256"] = "0" * 64
    (tmp_path / MARKER).write_text(json.dumps(marker))
    assert not is_prepared(tmp_path)


def test_gguf_digest_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"not the model")
    with pytest.raises(ModelPreparationError, match="pinned") as caught:
        check_gguf_digest(fake)
    assert GGUF_SHA256 in str(caught.value)


def test_prepared_default_model_matches_the_pin() -> None:
    """The checkpoint the real-engine tests use was converted from the pinned GGUF."""
    from engine.checkpoint import default_model_dir

    recorded = json.loads((default_model_dir() / MARKER).read_text())
    assert recorded["gguf_sha256"] == GGUF_SHA256
