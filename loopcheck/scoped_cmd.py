"""`loopcheck explore --scope`: every workload of a scope on any system, ending in
a certificate or the shortest findings; and `loopcheck combine`, which adds the
certificates of parts into one."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from loopcheck.adapters.loader import capabilities_of, load_factory, warn_costly
from loopcheck.certificate_report import certificate_lines, write_report
from loopcheck.checks.counterexample import numbered_paths, write_counterexample
from loopcheck.checks.suite import CheckSet
from loopcheck.cluster import cluster_cpus, connect, in_tasks
from loopcheck.driver.driver import within
from loopcheck.explorer.certificate import Certificate, certificate_from_json, certificate_of, combine
from loopcheck.explorer.scope import WorkloadScope, load_scope
from loopcheck.explorer.scoped import Finding, Limits, Plan, Result, Tally, explore_units, make_plan, shortest
from loopcheck.model.errors import WorkloadError
from loopcheck.options import check_set_of
from loopcheck.report import banner, command_line
from loopcheck.runctl.pool import in_processes
from loopcheck.runctl.stop import Deadline, OutOfTime
from loopcheck.runctl.ticker import Ticker
from loopcheck.sut.protocol import Capabilities

CERTIFICATE = "certificate.json"
DEFAULT_OUT = "loopcheck-explore"
DEFAULT_MAX_STATES = 2_000_000


def parse_part(text: str) -> tuple[int, int]:
    """'K/N' as (K, N), 1 <= K <= N (WorkloadError otherwise)."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise WorkloadError(f"--part: expected K/N with 1 <= K <= N, got {text!r}")
    return int(k), int(n)


class Progress:
    """A progress line on stderr about every 2 s: units done, states, transitions."""

    def __init__(self, label: str) -> None:
        self.ticker, self.label = Ticker(), label

    def __call__(self, done: int, units: int, tally: Tally) -> None:
        if self.ticker.due():
            elapsed = self.ticker.elapsed
            print(f"[{elapsed:6.1f}s] {self.label}units {done:,}/{units:,}, states {tally.states:,}, transitions "
                  f"{tally.transitions:,} ({tally.transitions / max(elapsed, 1e-9):,.0f}/s), findings "
                  f"{sum(tally.met.values()):,}", file=sys.stderr, flush=True)


def finding_entry(finding: Finding, path: Path, adapter: str, checks: CheckSet) -> dict[str, Any]:
    v = finding.violation
    return {"signature": v.signature, "property": v.prop, "message": v.message, "steps": shortest(finding),
            "requests": len(finding.workload.requests), "unit": finding.unit, "seconds": finding.seconds,
            "file": str(path),
            "replay": command_line(["replay", str(path), "--adapter", adapter, *checks.flags()])}


def explore_part(job: tuple) -> dict[str, Any]:
    """Explore part K of N into `out` (its counterexample files and certificate
    written there); the certificate's JSON (incomplete, with no unit, if the
    deadline passed while the plan was made). Runs in a worker process too."""
    adapter, scope, checks, keep_going, limits, (k, n), out, label = job
    factory = load_factory(adapter)
    caps = Capabilities()
    try:
        caps = capabilities_of(factory, deadline=limits.deadline)
        plan: Plan = within(limits.deadline, lambda: make_plan(factory, scope, caps, limits.deadline))
        result = explore_units(factory, plan, plan.part(k, n), checks, limits, keep_going,
                               Progress(label) if label is not None else None)
    except OutOfTime:
        plan, result = Plan(scope, (), (), (), caps), Result(Tally(complete=False), [], 0.0, [])
    entries = []
    paths = numbered_paths(out, [finding.violation.prop for finding in result.findings])
    for finding, path in zip(result.findings, paths, strict=True):
        write_counterexample(path, finding.workload, finding.violation, finding.trace,
                             f"loopcheck explore --scope {scope.name}")
        entries.append(finding_entry(finding, path, adapter, checks))
    refused = [{"config": cfg.to_json(), "why": why} for cfg, why in plan.refused]
    refused_shapes = [{"config": c.config.to_json(), "prompt": list(shape.prompt), "max_tokens": shape.max_tokens,
                       "why": why} for c in plan.configs for shape, why in c.refused]
    cert = certificate_of(result, adapter, factory, caps, scope.to_json(), checks.flags(), keep_going, (k, n),
                          refused, refused_shapes, entries)
    data = cert.to_json()
    out.mkdir(parents=True, exist_ok=True)
    (out / CERTIFICATE).write_text(json.dumps(data, indent=1))
    return data


def gathered(cert: Certificate, out: Path) -> Certificate:
    """The certificate with its findings' files copied into `out` (named as a
    single run names them)."""
    for f, target in zip(cert.findings, numbered_paths(out, [f["property"] for f in cert.findings]), strict=True):
        if Path(f["file"]).resolve() != target.resolve():
            shutil.copyfile(f["file"], target)
            f["replay"] = f["replay"].replace(f["file"], str(target))
            f["file"] = str(target)
    return cert


def run_scoped(args: argparse.Namespace) -> int:
    """Explore every workload of a scope on a system (exit 0 with a certificate,
    1 on a finding or an incomplete exploration)."""
    max_seconds = args.max_seconds
    if args.workers < 1 or args.check_key < 0 or (max_seconds is not None and not (
            math.isfinite(max_seconds) and max_seconds > 0)):
        raise WorkloadError("--workers must be >= 1, --check-key >= 0 and --max-seconds a number > 0")
    if args.part and (args.workers > 1 or args.cluster):
        raise WorkloadError("--part runs one part in this process: leave out --workers and --cluster")
    adapter = args.adapter or "model"
    factory = load_factory(adapter)
    limits = Limits(args.max_states or DEFAULT_MAX_STATES, Deadline(max_seconds), args.check_key)
    try:
        caps = capabilities_of(factory, deadline=limits.deadline)
    except OutOfTime:
        print(f"INCOMPLETE: --max-seconds {max_seconds:g} passed while the system was being built: nothing explored")
        return 1
    checks = check_set_of(args, caps.semantics)
    scope = load_scope(args.scope, args.spread)   # (bad input stops here, before any work)
    if args.spread and not isinstance(scope, WorkloadScope):
        raise WorkloadError("--spread shifts a workload's arrivals: with --scope naming a workload file")
    warn_costly(factory, scope.config_list(caps.pinned))
    ray = connect(args.cluster) if args.cluster else None
    parts = args.workers if ray is None or args.workers > 1 else cluster_cpus(ray)
    part = parse_part(args.part) if args.part else (1, parts)
    out = Path(args.out or DEFAULT_OUT)
    argv = ["explore", "--adapter", adapter, "--scope", args.scope, *checks.flags(), "--out", str(out)]
    argv += ["--spread", str(args.spread)] if args.spread else []
    argv += ["--part", args.part] if args.part else ["--workers", str(parts)]
    argv += ["--cluster", args.cluster] if args.cluster else []
    argv += ["--keep-going"] if args.keep_going else []
    argv += ["--check-key", str(args.check_key)] if args.check_key else []
    banner(None, argv, sys.stderr)
    label = None if args.json else ""
    if args.part or (parts == 1 and ray is None):
        cert = certificate_from_json(explore_part((adapter, scope, checks, args.keep_going, limits, part, out,
                                                   label)), "explore")
    else:
        folders = [out / f"part-{k}" for k in range(1, parts + 1)]
        jobs = [(adapter, scope, checks, args.keep_going, limits, (k, parts), folder,
                 None if args.json else f"part {k}: ") for k, folder in enumerate(folders, 1)]
        done = in_processes(explore_part, jobs, parts) if ray is None else in_tasks(ray, explore_part, jobs, folders)
        cert = gathered(combine([certificate_from_json(data, "explore") for data in done]), out)
        (out / CERTIFICATE).write_text(json.dumps(cert.to_json(), indent=1))
    return report(cert, out, command_line(argv), factory, checks, args.json)


def report(cert: Certificate, out: Path, command: str, factory: Any, checks: CheckSet, as_json: bool) -> int:
    """Print the certificate (text or JSON), write report.md; the exit code."""
    path = write_report(out, command, cert, factory, checks)
    if as_json:
        print(json.dumps({**cert.to_json(), "report": str(path), "certificate": str(out / CERTIFICATE)}))
    else:
        print("\n".join(certificate_lines(cert)))
        print(f"certificate: {out / CERTIFICATE}, report: {path}")
    return 0 if cert.whole and cert.tally.complete and not cert.findings else 1


def register_combine(p: argparse.ArgumentParser) -> None:
    p.add_argument("certificates", nargs="+", metavar="CERTIFICATE",
                   help="certificate.json files of the parts of one exploration (loopcheck explore --part K/N)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"where the combined certificate goes (default {DEFAULT_OUT})")
    p.add_argument("--json", action="store_true", help="print the combined certificate as JSON")


def run_combine(args: argparse.Namespace) -> int:
    """Combine the certificates of an exploration's parts into the one a single run gives."""
    certs = []
    for name in args.certificates:
        try:
            data = json.loads(Path(name).read_text())
        except (OSError, ValueError) as exc:
            raise WorkloadError(f"{name}: cannot read a certificate ({exc})") from None
        certs.append(certificate_from_json(data, name))
    out = Path(args.out)
    cert = gathered(combine(certs), out)
    (out / CERTIFICATE).write_text(json.dumps(cert.to_json(), indent=1))
    factory = load_factory(cert.system)
    return report(cert, out, command_line(["combine", *args.certificates, "--out", str(out)]), factory,
                  CheckSet.from_flags(cert.checks), args.json)
