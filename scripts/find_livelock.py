"""Search random workloads in the regression's config for one on which the
unguarded policy livelocks and the guarded one drains.

Usage: python scripts/find_livelock.py [--seed N] [--tries N] [--requests N] [--out FILE]
Prints the seed of each try so a hit is reproducible; writes the first hit.
"""

from __future__ import annotations

import argparse
import random

from loopcheck.adapters.simulate import simulate_model
from loopcheck.model.config import Config
from loopcheck.model.workload import RequestSpec, Workload, save_workload

REGRESSION = dict(num_blocks=40, block_size=2, max_num_seqs=4, max_num_batched_tokens=6,
                  prefill_chunk_size=4, num_loops=4, priority_preemption=True, wcpb=True,
                  snapshots=True, kv_layout="last_exited", allocation="upfront")


def random_workload(rng: random.Random, n: int, policy: str, watermark: int) -> Workload:
    cfg = Config(**REGRESSION, watermark_blocks=watermark, preemption_policy=policy)
    reqs = tuple(RequestSpec(rid=f"r{i}", prompt=tuple(rng.randrange(1, 64)
                                                      for _ in range(rng.randint(2, 12))),
                             max_tokens=rng.randint(1, 8), arrival=rng.randint(0, 12),
                             priority=rng.randint(0, 3)) for i in range(n))
    return Workload(cfg, reqs)


def livelocks(workload: Workload) -> bool:
    """Unguarded does not drain in 500 steps with hundreds of preemptions and blocks
    held; guarded drains with nothing held, after at least one (useful) preemption."""
    bad = simulate_model(workload.with_config(preemption_policy="unguarded"), 500)
    if bad.drained or bad.counters.preemptions < 100 or bad.kv_blocks_held == 0:
        return False
    good = simulate_model(workload.with_config(preemption_policy="guarded"), 500)
    return good.drained and good.kv_blocks_held == 0 and good.counters.preemptions >= 1


def shrink(workload: Workload) -> Workload:
    """Greedily drop requests while the workload still livelocks."""
    reqs = list(workload.requests)
    i = 0
    while i < len(reqs):
        candidate = Workload(workload.config, tuple(reqs[:i] + reqs[i + 1:]))
        if candidate.requests and livelocks(candidate):
            reqs.pop(i)
        else:
            i += 1
    return Workload(workload.config, tuple(reqs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tries", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--out", default="examples/livelock.json")
    parser.add_argument("--shrink", action="store_true", help="drop requests while it livelocks")
    args = parser.parse_args()
    for t in range(args.tries):
        seed = args.seed + t
        rng = random.Random(seed)
        watermark = rng.choice([0, 4, 8])
        bad = random_workload(rng, args.requests, "unguarded", watermark)
        res = simulate_model(bad, 500)
        if res.drained or res.counters.preemptions < 100:
            print(f"seed {seed}: no livelock")
            continue
        good = simulate_model(bad.with_config(preemption_policy="guarded"), 500)
        print(f"seed {seed}: unguarded finished {res.finished}/{len(res.outputs)}, "
              f"{res.counters.preemptions} preemptions, {res.kv_blocks_held} blocks held; "
              f"guarded drained={good.drained} in {good.counters.steps} steps, "
              f"{good.counters.preemptions} preemptions, {good.kv_blocks_held} held")
        if livelocks(bad):
            save_workload(shrink(bad) if args.shrink else bad, args.out)
            print(f"wrote {args.out} (reproduce: python scripts/find_livelock.py --seed {seed} --tries 1)")
            return
    print("no livelock found")


if __name__ == "__main__":
    main()
