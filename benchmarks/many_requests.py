"""Model steps per second with many requests queued (no quadratic work per step):
N requests arriving 100 per step, priorities 0..3, a pool of 4096 blocks of 16,
64 slots, one depth. The first 50 steps, in one run.

Usage: python -m benchmarks.many_requests [--requests 1000 10000] [--steps 50]
"""

from __future__ import annotations

import argparse
import random
import time

from loopcheck.report import table
from model.config import Config
from model.workload import RequestSpec, Workload
from sut.simulate import simulate_model


def workload(n: int) -> Workload:
    rng = random.Random(0)
    cfg = Config(num_blocks=4096, block_size=16, max_num_seqs=64, max_num_batched_tokens=512,
                 prefill_chunk_size=128, num_loops=1, kv_layout="shared", wcpb=False)
    reqs = tuple(RequestSpec(f"r{i}", tuple(rng.randrange(64) for _ in range(rng.randint(8, 64))),
                             rng.randint(4, 32), arrival=i // 100, priority=rng.randint(0, 3)) for i in range(n))
    return Workload(cfg, reqs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    rows = []
    for n in args.requests:
        w = workload(n)
        start = time.perf_counter()
        run = simulate_model(w, args.steps)
        seconds = time.perf_counter() - start
        rows.append([n, run.counters.steps, f"{seconds:.2f}", f"{run.counters.steps / seconds:.1f}"])
    print(table(["requests", "steps", "seconds", "steps/s"], rows))


if __name__ == "__main__":
    main()
