"""Steps per second of the reference model and the torch engine on the shipped
livelock example, measured in one run so their ratio is meaningful, and the
engine's time split (attention, linear, scheduler, rest).

Usage: python -m benchmarks.steps [--steps N]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopcheck.adapters.simulate import simulate_model
from loopcheck.engine import runner
from loopcheck.engine.llm_engine import LLMEngine
from loopcheck.model.workload import InputSchedule, Workload, load_workload
from loopcheck.report import table

EXAMPLE = Path(__file__).parent.parent / "examples" / "livelock.json"


def timed_wrapper(fn: Callable[..., Any], bucket: str, totals: dict[str, float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[bucket] += time.perf_counter() - start
    return wrapper


def engine_run(w: Workload, steps: int, totals: dict[str, float] | None) -> tuple[float, int]:
    """Run the engine for up to `steps` steps; with `totals`, time its parts."""
    eng = LLMEngine(w.config)
    original_attention = runner.paged_attention
    if totals is not None:
        eng.lm.linear = timed_wrapper(eng.lm.linear, "linear", totals)
        runner.paged_attention = timed_wrapper(original_attention, "attention", totals)
        for name in ("admit_arrivals", "schedule", "complete"):
            setattr(eng.scheduler, name, timed_wrapper(getattr(eng.scheduler, name), "scheduler", totals))
    inputs = InputSchedule(w.requests)
    start = time.perf_counter()
    try:
        while eng.step_count < steps:
            inputs.submit_due(eng.step_count, eng.add_request, eng.abort_request)
            eng.step()
            if eng.step_count > max(r.arrival for r in w.requests) and not eng.has_unfinished():
                break
    finally:
        runner.paged_attention = original_attention
    return time.perf_counter() - start, eng.step_count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    base = load_workload(EXAMPLE)
    rows = []
    split_rows = []
    for policy in ("unguarded", "guarded"):
        w = base.with_config(preemption_policy=policy)
        start = time.perf_counter()
        model = simulate_model(w, args.steps)
        model_s = time.perf_counter() - start
        engine_s, engine_steps = engine_run(w, args.steps, None)
        rows.append([policy, model.counters.steps, f"{model.counters.steps / model_s:,.0f}",
                     engine_steps, f"{engine_steps / engine_s:,.0f}", f"{engine_s:.2f}",
                     f"{(engine_s / engine_steps) / (model_s / model.counters.steps):.0f}x"])
        totals: dict[str, float] = defaultdict(float)
        total_s, _ = engine_run(w, args.steps, totals)
        rest = total_s - sum(totals.values())
        split_rows.append([policy] + [f"{100 * totals[k] / total_s:.0f}%"
                                      for k in ("attention", "linear", "scheduler")]
                          + [f"{100 * rest / total_s:.0f}%"])
    print(table(["policy", "model steps", "model steps/s", "engine steps", "engine steps/s",
                 "engine s", "engine/model per step"], rows))
    print()
    print(table(["policy", "attention", "linear", "scheduler", "rest (runner, KV, glue)"], split_rows))


if __name__ == "__main__":
    main()
