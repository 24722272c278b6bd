"""`loopcheck fuzz`: a time-boxed campaign of the stateful fuzzer on a system."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fuzz.campaign import BRANCHES, CampaignResult, main_progress, run_campaign
from fuzz.directed import WINDOWS
from fuzz.strategies import Shape
from loopcheck.options import add_adapter, add_check_mode, check_set_of
from loopcheck.report import banner, checks_not_run, command_line, not_run_line, reproduce_line
from sut.loader import capabilities_of, load_factory


def register(p: argparse.ArgumentParser) -> None:
    add_adapter(p, "torch")
    add_check_mode(p)
    p.add_argument("--policy", choices=("unguarded", "guarded"), default="guarded",
                   help="config.preemption_policy of the drawn configs")
    p.add_argument("--budget-seconds", type=float, default=60.0,
                   help="the whole campaign's time, shrinking a failure included (default 60)")
    p.add_argument("--shrink-replays", type=int, metavar="N",
                   help="shrink with exactly this work bound (replays), whatever the time; default: until the "
                        "budget is spent or 400 replays. A counterexample's reproduce line gives the value that "
                        "reproduces its file byte for byte")
    p.add_argument("--seed", type=int, help="default: a fresh random seed (printed)")
    p.add_argument("--out", default="loopcheck-fuzz", help="example database and counterexamples")
    p.add_argument("--workers", type=int, default=1, help="parallel campaigns with seeds derived from --seed")
    p.add_argument("--configs", choices=("regression", "random"), default=None,
                   help="the regression config, or random small configs covering every switch (default: "
                        "regression for systems with loopcheck's semantics, else random)")
    p.add_argument("--shape", default="", metavar="NAME=on|off|INT,...",
                   help=f"workload features: {', '.join(Shape.__dataclass_fields__)} (default all on)")
    p.add_argument("--db", help="example database: a folder (default OUT/db) or redis://host:port/n")
    p.add_argument("--json", action="store_true", help="print one JSON summary")


def _worker(job: tuple) -> CampaignResult:
    adapter, checks, policy, budget, seed_value, out, mode, db, shape, replays, label = job

    def progress(line: str) -> None:
        main_progress(f"{label}{line}")

    return run_campaign(policy, budget, seed_value, Path(out), mode, db, load_factory(adapter), checks,
                        Shape.parse(shape), max_replays=replays, progress=progress if label is not None else None)


def with_replays(argv: list[str], replays: int) -> list[str]:
    """The command line with `--shrink-replays` set to `replays`."""
    if "--shrink-replays" in argv:
        at = argv.index("--shrink-replays")
        return argv[:at] + argv[at + 2:] + ["--shrink-replays", str(replays)]
    return argv + ["--shrink-replays", str(replays)]


def run(args: argparse.Namespace) -> int:
    """Fuzz a system with its property (and lockstep) checks (exit 1 on a counterexample)."""
    if not (math.isfinite(args.budget_seconds) and args.budget_seconds > 0) or args.workers < 1:
        print("loopcheck fuzz: error: --budget-seconds must be a finite number > 0 and --workers >= 1",
              file=sys.stderr)
        return 2
    if args.shrink_replays is not None and not 0 <= args.shrink_replays <= 100_000:
        print(f"loopcheck fuzz: error: --shrink-replays must be in [0, 100000], got {args.shrink_replays}",
              file=sys.stderr)
        return 2
    shape = Shape.parse(args.shape)
    caps = capabilities_of(load_factory(args.adapter))
    checks = check_set_of(args, caps.semantics)
    check = checks.mode
    configs = args.configs or ("regression" if caps.semantics == "loopcheck" else "random")
    seed_value = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    argv = ["fuzz", "--adapter", args.adapter, *checks.flags(), "--policy", args.policy, "--budget-seconds",
            f"{args.budget_seconds:g}", "--seed", str(seed_value), "--out", args.out, "--configs", configs,
            "--workers", str(args.workers), "--shape", str(shape)]
    argv += ["--db", args.db] if args.db else []
    argv += ["--json"] if args.json else []
    argv += ["--shrink-replays", str(args.shrink_replays)] if args.shrink_replays is not None else []
    banner(seed_value, argv, sys.stderr)
    jobs = [(args.adapter, checks, args.policy, args.budget_seconds, seed_value + 100_003 * w,
             str(Path(args.out) / f"w{w}"), configs, args.db or str(Path(args.out) / "db"), str(shape),
             args.shrink_replays, None if args.json else (f"w{w} " if args.workers > 1 else ""))
            for w in range(args.workers)]
    if args.workers == 1:
        results = [_worker(jobs[0])]
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            futures = [pool.submit(_worker, job) for job in jobs]
            try:
                results = [f.result() for f in futures]
            except KeyboardInterrupt:   # stop the workers too; their files stay
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
                raise
    failed = [r for r in results if r.violation is not None]
    summary = {
        "adapter": args.adapter, "check": check, "policy": args.policy, "seed": seed_value,
        "workers": args.workers, "examples": sum(r.stats.examples for r in results),
        "steps": sum(r.stats.steps for r in results),
        "branches_covered": sorted({b for r in results for b in BRANCHES if r.stats.branches[b]}),
        "windows": {name: sum(r.stats.windows[name] for r in results) for name in WINDOWS},
        "checks_not_run": checks_not_run(sum((r.stats.not_run for r in results), Counter())),
        "ignored": [{"property": prop, "runs": sum(r.stats.ignored[prop] for r in results)}
                    for prop in sorted(checks.ignore)],
        "counterexamples": [{"property": r.violation.prop, "message": r.violation.message,
                             "file": str(r.counterexample), "requests": r.requests,
                             "time_to_failure": r.time_to_failure, "notes": r.notes,
                             "shrink_replays": r.shrink_replays,
                             "reproduce": command_line(with_replays(argv, r.shrink_replays))} for r in failed],
        "interrupted": any(r.interrupted is not None for r in results),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['examples']} examples, {summary['steps']} steps, scheduler branches "
              f"{len(summary['branches_covered'])}/{len(BRANCHES)}: {' '.join(summary['branches_covered'])}")
        print("rare windows run (directed rounds): "
              + " ".join(f"{name}={count}" for name, count in summary["windows"].items()))
        if summary["checks_not_run"]:
            print(not_run_line(summary["checks_not_run"], summary["examples"]))
        if summary["ignored"]:
            print("ignored (--ignore): " + "; ".join(f"{c['property']} broken in {c['runs']} of "
                                                     f"{summary['examples']} runs" for c in summary["ignored"])
                  + " (the check that found it is off for the rest of such a run)")
        for c in summary["counterexamples"]:
            found = f"found after {c['time_to_failure']:.1f}s" if c["time_to_failure"] is not None else "found"
            shrunk = f"shrunk to {c['requests']} requests" if not c["notes"] else "; ".join(c["notes"])
            print(f"COUNTEREXAMPLE {c['property']}: {c['message']}\n  {found}, {shrunk}: {c['file']}\n"
                  f"  replay: loopcheck replay {c['file']} --adapter {args.adapter} {checks}\n"
                  f"  this file again, byte for byte: {c['reproduce']}")
    interrupted = [r.interrupted for r in results if r.interrupted is not None]
    if not failed and not args.json:
        spent = (f"in the {max(r.seconds for r in results):.1f}s before the interrupt" if interrupted
                 else f"in {args.budget_seconds:g}s")
        print(f"no counterexample {spent} ({args.adapter}, {check} checks, policy {args.policy})")
    if interrupted:
        print(f"INTERRUPTED: the summary covers the run until then; {reproduce_line(argv)}", file=sys.stderr)
        return interrupted[0]
    return 1 if failed else 0
