"""Deep bugs in a scheduler loopcheck did not write: the bugs planted in the
prefix-cache and preemption paths of benchmarks/subjects/hashsched.py (a
block-hash prefix cache, chunked prefill, recompute preemption, its own
allocation scheme), each fuzzed from scratch in property mode on random configs
(with the system's guidance: coverage of its code, trace features, corpus and
mutations), plus a control that plants nothing and must survive. Per bug: how
many seeds found it within the budget, the property of the first finding, the
median time to it; then the kill rate (a bug is killed when most seeds find it)
and the median of the medians.

Usage: python -m benchmarks.deep_bugs [--seeds 3] [--budget 30] [--only BUG,...] [--guidance system|model|both]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.subjects.hashsched import BUGS, factory
from loopcheck.checks.suite import CheckSet
from loopcheck.fuzz.campaign import GUIDANCE, run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.report import table

CONTROL = "nothing planted (control)"


def hunt(bug: str | None, seed: int, budget: float, guidance: str) -> tuple[str | None, float | None]:
    """One campaign: the first finding's property and its time (None, None: none)."""
    with tempfile.TemporaryDirectory() as out:
        result = run_campaign(CampaignSettings("guarded", budget, seed, Path(out), "random",
                              factory=factory(*([bug] if bug else [])), checks=CheckSet("property"),
                              guidance=guidance))
    v = result.violation
    return (v.prop, result.time_to_failure) if v is not None else (None, None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--only", help="comma-separated bug names")
    parser.add_argument("--guidance", choices=GUIDANCE, default="system",
                        help="the campaigns' guided rounds (default system, as for any system without loopcheck's "
                             "semantics; model: the reference model's windows, blind here, for comparison)")
    args = parser.parse_args()
    bugs = [b for b in BUGS if not args.only or b in args.only.split(",")]
    rows, medians, killed = [], [], 0
    for bug in [*bugs, None]:
        found = [hunt(bug, seed, args.budget, args.guidance) for seed in range(1, args.seeds + 1)]
        times = [t for prop, t in found if prop is not None and t is not None]
        props = sorted({prop for prop, _ in found if prop is not None})
        median = statistics.median(times) if times else None
        name = bug or CONTROL
        if bug is None:
            verdict = "survived" if not props else "FALSE ALARM"
        elif 2 * len(times) > args.seeds:
            verdict, killed = "killed", killed + 1
            medians.append(median)
        else:
            verdict = "SURVIVED"
        rows.append([name, verdict, f"{len(times)}/{args.seeds}", ", ".join(props),
                     f"{median:.1f}" if median is not None else "", BUGS.get(bug or "", "")])
        print(f"  {name}: {verdict}", file=sys.stderr, flush=True)
    print(table(["bug", "result", "seeds that found it", "properties", "median seconds", "what it is"], rows))
    overall = f"{statistics.median(medians):.1f}s" if medians else "n/a"
    print(f"killed {killed}/{len(bugs)} ({100 * killed / max(len(bugs), 1):.0f}%), median time to detection "
          f"{overall}, budget {args.budget:g}s a campaign, seeds 1..{args.seeds}, guidance {args.guidance}")


if __name__ == "__main__":
    main()
