"""The fair scheduler as vLLM runs it: vLLM's own V1 scheduler class with our fair share
mixed in, driven step by step without a model (a step's sampled tokens are made up),
the way vLLM's scheduler tests drive it. The waiting queue goes least-served tenant
first, a light tenant's request cuts a heavy tenant's prefills short, a tenant back from
idle is lifted to the others' counter, the most-served tenant's request is the one
preempted, every step is charged to its tenant, and the shares are published."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from engine.checkpoint import default_model_dir
from engine.fairness import CONFIG_KEY, TENANT_ARG, read_shares, tenant_args
from engine.vllm_backend import fair_scheduler
from engine.vllm_backend.config import FAIR_SCHEDULER
from engine.vllm_backend.fair_scheduler import (
    AsyncFairScheduler,
    FairScheduler,
    SyncFairScheduler,
)

BLOCK = 16
MAX_MODEL_LEN = 4096
SAMPLED = 7  # the token every made-up step samples (never a stop token: ignore_eos)

init_none_hash(sha256)
HASHER = get_request_block_hasher(BLOCK, sha256)
_numbers = itertools.count()


@pytest.fixture(scope="module")
def model_config() -> ModelConfig:
    """The default model's config (its files are on disk: no download, no weights)."""
    source = default_model_dir()
    assert (source / "config.json").is_file(), "run `lilac-serve prepare-model`"
    return ModelConfig(model=str(source), dtype="float32", seed=0, max_model_len=MAX_MODEL_LEN)


@pytest.fixture
def shares_path(tmp_path: Path) -> Path:
    return tmp_path / "shares.json"


@pytest.fixture
def make_scheduler(model_config: ModelConfig, shares_path: Path) -> Callable[..., Any]:
    """A scheduler as the engine core builds one from its config (`get_scheduler_cls`),
    over a KV cache of `num_blocks` blocks of one full-attention group."""

    def make(
        *,
        budget: int = 512,
        threshold: int = 0,
        num_blocks: int = 2000,
        fair: bool = True,
        async_scheduling: bool = False,
        max_num_seqs: int = 16,
        **settings: Any,
    ) -> Any:
        scheduler_config = SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=budget,
            max_model_len=MAX_MODEL_LEN,
            long_prefill_token_threshold=threshold,
            enable_chunked_prefill=True,
            policy="priority",
            scheduler_cls=FAIR_SCHEDULER if fair else None,
            is_encoder_decoder=False,
        )
        cache_config = CacheConfig(block_size=BLOCK, cache_dtype="auto", enable_prefix_caching=True)
        fairness = {"shares_path": str(shares_path), **settings}
        vllm_config = VllmConfig(
            scheduler_config=scheduler_config,
            model_config=model_config,
            cache_config=cache_config,
            additional_config={CONFIG_KEY: fairness},
        )
        # The CPU platform turns asynchronous scheduling off; the factory only reads it.
        vllm_config.scheduler_config.async_scheduling = async_scheduling
        cache_config.num_gpu_blocks = num_blocks
        kv_cache_config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer"],
                    FullAttentionSpec(
                        block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32
                    ),
                )
            ],
        )
        return vllm_config.scheduler_config.get_scheduler_cls()(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=BLOCK,
            hash_block_size=BLOCK,
            log_stats=True,
        )

    return make


def make_request(
    tenant: str,
    prompt_len: int = 0,
    *,
    max_tokens: int = 2,
    weight: float = 1.0,
    prompt: list[int] | None = None,
    salt: str | None = None,
) -> Request:
    """A request of `tenant`; its prompt fresh (shares no block with any other) unless
    given."""
    number = next(_numbers)
    if prompt is None:
        prompt = [100 + number % 30_000] * prompt_len
    params = SamplingParams(
        max_tokens=max_tokens, ignore_eos=True, extra_args=tenant_args(tenant, weight)
    )
    return Request(
        request_id=f"{tenant}-{number}",
        prompt_token_ids=prompt,
        sampling_params=params,
        pooling_params=None,
        cache_salt=salt,
        block_hasher=HASHER,
    )


class Engine:
    """The engine core's loop without a model: schedule a step, then hand the scheduler
    the step's output (one sampled token for each request whose step reached the end of
    its tokens, none for a prefill chunk)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.finished: list[str] = []
        self.steps: list[SchedulerOutput] = []

    def add(self, *requests: Request) -> None:
        for request in requests:
            self.scheduler.add_request(request)

    def step(self) -> SchedulerOutput:
        output = self.scheduler.schedule()
        ids = list(output.num_scheduled_tokens)
        requests = self.scheduler.requests
        sampled = [
            [SAMPLED] if requests[i].num_computed_tokens >= requests[i].num_tokens else []
            for i in ids
        ]
        runner = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: n for n, r in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        for outputs in self.scheduler.update_from_output(output, runner).values():
            for out in outputs.outputs:
                if out.finish_reason is not None:
                    self.finished.append(out.request_id)
        self.steps.append(output)
        return output

    def run(self, limit: int = 500) -> None:
        """Steps until every request has finished."""
        for _ in range(limit):
            if not self.scheduler.requests:
                return
            self.step()
        raise AssertionError(f"still unfinished after {limit} steps")


def new_ids(output: SchedulerOutput) -> list[str]:
    """The requests the step started, in the order it took them from the waiting queue."""
    return [r.req_id for r in output.scheduled_new_reqs]


# The order


def heavy_then_light(engine: Engine) -> tuple[list[Request], Request]:
    """Tenant `heavy` queues eight 100-token prompts; two steps of 256 tokens serve the
    first five and part of the sixth; then `light` sends one of 100."""
    heavy = [make_request("heavy", 100, max_tokens=1) for _ in range(8)]
    engine.add(*heavy)
    engine.step()
    engine.step()
    assert [r.status for r in heavy[6:]] == [RequestStatus.WAITING] * 2
    assert heavy[5].status == RequestStatus.RUNNING
    light = make_request("light", 100, max_tokens=1)
    engine.add(light)
    return heavy, light


@pytest.mark.parametrize("hold_prefills", [True, False])
def test_a_new_tenant_goes_before_a_served_tenants_queue(
    make_scheduler: Callable[..., Any], hold_prefills: bool
) -> None:
    engine = Engine(make_scheduler(budget=256, hold_prefills=hold_prefills))
    heavy, light = heavy_then_light(engine)
    step = engine.step()
    assert step.num_scheduled_tokens.get(light.request_id) == 100
    assert heavy[7].request_id not in step.num_scheduled_tokens
    started = new_ids(step)
    assert started.index(light.request_id) == 0  # ahead of every queued heavy request
    engine.run()
    assert sorted(engine.finished) == sorted(r.request_id for r in [*heavy, light])


def test_first_come_first_served_would_keep_the_new_tenant_waiting(
    make_scheduler: Callable[..., Any],
) -> None:
    """The same arrivals under vLLM's own priority scheduler (all at one priority): the
    heavy tenant's queue fills the step and the light request waits."""
    engine = Engine(make_scheduler(budget=256, fair=False))
    assert type(engine.scheduler) is Scheduler
    heavy, light = heavy_then_light(engine)
    step = engine.step()
    assert light.request_id not in step.num_scheduled_tokens
    assert heavy[7].request_id in step.num_scheduled_tokens


def test_a_light_request_cuts_a_heavy_tenants_prefills_short(
    make_scheduler: Callable[..., Any],
) -> None:
    engine = Engine(make_scheduler(budget=2048, threshold=512))
    chunk = engine.scheduler.contended_chunk
    steady = make_request("steady", 16, max_tokens=40)  # decoding all along
    engine.add(steady)
    engine.step()
    heavy = [make_request("heavy", 1500) for _ in range(4)]
    engine.add(*heavy)
    first = engine.step()
    assert [first.num_scheduled_tokens[r.request_id] for r in heavy] == [512, 512, 512, 511]
    light = make_request("light", 20)
    engine.add(light)

    step = engine.step()
    scheduled = step.num_scheduled_tokens
    assert scheduled.get(light.request_id) == 20  # its whole prompt: its first token now
    assert scheduled.get(steady.request_id) == 1
    # Short: the decodes, the light prompt and one chunk of the heavy prompts.
    assert step.total_num_scheduled_tokens <= 1 + 20 + chunk
    heavy_scheduled = [r.request_id for r in heavy if r.request_id in scheduled]
    assert heavy_scheduled == [heavy[0].request_id]  # the others' prefills held out
    assert scheduled[heavy[0].request_id] <= chunk

    # The held prefills resume in the next step, and nothing is lost.
    after = engine.step()
    assert all(r.request_id in after.num_scheduled_tokens for r in heavy)
    engine.run()
    assert sorted(engine.finished) == sorted(r.request_id for r in [steady, *heavy, light])
    assert all(r.num_computed_tokens >= 1500 for r in heavy)
    assert all(len(r.output_token_ids) == 2 for r in [*heavy, light])


def test_a_light_request_gets_in_when_the_budget_is_one_chunk(
    make_scheduler: Callable[..., Any],
) -> None:
    engine = Engine(make_scheduler(budget=fair_scheduler.CONTENDED_CHUNK))
    heavy = make_request("heavy", 3000)
    engine.add(heavy)
    engine.step()
    light = make_request("light", 40)
    engine.add(light)
    step = engine.step()
    assert light.request_id in step.num_scheduled_tokens


def test_a_light_requests_decodes_go_on_beside_a_heavy_prefill(
    make_scheduler: Callable[..., Any],
) -> None:
    engine = Engine(make_scheduler(budget=512))
    heavy = make_request("heavy", 4000)
    light = make_request("light", 40, max_tokens=4)
    engine.add(heavy, light)
    first = engine.step()  # the light prompt and a chunk of the heavy one
    assert first.num_scheduled_tokens[light.request_id] == 40
    for _ in range(3):
        assert light.request_id in engine.step().num_scheduled_tokens


def test_without_holding_the_heavy_prefills_fill_the_step(
    make_scheduler: Callable[..., Any],
) -> None:
    """With the hold off, running prefills take the whole budget first and the light
    request waits: the test above depends on the hold, not on the arrivals alone."""
    engine = Engine(make_scheduler(budget=2048, threshold=512, hold_prefills=False))
    heavy = [make_request("heavy", 1500) for _ in range(4)]
    engine.add(*heavy)
    engine.step()
    light = make_request("light", 20)
    engine.add(light)
    step = engine.step()
    assert light.request_id not in step.num_scheduled_tokens
    assert step.total_num_scheduled_tokens == 2048


def heavy_prefills_and_a_light_request(engine: Engine) -> tuple[list[Request], Request]:
    heavy = [make_request("heavy", 1500) for _ in range(4)]
    engine.add(*heavy)
    engine.step()
    light = make_request("light", 20)
    engine.add(light)
    return heavy, light


def test_a_request_waiting_for_its_grammar_holds_nobody(
    make_scheduler: Callable[..., Any],
) -> None:
    """vLLM passes over a request whose grammar is still compiling: holding the other
    prefills for it would stall them for as long as the compile takes."""
    engine = Engine(make_scheduler(budget=2048, threshold=512))
    heavy, light = heavy_prefills_and_a_light_request(engine)
    light.status = RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR  # no grammar yet
    step = engine.step()
    assert light.request_id not in step.num_scheduled_tokens
    assert all(r.request_id in step.num_scheduled_tokens for r in heavy)
    assert step.total_num_scheduled_tokens == 2048


def test_a_short_step_that_started_nothing_is_followed_by_whole_steps(
    make_scheduler: Callable[..., Any],
) -> None:
    """The light request cannot start (vLLM skips it while output of its is still in
    flight): one short step finds that out, then the heavy prefills run whole until it
    can, and the light request starts in the first step after."""
    engine = Engine(make_scheduler(budget=2048, threshold=512))
    heavy, light = heavy_prefills_and_a_light_request(engine)
    light.num_stale_output_tokens = 1  # vLLM's own reason to pass it over this step
    short = engine.step()
    assert light.request_id not in short.num_scheduled_tokens
    assert short.total_num_scheduled_tokens < 2048  # held for it, once
    whole = engine.step()
    assert all(r.request_id in whole.num_scheduled_tokens for r in heavy)
    assert whole.total_num_scheduled_tokens == 2048
    light.num_stale_output_tokens = 0
    assert light.request_id in engine.step().num_scheduled_tokens
    engine.run()
    assert sorted(engine.finished) == sorted(r.request_id for r in [*heavy, light])


# The counters


def test_a_tenant_back_from_idle_is_lifted_to_the_others_counter(
    make_scheduler: Callable[..., Any],
) -> None:
    # Prefills cut to chunks of 256: the light request's decode fits beside them.
    engine = Engine(make_scheduler(budget=512, threshold=256))
    ledger = engine.scheduler.ledger
    heavy = make_request("heavy", 4000, max_tokens=2)
    light = make_request("light", 40, max_tokens=2)
    engine.add(heavy, light)
    while light.request_id not in engine.finished:
        engine.step()
    left_at = ledger.counter("light")
    assert left_at > 0
    assert ledger.tenants["light"].active == 0
    for _ in range(4):  # the heavy tenant goes on alone
        engine.step()
    assert heavy.request_id in engine.scheduler.requests
    assert ledger.counter("heavy") > left_at + 1000

    engine.add(make_request("light", 40))
    assert ledger.counter("light") == ledger.counter("heavy")  # no credit banked idle
    engine.run()


def test_an_aborted_request_leaves_its_tenants_count(make_scheduler: Callable[..., Any]) -> None:
    """Running or still waiting, an aborted request is no longer its tenant's: a tenant
    left with none is idle (it would otherwise set the floor newcomers are lifted to)."""
    engine = Engine(make_scheduler(budget=256))
    ledger = engine.scheduler.ledger
    running, waiting = make_request("a", 300), make_request("a", 300)
    engine.add(running, waiting)
    engine.step()
    assert (running.status, waiting.status) == (RequestStatus.RUNNING, RequestStatus.WAITING)
    assert ledger.tenants["a"].active == 2
    engine.scheduler.finish_requests(waiting.request_id, RequestStatus.FINISHED_ABORTED)
    assert ledger.tenants["a"].active == 1
    engine.scheduler.finish_requests(running.request_id, RequestStatus.FINISHED_ABORTED)
    assert ledger.tenants["a"].active == 0
    assert ledger.lowest_active() is None


def test_a_double_weight_counts_half_the_service(make_scheduler: Callable[..., Any]) -> None:
    engine = Engine(make_scheduler(budget=512))
    ledger = engine.scheduler.ledger
    engine.add(
        make_request("single", 600, max_tokens=5, weight=1.0),
        make_request("double", 600, max_tokens=5, weight=2.0),
    )
    engine.run()
    for state in ledger.tenants.values():  # the service over the weight
        assert state.counter == pytest.approx(state.recent_sum / state.weight)
    double, single = ledger.tenants["double"], ledger.tenants["single"]
    assert (double.weight, single.weight) == (2.0, 1.0)
    assert double.tokens == single.tokens > 600  # the same work, at half the counter
    assert double.counter == pytest.approx(single.counter / 2)


def test_the_most_served_tenants_request_is_preempted(
    make_scheduler: Callable[..., Any],
) -> None:
    """Twenty blocks of sixteen tokens hold either request to its end but not both: the
    one preempted is the heavy tenant's, which came first (vLLM alone preempts the
    latest arrival)."""
    preempted = preemptions(make_scheduler(budget=512, num_blocks=20))
    assert preempted[0].startswith("heavy-")


def test_first_come_first_served_preempts_the_latest_arrival(
    make_scheduler: Callable[..., Any],
) -> None:
    preempted = preemptions(make_scheduler(budget=512, num_blocks=20, fair=False))
    assert preempted[0].startswith("light-")


def preemptions(scheduler: Any) -> list[str]:
    engine = Engine(scheduler)
    heavy = make_request("heavy", 150, max_tokens=100)
    light = make_request("light", 40, max_tokens=100)
    engine.add(heavy, light)
    preempted: list[str] = []
    for _ in range(400):
        if not scheduler.requests:
            break
        step = engine.step()
        for request_id in sorted(step.preempted_req_ids or ()):
            if request_id not in preempted:
                preempted.append(request_id)
    assert sorted(engine.finished) == sorted([heavy.request_id, light.request_id])
    assert preempted, "the KV cache never ran short: no preemption to look at"
    return preempted


# The charges

PROMPT_COST, CACHED_COST, OUTPUT_COST = 1.0, 0.25, 10.0
COSTS = {"prompt_cost": PROMPT_COST, "cached_cost": CACHED_COST, "output_cost": OUTPUT_COST}
SHARED = [1000 + n for n in range(6 * BLOCK)]  # six full blocks of one prefix


def run_alone(engine: Engine, request: Request) -> list[tuple[int, float]]:
    """Runs `request` to its end alone: each step's tokens and the service it charged
    (what the shares count; the counter also holds the output budget prepaid)."""
    state = engine.scheduler.ledger.tenants
    params = request.sampling_params
    assert params is not None and params.extra_args is not None
    tenant = params.extra_args[TENANT_ARG]
    engine.add(request)
    charges: list[tuple[int, float]] = []
    while request.request_id not in engine.finished:
        before = state[tenant].recent_sum
        step = engine.step()
        charges.append(
            (step.num_scheduled_tokens[request.request_id], state[tenant].recent_sum - before)
        )
    return charges


def cached_tokens(engine: Engine, request: Request) -> int:
    """The prompt tokens the prefix cache gave `request` when it started."""
    for step in engine.steps:
        for new in step.scheduled_new_reqs:
            if new.req_id == request.request_id:
                return int(new.num_computed_tokens)
    raise AssertionError(f"{request.request_id} never started")


def test_prompt_chunks_cost_the_prompt_rate_and_each_decode_one_output(
    make_scheduler: Callable[..., Any],
) -> None:
    engine = Engine(make_scheduler(budget=64, **COSTS))
    charges = run_alone(engine, make_request("a", 100, max_tokens=3))
    assert [tokens for tokens, _ in charges] == [64, 36, 1, 1]
    assert charges[0][1] == pytest.approx(64 * PROMPT_COST)  # a chunk: nothing sampled
    assert [charge for _, charge in charges[2:]] == [OUTPUT_COST, OUTPUT_COST]


def test_every_prompt_token_computed_is_charged(make_scheduler: Callable[..., Any]) -> None:
    engine = Engine(make_scheduler(budget=64, **COSTS))
    request = make_request("a", 100, max_tokens=3)
    charges = run_alone(engine, request)
    # The step that ends the prompt computes its last 36 tokens and samples the first
    # output token.
    assert charges[1] == (36, pytest.approx(36 * PROMPT_COST + OUTPUT_COST))
    state = engine.scheduler.ledger.tenants["a"]
    assert state.counter == pytest.approx(100 * PROMPT_COST + 3 * OUTPUT_COST)
    assert state.tokens == 100 + 3  # the prompt and the output tokens served


def test_prompt_tokens_from_the_prefix_cache_cost_the_cached_rate(
    make_scheduler: Callable[..., Any],
) -> None:
    engine = Engine(make_scheduler(budget=512, **COSTS))
    ledger = engine.scheduler.ledger
    run_alone(engine, make_request("first", prompt=SHARED + [5] * 20, salt="s"))
    cached = make_request("second", prompt=SHARED + [6] * 20, salt="s")
    run_alone(engine, cached)
    assert cached_tokens(engine, cached) == len(SHARED)
    salted = make_request("third", prompt=SHARED + [6] * 20, salt="other")
    run_alone(engine, salted)
    assert cached_tokens(engine, salted) == 0  # another salt: none of the prefix is shared
    # The same work but for the cached prefix, which costs the cached rate instead.
    difference = ledger.counter("third") - ledger.counter("second")
    assert difference == pytest.approx(len(SHARED) * (PROMPT_COST - CACHED_COST))
    assert ledger.tenants["second"].tokens == ledger.tenants["third"].tokens


def test_the_output_budget_counts_when_a_request_starts_and_the_rest_comes_back(
    make_scheduler: Callable[..., Any],
) -> None:
    engine = Engine(make_scheduler(budget=512, **COSTS))
    ledger = engine.scheduler.ledger
    request = make_request("a", 100, max_tokens=50)
    engine.add(request)
    engine.step()  # the whole prompt, and the first output token
    assert ledger.counter("a") == pytest.approx(100 * PROMPT_COST + 50 * OUTPUT_COST)
    for _ in range(4):
        engine.step()  # drawn from what was prepaid: the counter stays
    assert ledger.counter("a") == pytest.approx(100 * PROMPT_COST + 50 * OUTPUT_COST)
    assert len(request.output_token_ids) == 5
    engine.scheduler.finish_requests(request.request_id, RequestStatus.FINISHED_ABORTED)
    # Cut after five tokens: the other forty-five come back.
    assert ledger.counter("a") == pytest.approx(100 * PROMPT_COST + 5 * OUTPUT_COST)
    assert ledger.tenants["a"].recent_sum == pytest.approx(100 * PROMPT_COST + 5 * OUTPUT_COST)


def test_a_tenant_back_from_idle_takes_no_burst_of_seats(
    make_scheduler: Callable[..., Any],
) -> None:
    """Four seats, kept busy by one tenant's queue of answers of staggered lengths (the
    seats free one at a time); a tenant back from idle queues eight. Lifted level with
    the first, it would win every seat that frees until its produced tokens caught up
    (the first four in a row); with its budgets counted as its requests start, the
    seats alternate."""
    engine = Engine(make_scheduler(budget=512, max_num_seqs=4))
    engine.add(*(make_request("busy", 20, max_tokens=12 + 3 * i) for i in range(16)))
    for _ in range(6):
        engine.step()
    engine.add(*(make_request("back", 20, max_tokens=12 + 3 * i) for i in range(8)))
    started: list[str] = []
    while len(started) < 8:
        started += [r.split("-")[0] for r in new_ids(engine.step())]
    runs = [len(list(run)) for tenant, run in itertools.groupby(started[:8]) if tenant == "back"]
    assert max(runs) <= 2 and 3 <= sum(runs) <= 5, started
    engine.run()


# The shares


def test_shares_are_published_and_again_when_the_engine_goes_idle(
    make_scheduler: Callable[..., Any], shares_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No periodic publication after the first: what the file shows at the end was
    # written when the last request finished.
    monkeypatch.setattr(fair_scheduler, "PUBLISH_EVERY_S", 3600.0)
    engine = Engine(make_scheduler(budget=256))
    assert read_shares(shares_path) == (0.0, [])
    engine.add(make_request("a", 300, max_tokens=4), make_request("b", 40, max_tokens=2, weight=3))
    engine.step()
    published_at, rows = read_shares(shares_path)
    assert published_at > 0
    assert {r.tenant: (r.active, r.weight) for r in rows} == {"a": (1, 1.0), "b": (1, 3.0)}

    while len(engine.finished) < 1:
        engine.step()
    assert read_shares(shares_path)[0] == published_at  # one still runs: not yet
    time.sleep(0.01)
    engine.run()
    finished_at, rows = read_shares(shares_path)
    assert finished_at > published_at
    ledger = engine.scheduler.ledger
    assert {r.tenant: (r.active, r.tokens) for r in rows} == {
        "a": (0, ledger.tenants["a"].tokens),
        "b": (0, ledger.tenants["b"].tokens),
    }


# The factory


def test_the_factory_follows_the_configs_scheduling(make_scheduler: Callable[..., Any]) -> None:
    synchronous = make_scheduler()
    assert synchronous.vllm_config.scheduler_config.get_scheduler_cls() is FairScheduler
    assert type(synchronous) is SyncFairScheduler
    asynchronous = make_scheduler(async_scheduling=True)
    assert type(asynchronous) is AsyncFairScheduler
    assert isinstance(asynchronous, AsyncScheduler)
    # Either one is a scheduler vLLM can run a step of.
    for scheduler in (synchronous, asynchronous):
        request = make_request("a", 40)
        scheduler.add_request(request)
        assert scheduler.schedule().num_scheduled_tokens == {request.request_id: 40}
