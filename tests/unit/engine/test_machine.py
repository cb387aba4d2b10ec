"""The KV cache a CPU engine gets when the user did not size it: half of the memory left
after the weights and a margin, within bounds; and the machine as this process sees it."""

from __future__ import annotations

import os

import pytest

from app.config.settings import Settings
from app.launch.served_models import cpu_kv_cache_gib as served_kv_cache_gib
from engine import machine
from engine.machine import GIB, Machine, cpu_kv_cache_gib, cpu_threads_bind, weights_bytes


def test_half_of_what_is_left_after_weights_and_margin() -> None:
    box = Machine(cores=2, total_bytes=23 * GIB, available_bytes=15 * GIB)
    # margin max(2, 2.3) GiB; (15 - 1 - 2.3) / 2 = 5.85 -> 5
    assert cpu_kv_cache_gib(box, weights=1 * GIB) == 5


def test_the_margin_is_at_least_two_gib_and_the_cache_at_least_one() -> None:
    small = Machine(cores=2, total_bytes=8 * GIB, available_bytes=4 * GIB)
    assert cpu_kv_cache_gib(small, weights=0) == 1  # (4 - 2) / 2
    starved = Machine(cores=2, total_bytes=8 * GIB, available_bytes=1 * GIB)
    assert cpu_kv_cache_gib(starved, weights=2 * GIB) == 1


def test_a_large_machine_is_capped() -> None:
    big = Machine(cores=192, total_bytes=2048 * GIB, available_bytes=2000 * GIB)
    assert cpu_kv_cache_gib(big, weights=140 * GIB) == 64


def test_weights_are_the_checkpoint_files(tmp_path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "config.json").write_text("{}")
    assert weights_bytes(str(tmp_path)) == 1000
    assert weights_bytes("HuggingFaceTB/SmolLM2-135M-Instruct") == 0  # a hub id


def test_the_probe_reads_this_machine() -> None:
    found = machine.probe()
    assert found.cores == len(os.sched_getaffinity(0))
    assert 0 < found.available_bytes <= found.total_bytes


def test_the_flag_then_the_variable_then_the_computed_size(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert served_kv_cache_gib(Settings(cpu_kvcache_space_gib=3), str(tmp_path)) == 3
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")
    assert served_kv_cache_gib(Settings(), str(tmp_path)) == 7
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    expected = cpu_kv_cache_gib(machine.probe(), 0)
    # Free memory moves between the two reads: within a GiB of each other.
    assert abs(served_kv_cache_gib(Settings(), str(tmp_path)) - expected) <= 1


def test_a_pool_of_engines_splits_the_share() -> None:
    box = Machine(cores=2, total_bytes=24 * GIB, available_bytes=16 * GIB)
    one = cpu_kv_cache_gib(box, weights=0)
    three = cpu_kv_cache_gib(box, weights=0, engines=3)
    assert one == 6  # (16 - 2.4) / 2
    assert three == 2  # the same share, split three ways
    assert 3 * three <= one


def test_one_engine_on_a_small_box_binds_every_core() -> None:
    two = Machine(cores=2, total_bytes=8 * GIB, available_bytes=4 * GIB, cpu_ids=(0, 1))
    assert cpu_threads_bind(two, workers=1, engines=1) == "0,1"
    pinned = Machine(cores=1, total_bytes=8 * GIB, available_bytes=4 * GIB, cpu_ids=(3,))
    assert cpu_threads_bind(pinned, workers=1, engines=1) == "3"


def test_larger_boxes_pools_and_split_models_keep_vllms_auto() -> None:
    eight = tuple(range(8))
    big = Machine(cores=8, total_bytes=64 * GIB, available_bytes=60 * GIB, cpu_ids=eight)
    assert cpu_threads_bind(big, workers=1, engines=1) is None
    two = Machine(cores=2, total_bytes=8 * GIB, available_bytes=4 * GIB, cpu_ids=(0, 1))
    assert cpu_threads_bind(two, workers=1, engines=2) is None
    assert cpu_threads_bind(two, workers=2, engines=1) is None


def test_the_users_binding_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.launch.served_models import bind_cpu_threads

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    monkeypatch.setattr(
        machine,
        "probe",
        lambda: Machine(cores=2, total_bytes=8 * GIB, available_bytes=4 * GIB, cpu_ids=(0, 1)),
    )
    bind_cpu_threads(Settings(), engines=1)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    bind_cpu_threads(Settings(), engines=1)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"
