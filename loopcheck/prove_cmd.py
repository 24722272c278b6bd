"""`loopcheck prove`: discharge the z3 obligations and write counterexamples."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

from loopcheck.model.config import Config
from loopcheck.model.workload import load_workload, save_workload
from loopcheck.options import add_proof_cache, proof_cache_of
from loopcheck.proofs.obligations import ProofPlan, run_all
from loopcheck.proofs.result import DISAGREES, ProofResult
from loopcheck.report import banner, table
from loopcheck.shipped import shipped_example

DEFAULT_CONFIG = "livelock.json"   # shipped (loopcheck.shipped)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=int, default=3,
                   help="K: requests in the KV/admission encodings and the bounded lasso search "
                        "(2..6: a waiting request and a victim at least)")
    p.add_argument("--steps", type=int, default=6, help="k: unrolled steps of the bounded lasso search (1..16)")
    p.add_argument("--drain-requests", type=int, default=6,
                   help="requests in the unbounded drain proofs (1..8; a proof for N covers every workload "
                        "of at most N requests)")
    p.add_argument("--full", action="store_true",
                   help="prove drain with prefix caching at --drain-requests too (default: at most 4 requests "
                        "there; its step is larger, so this takes longer)")
    p.add_argument("--config", help="workload file whose config the lasso search uses and whose modes get their "
                                    "own drain row (default: the regression config)")
    p.add_argument("--only", action="append", default=[], metavar="LABEL,...",
                   help="the obligations whose labels start so (binding, kv-conservation, drain/guarded, "
                        "livelock-search, ...; as the progress lines name them)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="processes discharging obligations, each with its own z3 context (default: the cores)")
    p.add_argument("--timings", action="store_true",
                   help="print one row per obligation: name, status, seconds, cached or not")
    add_proof_cache(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--out", metavar="DIR", help="write counterexample files here")


def argv_of(args: argparse.Namespace) -> list[str]:
    out = ["prove", "--requests", str(args.requests), "--steps", str(args.steps),
           "--drain-requests", str(args.drain_requests)]
    if args.full:
        out.append("--full")
    if args.config:
        out += ["--config", args.config]
    if args.out:
        out += ["--out", args.out]
    out += [f"--only={label}" for label in args.only]
    out += ["--no-cache"] if args.no_cache else ["--cache", args.cache] if args.cache else []
    return out


def base_config(args: argparse.Namespace) -> Config:
    return load_workload(args.config or shipped_example(DEFAULT_CONFIG)).config


def write_junit(results: list[ProofResult], path: str) -> None:
    suite = ET.Element("testsuite", name="loopcheck prove", tests=str(len(results)),
                       failures=str(sum(not r.as_expected for r in results)))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"prove.{r.policy}", name=r.name,
                             time=f"{r.seconds:.3f}")
        if not r.as_expected:
            ET.SubElement(case, "failure", message=f"{r.status}, expected {r.expected}").text = r.detail
    ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)


def prove(args: argparse.Namespace, quiet: bool = False) -> tuple[list[ProofResult], list[str]]:
    """Run every obligation; write counterexamples to --out. Returns the results
    and the files written."""
    def progress(label: str) -> None:
        if not quiet:
            print(f"  {label}", file=sys.stderr, flush=True)

    only = [label.strip() for given in args.only for label in given.split(",") if label.strip()]
    pairs = run_all(ProofPlan(base_config(args), args.requests, args.steps, args.drain_requests, args.full), progress,
                    args.workers, proof_cache_of(args), only)
    written = []
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        for result, workload in pairs:
            if workload is not None:
                path = Path(args.out) / f"{result.name}-{result.policy}.json"
                save_workload(workload, path)
                written.append(str(path))
    return [r for r, _ in pairs], written


def run(args: argparse.Namespace) -> int:
    """Bind the encodings to model/, prove drain (unbounded) and the admission
    rules with z3, find the unguarded livelock; bounded results say so."""
    if not 2 <= args.requests <= 6 or not 1 <= args.steps <= 16 or not 1 <= args.drain_requests <= 8 or (
            args.workers is not None and args.workers < 1):
        print("loopcheck prove: error: --requests must be 2..6, --steps 1..16, --drain-requests 1..8 and "
              "--workers >= 1", file=sys.stderr)
        return 2
    banner(None, argv_of(args), sys.stderr if args.json else None)
    results, written = prove(args, quiet=args.json)
    if args.junit:
        write_junit(results, args.junit)
    if not results:
        print(f"loopcheck prove: error: --only {','.join(args.only)}: no obligation's label starts so",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([r.to_json() for r in results]))
    elif args.timings:
        rows = [[f"{r.name} ({r.policy})", r.status, f"{r.seconds:.2f}", "cached" if r.cached else ""]
                for r in results]
        print(table(["obligation", "status", "seconds", "cached"], rows))
        print(f"{sum(r.cached for r in results)} of {len(results)} from the cache; computed: "
              f"{sum(r.seconds for r in results if not r.cached):.1f} s of solver time")
    else:
        rows = [[r.name, r.policy, r.status, r.expected, "ok" if r.as_expected else "FAIL",
                 f"{r.seconds:.2f}", "cached" if r.cached else "", r.detail] for r in results]
        print(table(["obligation", "policy", "result", "expected", "", "seconds", "cached", "detail"], rows))
        for path in written:
            print(f"counterexample written: {path} (replay: loopcheck replay {path})")
    for r in results:
        if r.status == DISAGREES:
            print(f"loopcheck prove: {r.detail}", file=sys.stderr)
    return 0 if all(r.as_expected for r in results) else 1
