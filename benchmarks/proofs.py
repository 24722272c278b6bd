"""Solver seconds per obligation against K (requests) and k (BMC steps).

Usage: python -m benchmarks.proofs [--requests 2,3,4] [--steps 4,6,8]
"""

from __future__ import annotations

import argparse

from benchmarks.steps import EXAMPLE
from loopcheck.report import table
from model.workload import load_workload
from proofs.obligations import obligations


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", default="2,3,4")
    parser.add_argument("--steps", default="4,6,8")
    args = parser.parse_args()
    base = load_workload(EXAMPLE).config
    Ks = [int(x) for x in args.requests.split(",")]
    ks = [int(x) for x in args.steps.split(",")]
    header = ["obligation"] + [f"K={K},k={k}" for K in Ks for k in ks]
    times: dict[str, list[str]] = {}
    for K in Ks:
        for k in ks:
            for label, thunk in obligations(base, K, k):
                result, _ = thunk()
                mark = "" if result.as_expected else f" ({result.status}!)"
                times.setdefault(label, []).append(f"{result.seconds:.2f}{mark}")
    print(table(header, [[label] + cells for label, cells in times.items()]))


if __name__ == "__main__":
    main()
