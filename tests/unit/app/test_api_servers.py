"""Several frontend processes sharing one engine core: the client index each worker
claims (a `flock` on a slot file, held by the live process only), its share of the
budgets, its own usage spool, and the start-up refusals of what is not shared yet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.config.sources import parse_args
from app.launch import api_servers
from app.launch.api_server_checks import refusal
from app.launch.api_server_launch import workers_kill_timeout_s
from app.launch.api_servers import Slot, claim_slot, per_process, share, spool_name
from app.launch.cli import main
from app.services.generation.admission import policy_from
from engine.admission.runtime import stop_wait_limit_s
from engine.vllm_backend.config import Frontend

ROOT = Path(__file__).resolve().parents[3]

HOLD = """
import sys, time
from pathlib import Path
from app.launch.api_servers import claim_slot
slot = claim_slot(Path(sys.argv[1]), int(sys.argv[2]), timeout_s=5)
print(slot.index, flush=True)
time.sleep(60)
"""


def holder(run_dir: Path, count: int) -> tuple[subprocess.Popen[str], int]:
    """Another process that claims a slot and keeps it; (the process, its index)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir), str(count)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def test_live_processes_hold_distinct_slots(tmp_path: Path) -> None:
    first, a = holder(tmp_path, 2)
    second, b = holder(tmp_path, 2)
    try:
        assert {a, b} == {0, 1}
        with pytest.raises(RuntimeError, match="all 2 API-server slots"):
            claim_slot(tmp_path, 2, timeout_s=0.3)
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


def test_a_killed_workers_slot_is_claimed_by_the_next(tmp_path: Path) -> None:
    """A worker that dies without cleaning up (kill -9) leaves its slot free: the kernel
    drops the lock with the process, and a worker started again takes that index."""
    first, a = holder(tmp_path, 2)
    second, b = holder(tmp_path, 2)
    assert a != b
    try:
        first.send_signal(signal.SIGKILL)
        first.wait()
        slot = claim_slot(tmp_path, 2, timeout_s=5)
        assert slot.index == a
        assert slot_file_pid(tmp_path, a) == os.getpid()
        slot.release()
    finally:
        second.kill()
        second.wait()


def test_a_worker_started_again_waits_for_the_one_it_replaces(tmp_path: Path) -> None:
    first, a = holder(tmp_path, 1)
    started = time.monotonic()
    try:

        def stop_later() -> None:
            time.sleep(0.5)
            first.kill()

        threading.Thread(target=stop_later).start()
        slot = claim_slot(tmp_path, 1, timeout_s=10)
        assert slot.index == a == 0
        assert time.monotonic() - started >= 0.4
        slot.release()
    finally:
        first.kill()
        first.wait()


def test_two_claims_in_one_process_get_distinct_slots(tmp_path: Path) -> None:
    one, two = claim_slot(tmp_path, 2), claim_slot(tmp_path, 2)
    assert {one.index, two.index} == {0, 1}
    one.release()
    again = claim_slot(tmp_path, 2, timeout_s=0)
    assert again.index == one.index
    again.release()
    two.release()


def slot_file_pid(run_dir: Path, index: int) -> int:
    return int(api_servers.slot_path(run_dir, index).read_text())


def test_budgets_are_split_between_the_processes() -> None:
    settings = parse_args(
        [
            *("--max-concurrent", "9", "--max-queued", "64", "--throttled-concurrent", "1"),
            *("--kv-budget-tokens", "0", "--batch-concurrency", "4", "--replica-id", "box"),
        ]
    )
    mine = per_process(settings, Slot(index=1, count=2, fd=-1))
    assert (mine.max_concurrent, mine.max_queued, mine.throttled_concurrent) == (4, 32, 1)
    assert mine.kv_budget_tokens == 0  # the engine's own, which each process divides
    assert mine.batch_concurrency == 2
    assert mine.replica_id == "box-1"
    assert share(-1, 2) == -1 and share(1, 4) == 1


def test_granian_kills_a_worker_only_after_its_longest_drain() -> None:
    """The kill timeout is a safety net past the drain: a worker still finishing
    requests within the grace period is never killed."""
    settings = parse_args(["--grace-period", "60", "--probe-interval", "2"])
    limit = stop_wait_limit_s(policy_from(settings))
    assert limit >= 62
    assert workers_kill_timeout_s(settings) >= limit + 10
    shorter = parse_args(["--grace-period", "1"])
    assert workers_kill_timeout_s(shorter) < workers_kill_timeout_s(settings)


def test_each_process_spools_usage_to_a_file_of_its_own() -> None:
    default = Path("/data/usage-spool.jsonl")
    assert spool_name(default, 0) == default
    assert spool_name(default, 1) == Path("/data/usage-spool.api-server-1.jsonl")


def test_a_frontend_binds_the_sockets_at_its_index() -> None:
    shared = Frontend(("ipc:///a0", "ipc:///a1"), ("ipc:///b0", "ipc:///b1"))
    assert shared.at(1).client_addresses() == {
        "input_address": "ipc:///a1",
        "output_address": "ipc:///b1",
    }
    with pytest.raises(ValueError):
        shared.at(2)


def test_one_process_is_refused_nothing() -> None:
    assert refusal(parse_args(["--model", "A", "--model", "B", "--release-memory"])) is None


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--model", "A", "--model", "B"], "several models"),
        (["--memory-budget-gib", "4"], "--memory-budget-gib"),
        (["--gpu-probe", "scripted:/tmp/x"], "--gpu-probe none"),
        (["--lending-windows", "mon 00:00-24:00"], "--lending-windows"),
        (["--data-parallel-size", "2"], "--data-parallel-size"),
        (["--auth", "keys"], "PostgreSQL"),
        (["--api-server-count", "0"], "1 or more"),
    ],
)
def test_what_several_processes_cannot_share_is_refused(
    flags: list[str], named: str, tmp_path: Path
) -> None:
    argv = ["--api-server-count", "2", "--data-dir", str(tmp_path), *flags]
    problem = refusal(parse_args(argv))
    assert problem is not None and named in problem


def test_a_model_that_sleeps_when_idle_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "lilac.toml"
    config.write_text('[[models]]\nmodel = "/m"\nkeep_alive = 60\n')
    problem = refusal(parse_args(["--api-server-count", "2", "--config", str(config)]))
    assert problem is not None and "keep_alive" in problem


def test_keys_on_postgresql_are_accepted() -> None:
    argv = ["--api-server-count", "2", "--auth", "keys"]
    settings = parse_args([*argv, "--database-url", "postgresql://u@localhost/db"])
    assert refusal(settings) is None


def test_the_command_refuses_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--api-server-count", "2", "--model", "A", "--model", "B"]
    assert main([*argv, "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: --api-server-count 2 serves one model" in err
