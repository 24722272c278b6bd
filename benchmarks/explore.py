"""States per second of exploration, and the effect of the finished-request
reduction (states with and without), on the shipped examples.

Usage: python -m benchmarks.explore [--spread N]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from loopcheck.report import table
from model.explore import explore
from model.workload import Workload, load_workload

EXAMPLES = Path(__file__).parent.parent / "examples"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spread", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for name in ("livelock_min.json", "livelock_min.json+stop", "livelock.json"):
        spread = 0 if name == "livelock.json" else args.spread
        for policy in ("unguarded", "guarded"):
            w = load_workload(EXAMPLES / name.split("+")[0]).with_config(preemption_policy=policy)
            if name.endswith("+stop"):  # stop tokens make finished requests' outcomes branch
                w = Workload(w.config, tuple(replace(r, stop_token=5) for r in w.requests))
            cells = [name, policy, spread]
            for reduce in (True, False):
                start = time.perf_counter()
                ex = explore(w, spread=spread, reduce=reduce)
                seconds = time.perf_counter() - start
                cells += [ex.states, f"{ex.states / seconds:,.0f}"]
            rows.append(cells + [f"{cells[5] / cells[3]:.2f}x"])
    print(table(["workload", "policy", "spread", "states (reduced)", "states/s", "states (full)",
                 "states/s", "full/reduced"], rows))


if __name__ == "__main__":
    main()
