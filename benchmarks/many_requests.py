"""Model steps per second with many requests queued, through the simulate driver
(`sut.simulate.simulate_model`, as `loopcheck simulate` runs it).

N requests arrive 100 per step with priorities 0..3 and prompts of 8..64 tokens
(a quarter share a 16..48-token prefix); pool of 4096 blocks of 16, 64 slots,
512-token budget, chunks of 128. Shapes:
- slots: the default rules; slots and the token budget bind.
- prefix: prefix caching and incremental allocation.
- bypass: a 600-block pool, 256 slots and max_bypasses 1; the pool binds.
- pool: a 600-block pool, WCPB over 3 loops, prefix caching, incremental
  allocation: the pool binds and no request is admitted past a blocked one, so
  every waiting request is evaluated every step (time linear in waiting requests).
Each row is one run of `--steps` steps (ratios between rows are what to read).

Usage: python -m benchmarks.many_requests [--requests 1000 10000] [--steps 500] [--shapes slots prefix]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from loopcheck.adapters.simulate import simulate_model
from loopcheck.model.config import Config
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.report import table

SHAPES: dict[str, dict[str, Any]] = {
    "slots": {},
    "prefix": {"prefix_caching": True, "allocation": "incremental"},
    "bypass": {"num_blocks": 600, "max_num_seqs": 256, "max_bypasses": 1},
    "pool": {"num_blocks": 600, "prefix_caching": True, "allocation": "incremental", "num_loops": 3, "wcpb": True,
             "kv_layout": "last_exited"},
}


def workload(n: int, shape: str) -> Workload:
    rng = random.Random(0)
    settings: dict[str, Any] = {"num_blocks": 4096, "block_size": 16, "max_num_seqs": 64,
                                "max_num_batched_tokens": 512, "prefill_chunk_size": 128, "num_loops": 1,
                                "kv_layout": "shared", "wcpb": False}
    settings.update(SHAPES[shape])
    shared = tuple(rng.randrange(64) for _ in range(48))
    reqs = tuple(RequestSpec(f"r{i}", shared[:rng.choice([0, 0, 0, 16, 32, 48])]
                             + tuple(rng.randrange(64) for _ in range(rng.randint(8, 64))),
                             rng.randint(4, 32), arrival=i // 100, priority=rng.randint(0, 3)) for i in range(n))
    return Workload(Config(**settings), reqs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    args = parser.parse_args()
    rows = []
    for shape in args.shapes:
        for n in args.requests:
            w = workload(n, shape)
            start = time.perf_counter()
            run = simulate_model(w, args.steps)
            seconds = time.perf_counter() - start
            rows.append([shape, n, run.counters.steps, run.finished, run.counters.preemptions, f"{seconds:.2f}",
                         f"{run.counters.steps / seconds:.0f}"])
    print(table(["shape", "requests", "steps", "finished", "preemptions", "seconds", "steps/s"], rows))


if __name__ == "__main__":
    main()
