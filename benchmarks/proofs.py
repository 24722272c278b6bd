"""Solver seconds of the drain proof (every mode combination: allocation,
prefix caching, execution, WCPB, snapshots) and of the preemption pairing
(upfront, no prefix caching) against the number of requests, per policy, and
of the bounded lasso searches (upfront and incremental allocation) against
their steps.

Usage: python -m benchmarks.proofs [--requests 2,3,4,5,6] [--steps 4,6,8]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from benchmarks.steps import EXAMPLE
from loopcheck.model.workload import load_workload
from loopcheck.proofs.drain import DETERMINISTIC_MODES, MODES, drain, mode_label, preemption_pairs
from loopcheck.proofs.lasso import lasso_search
from loopcheck.proofs.result import ProofResult
from loopcheck.report import table


def cell(result: ProofResult) -> str:
    return f"{result.seconds:.2f}" + ("" if result.as_expected else f" ({result.status}!)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", default="2,3,4,5,6")
    parser.add_argument("--steps", default="4,6,8")
    args = parser.parse_args()
    Ks = [int(x) for x in args.requests.split(",")]
    rows = []
    for obligation, fn in (("drain", drain), ("preemption-pairs", preemption_pairs)):
        for policy in ("guarded", "no preemption", "unguarded"):
            if obligation == "preemption-pairs" and policy == "no preemption":
                continue
            for m in (DETERMINISTIC_MODES if obligation == "preemption-pairs" else MODES):
                modes = {**m, "priority_preemption": policy != "no preemption",
                         "preemption_policy": "unguarded" if policy == "unguarded" else "guarded"}
                rows.append([obligation, policy, mode_label(m)] + [cell(fn(K, modes)) for K in Ks])
    print(table(["obligation", "policy", "modes"] + [f"K={K}" for K in Ks], rows))
    base = load_workload(EXAMPLE).config
    ks = [int(x) for x in args.steps.split(",")]
    rows = [[f"lasso search ({policy}, {allocation})"]
            + [cell(lasso_search(replace(base, allocation=allocation), policy, 3, k)[0]) for k in ks]
            for allocation in ("upfront", "incremental") for policy in ("unguarded", "guarded")]
    print()
    print(table(["bounded search, K=3"] + [f"k={k}" for k in ks], rows))


if __name__ == "__main__":
    main()
