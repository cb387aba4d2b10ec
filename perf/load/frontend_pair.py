"""Keys off beside keys on, at the same time: two frontend ceilings, one core each.

    python -m perf frontend-pair [--rounds 10] [--duration 4] [--only non-streamed]
        [--same-core] [--tenants N]

Each round runs `python -m perf frontend-ceiling` twice at once, keys off and keys on
(`--keys`), each pinned with its load client and its server to a core of its own; the
two swap cores every round. On a shared machine a neighbour's load changes one run of
the ceiling from the next by a fifth or more; run side by side, both sides of a round
get the same neighbours, and swapping cores cancels what differs between the cores.
Prints each round's figures and the median, mean and geometric mean of keys on ÷ keys
off, for the worker's CPU and for the worker and its usage writer together.

With `--same-core`, both sides run on one core at once (taking turns on it, each with
its client), the other core the next round: they share the core's caches and its
neighbours as well as the time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from perf.harness.results import output
from perf.load.frontend_ceiling import SCENARIOS, output_file

OUT = output("frontend-pair")
SIDES = (("off", False), ("on", True))


def two_cores() -> tuple[int, int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("frontend-pair needs two cores")
    return cores[0], cores[1]


def core_of(cores: tuple[int, int], number: int, side: int, same_core: bool) -> int:
    """Round `number`'s core for side 0 (keys off) or 1 (keys on): each its own, swapped
    every round; with `same_core`, one for both, the other one the next round."""
    return cores[number % 2] if same_core else cores[(number + side) % 2]


def ceiling_argv(args: argparse.Namespace, side: str, keys: bool, port: int) -> list[str]:
    argv = [sys.executable, "-m", "perf", "frontend-ceiling", "--tag", f"pair-{side}"]
    argv += ["--port", str(port), "--duration", str(args.duration), "--only", args.only]
    return argv + (["--keys", "--tenants", str(args.tenants)] if keys else [])


def run_round(args: argparse.Namespace, number: int) -> dict[str, dict[str, Any]]:
    """Both sides at once; each side's figures (the ceiling's JSON) and its core."""
    cores = two_cores()
    running = []
    for index, (side, keys) in enumerate(SIDES):
        core = core_of(cores, number, index, args.same_core)
        log = (OUT / f"round-{number}-{side}.log").open("w")
        process = subprocess.Popen(
            ceiling_argv(args, side, keys, args.port + index),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}),
        )
        running.append((side, core, process, log))
    figures = {}
    for side, core, process, log in running:
        code = process.wait()
        log.close()
        if code != 0:
            raise SystemExit(f"round {number}, keys {side}: exit {code} (see {log.name})")
        figures_file = output_file("frontend_ceiling", f"pair-{side}", ".json")
        (result,) = json.loads(figures_file.read_text())
        figures[side] = {**result, "core": core}
    return figures


def ratios(rounds: list[dict[str, dict[str, Any]]], field: str) -> list[float]:
    return [r["on"][field] / r["off"][field] for r in rounds]


def summary(rounds: list[dict[str, dict[str, Any]]]) -> str:
    lines = ["| round | core off / on | load | keys off | keys on | on ÷ off | with the writer |"]
    lines.append("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    worker = ratios(rounds, "tokens_per_cpu_s")
    writer = ratios(rounds, "tokens_per_cpu_s_with_writer")
    for number, (r, ratio, with_writer) in enumerate(zip(rounds, worker, writer, strict=True)):
        off, on = r["off"], r["on"]
        lines.append(
            f"| {number + 1} | {off['core']} / {on['core']} | {on['load_avg_1m']} "
            f"| {off['tokens_per_cpu_s']:,} | {on['tokens_per_cpu_s']:,} "
            f"| {ratio:.3f} | {with_writer:.3f} |"
        )
    for name, values in (("worker", worker), ("with the writer", writer)):
        lines.append(
            f"\nkeys on ÷ keys off, {name}: median {statistics.median(values):.3f}, "
            f"mean {statistics.mean(values):.3f}, geometric mean "
            f"{statistics.geometric_mean(values):.3f} over {len(values)} rounds"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per run")
    parser.add_argument("--only", choices=SCENARIOS, default=SCENARIOS[1])
    parser.add_argument("--port", type=int, default=8011, help="keys off's; keys on's is next")
    parser.add_argument(
        "--same-core",
        action="store_true",
        help="both sides on one core (taking turns on it), the other core each next round",
    )
    parser.add_argument(
        "--tenants", type=int, default=1, metavar="N", help="keys the keys-on clients send"
    )
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    rounds = []
    for number in range(args.rounds):
        rounds.append(run_round(args, number))
        off, on = rounds[-1]["off"], rounds[-1]["on"]
        print(
            f"round {number + 1}: keys off {off['tokens_per_cpu_s']:,}, keys on "
            f"{on['tokens_per_cpu_s']:,} tokens per CPU second (load {on['load_avg_1m']})",
            flush=True,
        )
    tenants = f", keys on with {args.tenants} keys" if args.tenants > 1 else ""
    text = f"{args.only}, {args.duration:g} s a run{tenants}\n\n{summary(rounds)}"
    print(text)
    (OUT / f"frontend_pair-{args.only}.md").write_text(text + "\n")
    (OUT / f"frontend_pair-{args.only}.json").write_text(json.dumps(rounds, indent=1))
    return 0
