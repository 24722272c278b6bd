"""Steps per second of the reference model (and, with --engine, the torch engine)
on the shipped livelock example, measured in one run so the ratio is meaningful.

Usage: python -m benchmarks.steps [--steps N] [--engine]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from loopcheck.report import table
from model.simulate import simulate_model
from model.workload import Workload, load_workload

EXAMPLE = Path(__file__).parent.parent / "examples" / "livelock.json"


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def model_row(w: Workload, policy: str, steps: int) -> list[object]:
    seconds, res = timed(simulate_model, w.with_config(preemption_policy=policy), steps)
    return ["model", policy, res.counters.steps, f"{seconds:.3f}",
            f"{res.counters.steps / seconds:,.0f}"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    w = load_workload(EXAMPLE)
    rows = [model_row(w, policy, args.steps) for policy in ("unguarded", "guarded")]
    print(table(["engine", "policy", "steps", "seconds", "steps/s"], rows))


if __name__ == "__main__":
    main()
