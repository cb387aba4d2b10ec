"""The side-by-side ceiling: each round's two runs get different cores, swapped the next
round (or share one, `--same-core`), and the summary's ratios are keys on over keys
off."""

from __future__ import annotations

import argparse
from typing import Any

from perf.load.frontend_pair import ceiling_argv, core_of, summary


def side(tokens: int, with_writer: int, core: int) -> dict[str, Any]:
    return {
        "tokens_per_cpu_s": tokens,
        "tokens_per_cpu_s_with_writer": with_writer,
        "core": core,
        "load_avg_1m": 1.5,
    }


def test_the_ceiling_runs_with_their_own_ports_and_files() -> None:
    args = argparse.Namespace(duration=3.0, only="non-streamed", tenants=64)
    off = ceiling_argv(args, "off", False, 8011)
    on = ceiling_argv(args, "on", True, 8012)
    assert off[1:4] == on[1:4] == ["-m", "perf", "frontend-ceiling"]
    assert "--keys" in on and "--keys" not in off
    assert on[on.index("--tenants") + 1] == "64" and "--tenants" not in off
    assert off[off.index("--tag") + 1] == "pair-off" and on[on.index("--tag") + 1] == "pair-on"
    assert off[off.index("--port") + 1] == "8011" and on[on.index("--port") + 1] == "8012"
    assert on[on.index("--only") + 1] == "non-streamed"


def test_the_summary_gives_keys_on_over_keys_off() -> None:
    rounds = [
        {"off": side(100, 100, 0), "on": side(90, 80, 1)},
        {"off": side(200, 200, 1), "on": side(210, 190, 0)},
        {"off": side(100, 100, 0), "on": side(96, 90, 1)},
    ]
    text = summary(rounds)
    assert "| 1 | 0 / 1 | 1.5 | 100 | 90 | 0.900 | 0.800 |" in text
    assert "| 2 | 1 / 0 | 1.5 | 200 | 210 | 1.050 | 0.950 |" in text
    assert "worker: median 0.960, mean 0.970, geometric mean 0.968 over 3 rounds" in text
    assert "with the writer: median 0.900, mean 0.883, geometric mean 0.881 over 3 rounds" in text


def test_each_side_has_its_core_swapped_each_round_or_both_share_one() -> None:
    cores = (0, 1)
    apart = [(core_of(cores, n, 0, False), core_of(cores, n, 1, False)) for n in range(3)]
    assert apart == [(0, 1), (1, 0), (0, 1)]
    together = [(core_of(cores, n, 0, True), core_of(cores, n, 1, True)) for n in range(3)]
    assert together == [(0, 0), (1, 1), (0, 0)]
