"""`loopcheck prove` with an empty cache, this checkout beside another commit
(by default the one it changes: HEAD with uncommitted changes, else HEAD~1):
each obligation's status and seconds side by side, whether every status is the
same, and the wall seconds of the whole command with their ratio. With --runs
R the two run in turn R times (A B A B ...) and the medians are shown, the
ratio being the median of the pairs' ratios. Exit 1 if a status differs.

Usage: python -m benchmarks.prove [--base REV] [--runs 1] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.checkout import ROOT, changed, cli_command, worktree
from loopcheck.report import table


def prove(checkout: Path, workers: int | None) -> tuple[list[dict], float]:
    """One cold `loopcheck prove --json` as `checkout`'s code: its results and
    its wall seconds."""
    args = ["prove", "--no-cache", "--json"] + (["--workers", str(workers)] if workers else [])
    start = time.perf_counter()
    done = subprocess.run(cli_command(args), capture_output=True, text=True, cwd=checkout)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"benchmarks.prove: {checkout}: loopcheck prove exited {done.returncode}: {done.stderr[-500:]}")
    return json.loads(done.stdout), seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="the commit to compare with (default: HEAD with uncommitted changes, "
                                       "else HEAD~1)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--workers", type=int, help="loopcheck prove --workers (default: its own, the cores)")
    args = parser.parse_args()
    base = args.base or ("HEAD" if changed() else "HEAD~1")
    walls: dict[str, list[float]] = {"base": [], "this": []}
    with worktree(base) as checkout:
        for run in range(args.runs):
            print(f"run {run + 1} of {args.runs}: {base} ...", file=sys.stderr, flush=True)
            before, seconds = prove(checkout, args.workers)
            walls["base"].append(seconds)
            print(f"run {run + 1} of {args.runs}: this checkout ...", file=sys.stderr, flush=True)
            after, seconds = prove(ROOT, args.workers)
            walls["this"].append(seconds)
    if len(before) != len(after):
        sys.exit(f"benchmarks.prove: {base} has {len(before)} obligations, this checkout {len(after)}")
    rows, differ = [], 0
    for old, new in zip(before, after, strict=True):
        same = (old["name"], old["policy"], old["status"]) == (new["name"], new["policy"], new["status"])
        differ += not same
        rows.append([f"{new['name']} ({new['policy']})", old["status"], new["status"], "same" if same else "DIFFERS",
                     f"{old['seconds']:.2f}", f"{new['seconds']:.2f}"])
    print(table(["obligation", f"status {base}", "status now", "", f"seconds {base}", "seconds now"], rows))
    ratios = [new / old for old, new in zip(walls["base"], walls["this"], strict=True)]
    print(f"loopcheck prove --no-cache, wall seconds (median of {args.runs}): {base} "
          f"{statistics.median(walls['base']):.1f}, now {statistics.median(walls['this']):.1f}, "
          f"ratio now/{base} {statistics.median(ratios):.2f}")
    print(f"solver seconds: {base} {sum(r['seconds'] for r in before):.1f}, now "
          f"{sum(r['seconds'] for r in after):.1f} (the last run)")
    print(f"statuses: {'every one the same' if not differ else f'{differ} of {len(rows)} DIFFER'}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
