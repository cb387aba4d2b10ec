"""Trace-driven simulation of the admission controller over a day, on simulated time.

The same `StateMachine` and `AdmissionQueue` the server runs are driven by a synthetic
day of owner activity and Poisson request arrivals; a simple batching model stands in
for the engine. Policies are compared on owner interference (seconds of inference while
the owner is active), goodput and rejected requests.

With batch demand (`BatchDemand`: batches of lines submitted at set hours), batch lines
run on the capacity the interactive requests leave, as the deferred-work runner does:
only while admission admits (cut, and run again from the start, when the owner
reclaims the GPU), never taking an interactive request's slot or slowing it (lines fill
only the streams the engine runs at full speed, `batch_tok_s / stream_tok_s`, within
the cap less its eighth of headroom; an interactive arrival over that cuts the newest).
Interactive figures are then the same as without batches; what the batches add is
goodput in the hours interactive traffic leaves spare.

    python -m perf admission-sim            # the tables in docs/admission.md
"""

from __future__ import annotations

import argparse
import math
import random
from collections import deque
from dataclasses import dataclass, field, replace

from engine.admission.lending import parse_windows
from engine.admission.policy import ADMITTING, Owner, Policy, State, StateMachine
from engine.admission.policy import classify as classify_sample
from engine.admission.probes import GpuSample, Segment, sample_at
from engine.admission.queue import AdmissionQueue, Ticket
from engine.errors import AdmissionRejected

DAY_S = 24 * 3600
# What counts as "the owner is active" when scoring, whatever the policy under test uses.
REFERENCE = Policy()


# ---------------------------------------------------------------- the day


def owner_day(seed: int) -> list[Segment]:
    """A workstation's day: a nightly backup, office hours of jobs (heavy), interactive
    use (light) and breaks, a few short evening jobs."""
    rng = random.Random(seed)
    events: list[tuple[float, float, float]] = [(2 * 3600, 20 * 60, 90.0)]  # backup
    t = 9 * 3600.0
    while t < 18 * 3600:
        kind = rng.random()
        if kind < 0.35:
            length, util = rng.uniform(5, 45) * 60, rng.uniform(60, 100)  # a job
        elif kind < 0.65:
            length, util = rng.uniform(5, 30) * 60, rng.uniform(5, 15)  # interactive
        else:
            length, util = rng.uniform(2, 25) * 60, 0.0  # a break
        events.append((t, length, util))
        t += length
    for hour in (19, 20, 21, 22):
        start = hour * 3600 + rng.uniform(0, 3000)
        events.append((start, rng.uniform(1, 6) * 60, 85.0))
    segments: list[Segment] = [Segment(0.0, GpuSample())]
    for start, length, util in sorted(events):
        if start <= segments[-1].start_s:
            start = segments[-1].start_s + 1.0
        segments.append(Segment(start, GpuSample(util, 4000.0 if util >= 50 else 0.0)))
        segments.append(Segment(start + length, GpuSample()))
    return _ordered(segments)


def _ordered(segments: list[Segment]) -> list[Segment]:
    result: list[Segment] = []
    for segment in segments:
        if result and segment.start_s <= result[-1].start_s:
            result[-1] = segment  # a later event overrides one at the same instant
        else:
            result.append(segment)
    return result


@dataclass(frozen=True)
class Workload:
    rate_per_s: float = 1.0  # mean arrivals (Poisson)
    prompt_tokens: tuple[int, int] = (100, 1500)
    output_tokens: tuple[int, int] = (50, 1500)
    clients: int = 8
    stream_tok_s: float = 40.0  # one request's decode speed alone
    batch_tok_s: float = 1200.0  # the engine's total decode speed when batching
    wake_s: float = 5.0  # engine back from sleep to first token (weights reloaded)
    # One more client that floods: requests of `flood_prompts` tickets each (a
    # multi-prompt completion), arriving at this rate, on top of the others.
    flood_rate_per_s: float = 0.0
    flood_prompts: int = 64


@dataclass(frozen=True)
class BatchDemand:
    """Batches of lines handed over during the day: (hour submitted, lines)."""

    batches: tuple[tuple[float, int], ...] = ((8.0, 20_000), (18.0, 40_000))
    prompt_tokens: tuple[int, int] = (200, 800)
    output_tokens: tuple[int, int] = (100, 400)


# ---------------------------------------------------------------- the run


@dataclass
class Result:
    interference_s: float = 0.0  # owner active and our inference running
    light_overlap_s: float = 0.0  # owner lightly active and our inference running
    served_tokens: int = 0
    completed: int = 0
    drained: int = 0  # admitted, then ended by a drain's grace period
    rejected: int = 0
    offered: int = 0
    yields: int = 0
    lent_s: float = 0.0  # time spent admitting (SERVING or THROTTLED)
    # Refused while admitting (queue full, over its share, timed out), by who:
    # the flooding client, and everyone else.
    flood_refused: int = 0
    others_refused: int = 0
    refused_with_nothing_queued: int = 0  # at the door, by a client holding nothing queued
    batch_tokens: int = 0  # prompt and output tokens of the batch lines answered
    batch_lines: int = 0  # batch lines answered
    batch_cut: int = 0  # batch lines cut (a reclaim, an interactive arrival) and run again
    batch_left: int = 0  # batch lines not run by the end of the day
    busy_s: float = 0.0  # time the engine ran anything


@dataclass
class _Running:
    ticket: Ticket
    left: float  # output tokens still to generate


@dataclass
class _BatchLane:
    """The batch lines of the day: pending (submitted, not running) and running."""

    demand: BatchDemand
    rng: random.Random
    pending: deque[tuple[int, int]] = field(default_factory=deque)  # (prompt, output)
    running: list[list[float]] = field(default_factory=list)  # [prompt, output, left]
    submitted: int = 0  # batches of `demand` handed over so far

    def arrive(self, now: float) -> None:
        batches = self.demand.batches
        while self.submitted < len(batches) and batches[self.submitted][0] * 3600 <= now:
            for _ in range(batches[self.submitted][1]):
                prompt = self.rng.randint(*self.demand.prompt_tokens)
                self.pending.append((prompt, self.rng.randint(*self.demand.output_tokens)))
            self.submitted += 1

    def schedule(self, result: Result, open_: bool, room: int) -> None:
        """Cut lines over `room` (all of them when not admitting), then fill it."""
        keep = room if open_ else 0
        while len(self.running) > max(0, keep):
            prompt, output, _ = self.running.pop()  # the newest
            self.pending.appendleft((int(prompt), int(output)))
            result.batch_cut += 1
        while open_ and self.pending and len(self.running) < room:
            prompt, output = self.pending.popleft()
            self.running.append([float(prompt), float(output), float(output)])

    def progress(self, result: Result, per_stream: float) -> None:
        for line in list(self.running):
            line[2] -= per_stream
            if line[2] <= 0:
                result.batch_lines += 1
                result.batch_tokens += int(line[0] + line[1])
                self.running.remove(line)


def simulate(
    policy: Policy,
    owner: list[Segment],
    work: Workload,
    seed: int = 1,
    dt: float = 0.5,
    duration_s: float = DAY_S,
    batch: BatchDemand | None = None,
) -> Result:
    rng = random.Random(seed)
    # Its own random stream: the interactive arrivals are the same with or without it.
    lane = _BatchLane(batch, random.Random(seed + 1)) if batch is not None else None
    machine = StateMachine(policy, 0.0)
    queue = AdmissionQueue(policy, policy.kv_budget_tokens)
    running: dict[int, _Running] = {}
    outputs: dict[int, int] = {}  # output tokens of each admitted or queued request
    result = Result()
    paused_until = 0.0  # the engine is waking up until then (cap 0)
    next_sample = 0.0
    ids = 0
    steps = int(duration_s / dt)
    for step in range(steps):
        now = step * dt
        sample = sample_at(owner, now)
        truth = classify_sample(sample, REFERENCE)
        windows = policy.windows
        window_open = windows is None or windows.is_open(now)  # day 0 = 1970-01-01, a Thursday
        if now >= next_sample:
            next_sample = now + policy.probe_interval_s
            seen = classify_sample(sample, policy)
            transitions = machine.update(now, seen, window_open, len(running))
        else:
            transitions = machine.tick(now, len(running))
        for transition in transitions:
            if transition.target is State.DRAINING:
                result.rejected += len(queue.clear_waiting())
            if transition.target is State.YIELDED:
                result.yields += 1
                result.drained += len(running)
                for item in running.values():
                    queue.release(item.ticket.id)
                running.clear()
            if transition.source is State.YIELDED:
                paused_until = now + work.wake_s
        cap = 0 if now < paused_until else policy.cap(machine.state)
        # Arrivals: each a ticket of one of the clients, then the flood's tickets.
        base = _poisson(rng, work.rate_per_s * dt)
        flood = 0
        if work.flood_rate_per_s:
            flood = _poisson(rng, work.flood_rate_per_s * dt) * work.flood_prompts
        for arrival in range(base + flood):
            ids += 1
            result.offered += 1
            prompt = rng.randint(*work.prompt_tokens)
            output = rng.randint(*work.output_tokens)
            client = f"c{rng.randrange(work.clients)}" if arrival < base else "flood"
            ticket = Ticket(ids, client, 0, prompt + output, now, 0.0)
            ticket.deadline = now + policy.queue_timeout_s
            if machine.state not in ADMITTING:
                result.rejected += 1
                continue
            had_nothing = queue.queued_by(client) == 0
            try:
                if queue.offer(ticket, cap):
                    running[ticket.id] = _Running(ticket, float(output))
                else:
                    outputs[ticket.id] = output  # queued: runs when admitted
            except AdmissionRejected:
                result.rejected += 1
                result.refused_with_nothing_queued += had_nothing
                _count_refused(result, client)
        for ticket in queue.expire(now):
            result.rejected += 1
            outputs.pop(ticket.id, None)
            _count_refused(result, ticket.client)
        for ticket in queue.admit_ready(cap):
            running[ticket.id] = _Running(ticket, float(outputs.pop(ticket.id)))
        batch_running = 0
        if lane is not None:
            lane.arrive(now)
            # Full-speed streams within the cap less its headroom, less the interactive.
            full_speed = int(work.batch_tok_s / work.stream_tok_s)
            room = min(cap - cap // 8, full_speed) - len(running)
            open_ = machine.state in ADMITTING and now >= paused_until
            lane.schedule(result, open_, room)
            batch_running = len(lane.running)
        # Progress of the batch.
        streams = len(running) + batch_running
        if streams and now >= paused_until:
            result.busy_s += dt
            per_stream = min(work.stream_tok_s, work.batch_tok_s / streams) * dt
            if lane is not None:
                lane.progress(result, per_stream)
            if truth is Owner.ACTIVE:
                result.interference_s += dt
            elif truth is Owner.LIGHT:
                result.light_overlap_s += dt
            for item in list(running.values()):
                item.left -= per_stream
                if item.left <= 0:
                    result.completed += 1
                    result.served_tokens += item.ticket.tokens
                    queue.release(item.ticket.id)
                    del running[item.ticket.id]
        if machine.state in ADMITTING:
            result.lent_s += dt
    if lane is not None:
        result.batch_left = len(lane.pending) + len(lane.running)
    return result


def _count_refused(result: Result, client: str) -> None:
    if client == "flood":
        result.flood_refused += 1
    else:
        result.others_refused += 1


def _poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


# ---------------------------------------------------------------- the table


def policies() -> dict[str, Policy]:
    base = Policy(max_concurrent=32, throttled_concurrent=4, max_queued=64, queue_timeout_s=30)
    return {
        "default (grace 30 s, hysteresis 60 s, probe 1 s)": base,
        "immediate (grace 0 s)": replace(base, grace_s=0),
        "polite (grace 5 s, hysteresis 300 s)": replace(base, grace_s=5, resume_after_s=300),
        "greedy (grace 120 s, hysteresis 10 s)": replace(base, grace_s=120, resume_after_s=10),
        "slow probe (probe every 10 s)": replace(base, probe_interval_s=10),
        "no throttling (light use ignored)": replace(base, light_util_pct=101),
        "nights only (19:00-08:00 window)": replace(base, windows=parse_windows("19:00-08:00")),
    }


def table(seed: int) -> str:
    owner = owner_day(seed)
    work = Workload()
    active_s = sum(
        (b.start_s if b else DAY_S) - a.start_s
        for a, b in zip(owner, [*owner[1:], None], strict=True)
        if classify_sample(a.sample, REFERENCE) is Owner.ACTIVE
    )
    lines = [
        f"Owner active {active_s / 3600:.1f} h of 24 h; {work.rate_per_s:g} requests/s offered "
        f"(seed {seed}).",
        "",
        "| policy | owner interference (s) | beside light use (h) | goodput (Mtok/day) "
        "| completed | ended by drain | rejected | yields | lent (h) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, policy in policies().items():
        r = simulate(policy, owner, work, seed=seed)
        lines.append(
            f"| {name} | {r.interference_s:.0f} | {r.light_overlap_s / 3600:.1f} "
            f"| {r.served_tokens / 1e6:.1f} | {r.completed} "
            f"| {r.drained} | {r.rejected} ({100 * r.rejected / max(1, r.offered):.1f}%) "
            f"| {r.yields} | {r.lent_s / 3600:.1f} |"
        )
    lines += ["", flood_line(seed), "", *batch_table(owner, work, seed)]
    return "\n".join(lines)


def batch_table(owner: list[Segment], work: Workload, seed: int) -> list[str]:
    """Goodput per day with batch demand filling the capacity interactive requests leave,
    beside the same day without it."""
    demand = BatchDemand()
    offered = sum(count for _, count in demand.batches)
    hours = ", ".join(f"{count} at {hour:02.0f}:00" for hour, count in demand.batches)
    lines = [
        f"With batch demand ({hours}; lines of {demand.prompt_tokens[0]}-"
        f"{demand.prompt_tokens[1]} prompt and {demand.output_tokens[0]}-"
        f"{demand.output_tokens[1]} output tokens, {offered} lines):",
        "",
        "| policy | batches | interactive goodput (Mtok/day) | batch goodput (Mtok/day) "
        "| goodput (Mtok/day) | engine busy (h) | owner interference (s) | batch lines done "
        "| cut and rerun | left at midnight | interactive rejected |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in (_DEFAULT, "nights only (19:00-08:00 window)"):
        policy = policies()[name]
        for label, with_batch in (("none (today)", None), ("filling idle capacity", demand)):
            r = simulate(policy, owner, work, seed=seed, batch=with_batch)
            total = r.served_tokens + r.batch_tokens
            lines.append(
                f"| {name} | {label} | {r.served_tokens / 1e6:.1f} | {r.batch_tokens / 1e6:.1f} "
                f"| {total / 1e6:.1f} | {r.busy_s / 3600:.1f} | {r.interference_s:.0f} "
                f"| {r.batch_lines} | {r.batch_cut} | {r.batch_left} | {r.rejected} |"
            )
    return lines


def flood_line(seed: int) -> str:
    """The default policy for an hour of an idle owner, with a ninth client sending a
    64-prompt request every second on top of the eight ordinary ones."""
    work = replace(Workload(), flood_rate_per_s=1.0)
    r = simulate(policies()[_DEFAULT], [Segment(0.0, GpuSample())], work, seed, duration_s=3600)
    return (
        f"With a ninth client flooding (a 64-prompt request a second, an hour, owner idle): "
        f"the flood's tickets refused {r.flood_refused}, the other clients' {r.others_refused} "
        f"(each while it had requests queued already; refused with nothing queued: "
        f"{r.refused_with_nothing_queued})."
    )


_DEFAULT = "default (grace 30 s, hysteresis 60 s, probe 1 s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    print(table(parser.parse_args(argv).seed))
    return 0
