"""Time to the first counterexample of `loopcheck fuzz --policy unguarded` on the
regression config: median over seeds, with the shrunk size.

Usage: python -m benchmarks.fuzz [--seeds 5] [--budget 60]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from fuzz.campaign import run_campaign
from loopcheck.report import table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0)
    args = parser.parse_args()
    rows, times = [], []
    for seed in range(1, args.seeds + 1):
        with tempfile.TemporaryDirectory() as out:
            r = run_campaign("unguarded", args.budget, seed, Path(out))
        found = r.violation is not None
        if found and r.time_to_failure is not None:
            times.append(r.time_to_failure)
        rows.append([seed, r.violation.prop if found else "none",
                     f"{r.time_to_failure:.2f}" if found and r.time_to_failure else "-",
                     r.requests if found else "-", f"{r.seconds:.1f}"])
    print(table(["seed", "property", "time to counterexample s", "requests after shrink", "total s"], rows))
    if times:
        print(f"\nmedian time to counterexample: {statistics.median(times):.2f}s over {len(times)}/{args.seeds} seeds")


if __name__ == "__main__":
    main()
