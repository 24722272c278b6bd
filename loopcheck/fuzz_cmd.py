"""`loopcheck fuzz`: a time-boxed campaign of the stateful fuzzer on a system."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from loopcheck.adapters.loader import capabilities_of, load_factory
from loopcheck.campaign_report import write_report
from loopcheck.cluster import cluster_cpus, connect, in_tasks, put
from loopcheck.cluster_share import ClusterShare, deliver, open_hub
from loopcheck.fuzz.campaign import (
    BRANCHES,
    GUIDANCE,
    CampaignResult,
    Finding,
    main_progress,
    run_campaign,
    unshrunk_finding,
)
from loopcheck.fuzz.directed import WINDOWS
from loopcheck.fuzz.grouping import group_findings
from loopcheck.fuzz.machine import Stats
from loopcheck.fuzz.seeds import derived_seed
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.strategies import Shape
from loopcheck.model.workload import FEATURES
from loopcheck.options import add_adapter, add_check_mode, add_cluster, check_set_of
from loopcheck.report import banner, checks_not_run, command_line, not_run_line, reproduce_line
from loopcheck.runctl.pool import in_processes


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
    p.add_argument("--max-examples", type=int, metavar="N",
                   help="also stop after N examples per worker (a work bound: with --shrink-replays and a fresh "
                        "--out, the same seed gives the same campaign whatever the machine's load)")
    p.add_argument("--seed", type=int, help="default: a fresh random seed (printed)")
    p.add_argument("--out", default="loopcheck-fuzz", help="example database and counterexamples")
    p.add_argument("--workers", type=int, default=1, help="parallel campaigns with seeds derived from --seed")
    add_cluster(p, "the campaigns")
    p.add_argument("--configs", choices=("regression", "random"), default=None,
                   help="the regression config, or random small configs covering every switch (default: "
                        "regression for systems with loopcheck's semantics, else random)")
    p.add_argument("--shape", default="", metavar="NAME=on|off|INT,...",
                   help=f"workload features: {', '.join(Shape.__dataclass_fields__)} (default all on; the "
                        f"deployment features, {', '.join(FEATURES)}, only where the system claims them, "
                        "capabilities.features)")
    p.add_argument("--db", help="example database: a folder (default OUT/db) or redis://host:port/n")
    p.add_argument("--guidance", choices=GUIDANCE, default=None,
                   help="what aims the rounds between random batches: model (windows the reference model "
                        "reads), system (coverage of the system's own code, trace features, a corpus and its "
                        "mutations) or both; default: both for systems with loopcheck's semantics, else system")
    p.add_argument("--keep-going", action="store_true",
                   help="report every distinct bug: shrink and write each finding once, then go on with its "
                        "signature ignored until the budget is spent")
    p.add_argument("--json", action="store_true", help="print one JSON summary")


def _worker(job: tuple) -> CampaignResult:
    adapter, checks, policy, budget, seed_value, out, mode, db, shape, replays, keep_going, max_examples, guidance, \
        label, share = job

    def progress(line: str) -> None:
        main_progress(f"{label}{line}")

    return run_campaign(CampaignSettings(
        policy, budget, seed_value, Path(out), mode, db, load_factory(adapter), checks, Shape.parse(shape),
        max_replays=replays, keep_going=keep_going, max_examples=max_examples, guidance=guidance, share=share),
        progress=progress if label is not None else None)


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
    if args.max_examples is not None and args.max_examples < 1:
        print(f"loopcheck fuzz: error: --max-examples must be >= 1, got {args.max_examples}", file=sys.stderr)
        return 2
    if args.shrink_replays is not None and not 0 <= args.shrink_replays <= 100_000:
        print(f"loopcheck fuzz: error: --shrink-replays must be in [0, 100000], got {args.shrink_replays}",
              file=sys.stderr)
        return 2
    shape = Shape.parse(args.shape)
    factory = load_factory(args.adapter)
    caps = capabilities_of(factory)
    checks = check_set_of(args, caps.semantics)
    check = checks.mode
    configs = args.configs or ("regression" if caps.semantics == "loopcheck" else "random")
    seed_value = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    ray = connect(args.cluster) if args.cluster else None
    workers = args.workers if ray is None or args.workers > 1 else cluster_cpus(ray)
    argv = ["fuzz", "--adapter", args.adapter, *checks.flags(), "--policy", args.policy, "--budget-seconds",
            f"{args.budget_seconds:g}", "--seed", str(seed_value), "--out", args.out, "--configs", configs,
            "--workers", str(workers), "--shape", str(shape)]
    argv += ["--cluster", args.cluster] if args.cluster else []
    argv += ["--db", args.db] if args.db else []
    argv += ["--guidance", args.guidance] if args.guidance else []
    argv += ["--keep-going"] if args.keep_going else []
    argv += ["--max-examples", str(args.max_examples)] if args.max_examples is not None else []
    argv += ["--json"] if args.json else []
    argv += ["--shrink-replays", str(args.shrink_replays)] if args.shrink_replays is not None else []
    banner(seed_value, argv, sys.stderr)
    db = args.db or str(Path(args.out) / "db")
    hub = None if ray is None else open_hub(ray, db, Path(args.out))
    jobs = [(args.adapter, checks, args.policy, args.budget_seconds, derived_seed(seed_value, "worker", w),
             str(Path(args.out) / f"w{w}"), configs, db, str(shape), args.shrink_replays, args.keep_going,
             args.max_examples, args.guidance, None if args.json else (f"w{w} " if workers > 1 else ""),
             None if hub is None else ClusterShare(hub, f"w{w}", db if db.startswith("redis://") else None))
            for w in range(workers)]
    if ray is not None:
        folders = [Path(args.out) / f"w{w}" for w in range(workers)]
        results = in_tasks(ray, _worker, jobs, folders, retries=0,
                           lost=lambda k, why: lost_campaign(ray, hub, jobs[k][4], folders[k], why),
                           poll=lambda: deliver(ray, hub))
    else:
        results = [_worker(jobs[0])] if workers == 1 else in_processes(_worker, jobs, workers)
    groups = group_findings(distinct_findings(results), factory, checks)
    findings = [f for g in groups for f in g.findings]   # (by cause, each cause's in the order found)
    number = {id(f): k for k, g in enumerate(groups, 1) for f in g.findings}
    summary = {
        "adapter": args.adapter, "check": check, "policy": args.policy, "seed": seed_value,
        "workers": workers, "examples": sum(r.stats.examples for r in results),
        "steps": sum(r.stats.steps for r in results),
        "branches_covered": sorted({b for r in results for b in BRANCHES if r.stats.branches[b]}),
        "windows": {name: sum(r.stats.windows[name] for r in results) for name in WINDOWS},
        "guidance": {**{name: sum(r.stats.guidance.get(name, 0) for r in results)
                        for name in ("corpus entries", "features")},
                     "code edges": len(frozenset().union(*(r.stats.edges for r in results)))},
        "checks_not_run": checks_not_run(sum((r.stats.not_run for r in results), Counter())),
        "refused": dict(sorted(sum((r.stats.refused for r in results), Counter()).items())),
        "ignored": [{"signature": signature, "runs": runs}
                    for signature, runs in sorted(sum((r.stats.ignored for r in results), Counter()).items())],
        "after_ignored": [{"signature": signature, "runs": runs} for signature, runs in
                          sorted(sum((r.stats.after_ignored for r in results), Counter()).items())],
        "counterexamples": [{"property": f.violation.prop, "signature": f.violation.signature,
                             "message": f.violation.message, "file": str(f.counterexample), "requests": f.requests,
                             "time_to_failure": f.time_to_failure, "notes": f.notes, "flaky": f.flaky,
                             "shrink_replays": f.shrink_replays, "bug": number[id(f)],
                             "replay": f"loopcheck replay {f.counterexample} --adapter {args.adapter} {f.checks}",
                             "reproduce": command_line(with_replays(argv, f.shrink_replays))} for f in findings],
        "bugs": [{"cause": g.cause, "signatures": g.signatures} for g in groups],
        "found_elsewhere": [{"signature": signature, "finds": finds} for signature, finds in
                            sorted(sum((r.stats.found_elsewhere for r in results), Counter()).items())],
        "lost": [{"campaign": f"w{w}", "why": r.lost, "findings": len(r.findings)}
                 for w, r in enumerate(results) if r.lost is not None],
        "shared": dict(sorted(sum((r.stats.shared for r in results), Counter()).items())),
        "interrupted": any(r.interrupted is not None for r in results),
    }
    summary["report"] = str(write_report(Path(args.out), command_line(argv), summary, findings, factory))
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['examples']} examples, {summary['steps']} steps, scheduler branches "
              f"{len(summary['branches_covered'])}/{len(BRANCHES)}: {' '.join(summary['branches_covered'])}")
        if any(summary["windows"].values()):
            print("rare windows run (directed rounds): "
                  + " ".join(f"{name}={count}" for name, count in summary["windows"].items()))
        if summary["guidance"]["features"]:
            print("guidance from the system: " + ", ".join(f"{count} {name}"
                                                          for name, count in summary["guidance"].items()))
        if summary["checks_not_run"]:
            print(not_run_line(summary["checks_not_run"], summary["examples"]))
        if summary["refused"]:
            print("requests the system refused (left out of their runs): " + "; ".join(
                f"{count} ({why})" for why, count in summary["refused"].items()))
        if summary["ignored"]:
            print("ignored: " + "; ".join(f"{c['signature']} in {c['runs']} of {summary['examples']} runs"
                                          for c in summary["ignored"])
                  + " (the run is judged on; what breaks after it is taken as its consequence)")
        if summary["after_ignored"]:
            print("not reported, as they came after an ignored finding in the same run: " + "; ".join(
                f"{c['signature']} in {c['runs']} runs" for c in summary["after_ignored"]))
        if summary["found_elsewhere"]:
            print("found again by other campaigns and not shrunk twice: " + "; ".join(
                f"{c['signature']} ({c['finds']} time{'s' if c['finds'] != 1 else ''})"
                for c in summary["found_elsewhere"]))
        for c in summary["lost"]:
            print(f"LOST campaign {c['campaign']} ({c['why']}): its {c['findings']} finding"
                  f"{'s' if c['findings'] != 1 else ''} before are kept, its examples not counted; the run "
                  "finished with the other campaigns")
        if args.keep_going or len(groups) > 1:
            print(f"{len(groups)} distinct bug{'s' if len(groups) != 1 else ''} found ({len(findings)} "
                  f"signature{'s' if len(findings) != 1 else ''}; grouped by cause: docs/checking.md, \"One bug, "
                  "one finding\")")
        shown = 0
        for c in summary["counterexamples"]:
            if c["bug"] != shown and len(groups) > 1:
                shown = c["bug"]
                bug = summary["bugs"][shown - 1]
                print(f"BUG {shown} (first departs at {bug['cause']}): {', '.join(bug['signatures'])}")
            found = f"found after {c['time_to_failure']:.1f}s" if c["time_to_failure"] is not None else "found"
            shrunk = f"shrunk to {c['requests']} requests" if not c["notes"] else "; ".join(c["notes"])
            print(f"{'FLAKY ' if c['flaky'] else ''}COUNTEREXAMPLE {c['signature']}: {c['message']}\n"
                  f"  {found}, {shrunk}: {c['file']}\n"
                  f"  replay: {c['replay']}\n"
                  f"  this file again, byte for byte: {c['reproduce']}")
    interrupted = [r.interrupted for r in results if r.interrupted is not None]
    if not findings and not args.json:
        spent = (f"in the {max(r.seconds for r in results):.1f}s before the interrupt" if interrupted
                 else f"in {max(r.seconds for r in results):.1f}s ({summary['examples']} examples)")
        print(f"no counterexample {spent} ({args.adapter}, {check} checks, policy {args.policy})")
    if not args.json:
        print(f"report: {summary['report']}")
    if interrupted:
        print(f"INTERRUPTED: the summary covers the run until then; {reproduce_line(argv)}", file=sys.stderr)
        return interrupted[0]
    return 1 if findings else 0


def lost_campaign(ray: Any, hub: Any, seed_value: int, folder: Path, why: str) -> CampaignResult:
    """What stands for a campaign whose worker or node died (`why`): the findings
    it published, and the one it was shrinking kept as found (its file as
    found written in its folder here); its coverage is not known."""
    findings, shrinking = ray.get(hub.left.remote(folder.name))
    if shrinking is not None:
        put(Path(shrinking.path), shrinking.data)
        findings.append(unshrunk_finding(folder, findings, shrinking.checks, None,
                                         "its campaign was lost while shrinking it: kept as found"))
    return CampaignResult(seed_value, 0.0, Stats(), findings, lost=why)


def distinct_findings(results: list[CampaignResult]) -> list[Finding]:
    """The findings of every worker, the first of each signature (workers
    search independently and may meet the same bug), in worker order."""
    seen: set[str] = set()
    out = []
    for f in (f for r in results for f in r.findings):
        if f.violation.signature not in seen:
            seen.add(f.violation.signature)
            out.append(f)
    return out
