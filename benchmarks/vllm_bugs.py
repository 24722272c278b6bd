"""loopcheck against vLLM's v1 scheduler from scratch (property mode, random configs
vLLM supports): time to each known bug over seeds, shrunk size, replay. Needs the
vLLM extra (scripts/install-engine.sh vllm).

- the queue-head stall of a request larger than the pool (vLLM issue #35541):
  default workload shape, expecting `stall` or `never-fit-not-rejected`;
- the priority inversion when max_num_seqs is the bottleneck (#40004): requests
  that fit the pool (`--shape oversized=off`), expecting `priority-inversion`;
- the prefix-cache hit on a page never computed (a page registered when its
  step was scheduled, the request then preempted out of the step; #43569): the
  same shape with the priority inversion ignored, expecting `prefix-hits`;
- a lone request preempting itself while a stopped request's blocks wait behind
  the async fence (docs/engines/vllm.md): async scheduling drawn, the other
  deployment features and oversized requests off, the findings above ignored,
  expecting `lone-preemption`.

Usage: python -m benchmarks.vllm_bugs [--seeds 5] [--budget 60]
"""

from __future__ import annotations

import argparse

from benchmarks.fuzz import hunt
from loopcheck.adapters.vllm_sut import VllmSUT
from loopcheck.fuzz.strategies import Shape


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0)
    args = parser.parse_args()
    common = dict(factory=VllmSUT, policy="guarded", configs="random", check="property")
    print(hunt("vLLM #35541: a request larger than the pool stalls the queue", {"stall", "never-fit-not-rejected"},
               args.seeds, args.budget, **common))
    print(hunt("vLLM #40004: priority inversion when max_num_seqs is the bottleneck", {"priority-inversion"},
               args.seeds, args.budget, shape=Shape.parse("oversized=off"), **common))
    print(hunt("vLLM #43569: a prefix-cache hit on a page registered, never computed", {"prefix-hits"},
               args.seeds, args.budget, shape=Shape.parse("oversized=off"), ignore=("priority-inversion",), **common))
    print(hunt("vLLM async: a lone request preempts itself while blocks wait for the batch in flight",
               {"lone-preemption"}, args.seeds, args.budget,
               shape=Shape.parse("oversized=off,lora=off,grammar=off,kv_transfer=off,spec=off,pause=off"),
               ignore=("priority-inversion", "prefix-hits"), **common))


if __name__ == "__main__":
    main()
