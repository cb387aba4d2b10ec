"""Every command of the suite, by name: `python -m perf NAME [ARGS]` runs the module's
`main(argv)`, and `python -m perf --help` lists them with the first line of each
module's docstring. A new scenario is one line here (kept in alphabetical order)."""

from __future__ import annotations

SCENARIOS: dict[str, str] = {
    "admission-sim": "perf.scenarios.admission_sim",
    "admission-yield": "perf.scenarios.admission_yield",
    "agent-apis-vs-vllm": "perf.scenarios.agent_apis_vs_vllm",
    "app-cpu": "perf.micro.app_cpu",
    "asyncllm-floor": "perf.load.asyncllm_floor",
    "attacks": "perf.scenarios.attacks",
    "batch": "perf.scenarios.batch_bench",
    "bench": "perf.micro.bench",
    "burst": "perf.load.burst",
    "compare": "perf.micro.compare",
    "costs": "perf.load.costs",
    "fair-share": "perf.scenarios.fair_share",
    "fleet": "perf.scenarios.fleet",
    "fleet-limits": "perf.micro.fleet_limits",
    "frontend-ceiling": "perf.load.frontend_ceiling",
    "frontend-pair": "perf.load.frontend_pair",
    "gpu-probe-check": "perf.scenarios.gpu_probe_check",
    "key-refresh": "perf.micro.key_refresh",
    "load": "perf.load.benchmark",
    "load-report": "perf.load.report",
    "loop-stall": "perf.scenarios.loop_stall",
    "no-admission": "perf.load.no_admission",
    "offline": "perf.load.offline",
    "paced-stream": "perf.load.paced_stream",
    "profile-server": "perf.load.profile_server",
    "scripted-app": "perf.harness.scripted_app",
    "slow-bodies": "perf.scenarios.slow_bodies",
    "soak": "perf.soak.run",
    "structured": "perf.scenarios.structured_bench",
    "token-costs": "perf.scenarios.token_costs",
    "two-model-burst": "perf.scenarios.two_model_burst",
    "warm": "perf.scenarios.warm",
    "warm-alternating": "perf.scenarios.warm_alternating",
}

# The heading each sub-package's commands are listed under.
KINDS: dict[str, str] = {
    "perf.micro": "micro-benchmarks",
    "perf.load": "load",
    "perf.soak": "soak and faults",
    "perf.scenarios": "scenarios",
    "perf.harness": "servers",
}
