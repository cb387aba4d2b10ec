import json
from pathlib import Path

from engine.checkpoint import MARKER, MARKER_VERSION, is_prepared, resolve_model


def write_checkpoint(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    marker = {"version": MARKER_VERSION, "files": {"model.safetensors": {"size": 10}}}
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
