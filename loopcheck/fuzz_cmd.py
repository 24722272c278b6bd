"""`loopcheck fuzz`: a time-boxed campaign of the stateful lockstep fuzzer."""

from __future__ import annotations

import argparse
import json
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fuzz.campaign import BRANCHES, CampaignResult, main_progress, run_campaign
from loopcheck.report import banner


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", choices=("unguarded", "guarded"), default="guarded")
    p.add_argument("--budget-seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, help="default: a fresh random seed (printed)")
    p.add_argument("--out", default="loopcheck-fuzz", help="example database and counterexamples")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--configs", choices=("regression", "random"), default="regression",
                   help="the regression config, or random small configs covering every switch")
    p.add_argument("--db", help="example database: a folder (default OUT/db) or redis://host:port/n")
    p.add_argument("--json", action="store_true")


def _worker(args: tuple) -> CampaignResult:
    policy, budget, seed_value, out, mode, db, progress = args
    return run_campaign(policy, budget, seed_value, Path(out), mode, db,
                        progress=main_progress if progress else None)


def run(args: argparse.Namespace) -> int:
    """Fuzz the engine against the reference model (exit 1 on a counterexample)."""
    if args.budget_seconds <= 0 or args.workers < 1:
        print("loopcheck fuzz: error: --budget-seconds must be > 0 and --workers >= 1", file=sys.stderr)
        return 2
    seed_value = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    argv = ["fuzz", "--policy", args.policy, "--budget-seconds", f"{args.budget_seconds:g}", "--seed",
            str(seed_value), "--out", args.out, "--configs", args.configs, "--workers", str(args.workers)]
    banner(seed_value, argv, sys.stderr)
    jobs = [(args.policy, args.budget_seconds, seed_value + 100_003 * w, str(Path(args.out) / f"w{w}"),
             args.configs, args.db or str(Path(args.out) / "db"), not args.json)
            for w in range(args.workers)]
    if args.workers == 1:
        results = [_worker(jobs[0])]
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            results = list(pool.map(_worker, jobs))
    failed = [r for r in results if r.violation is not None]
    summary = {
        "policy": args.policy, "seed": seed_value, "workers": args.workers,
        "examples": sum(r.stats.examples for r in results), "steps": sum(r.stats.steps for r in results),
        "branches_covered": sorted({b for r in results for b in BRANCHES if r.stats.branches[b]}),
        "counterexamples": [{"property": r.violation.prop, "message": r.violation.message,
                             "file": str(r.counterexample), "requests": r.requests,
                             "time_to_failure": r.time_to_failure} for r in failed],
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['examples']} examples, {summary['steps']} steps, scheduler branches "
              f"{len(summary['branches_covered'])}/{len(BRANCHES)}: {' '.join(summary['branches_covered'])}")
        for c in summary["counterexamples"]:
            print(f"COUNTEREXAMPLE {c['property']}: {c['message']}\n  found after {c['time_to_failure']:.1f}s, "
                  f"shrunk to {c['requests']} requests: {c['file']}\n  replay: loopcheck replay {c['file']}")
        if not failed:
            print(f"no counterexample in {args.budget_seconds:g}s (policy {args.policy})")
    return 1 if failed else 0
