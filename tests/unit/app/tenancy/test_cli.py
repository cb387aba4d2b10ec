"""`lilac-serve keys` and a key's weight: `create --weight`, `update --weight`, the
weight column of `keys list`, and a weight a key may not have refused as a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.launch.cli import main


def keys(data_dir: Path, *args: str) -> int:
    return main(["keys", *args, "--data-dir", str(data_dir)])


def listed(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    assert keys(data_dir, "list", "--format", "json") == 0
    return {key["name"]: key for key in json.loads(capsys.readouterr().out)}


def test_create_update_and_list_a_keys_weight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert keys(tmp_path, "create", "--name", "heavy", "--weight", "2.5") == 0
    assert keys(tmp_path, "create", "--name", "plain") == 0
    capsys.readouterr()
    made = listed(tmp_path, capsys)
    assert made["heavy"]["weight"] == 2.5 and made["plain"]["weight"] == 1.0
    heavy = str(made["heavy"]["id"])
    assert keys(tmp_path, "update", heavy, "--weight", "4") == 0
    assert json.loads(capsys.readouterr().out)["weight"] == 4.0
    assert keys(tmp_path, "update", heavy, "--rpm", "10") == 0  # the weight is kept
    assert json.loads(capsys.readouterr().out)["weight"] == 4.0
    assert keys(tmp_path, "list") == 0
    header, *rows = capsys.readouterr().out.splitlines()
    at = header.index("  weight  ") + 2  # the columns are aligned
    weights = {row.split()[1]: row[at:].split()[0] for row in rows}
    assert weights == {"heavy": "4", "plain": "1"}


@pytest.mark.parametrize("weight", ["0", "-1", "x", "1e9", "nan"])
def test_a_weight_a_key_may_not_have_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], weight: str
) -> None:
    assert keys(tmp_path, "create", "--name", "k") == 0
    capsys.readouterr()
    key_id = str(listed(tmp_path, capsys)["k"]["id"])
    for args in (("create", "--name", "bad"), ("update", key_id)):
        with pytest.raises(SystemExit) as exit_:
            keys(tmp_path, *args, "--weight", weight)
        assert exit_.value.code == 2 and "--weight" in capsys.readouterr().err
    assert [key["weight"] for key in listed(tmp_path, capsys).values()] == [1.0]
