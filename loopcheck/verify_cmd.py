"""`loopcheck verify`: the main job. On loopcheck's own engine (the default): prove,
explore the small configurations, and short fuzz campaigns of both policies (the
unguarded one until it finds the livelock, up to LIVELOCK_SEARCH budgets); exit 0
only if the guarded policy holds everywhere and the unguarded livelock is found by
every tool. On another system (`--adapter`): property-mode fuzz campaigns on
random configs it supports and an exploration of every workload of the tiny
scope (docs/exploring.md); exit 0 only if no property breaks."""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopcheck.checks.suite import CheckSet
from loopcheck.cluster import connect, in_tasks
from loopcheck.explorer.certificate import certificate_from_json
from loopcheck.explorer.scope import PRESETS
from loopcheck.explorer.scoped import Limits
from loopcheck.explorer.survey import survey
from loopcheck.fuzz.campaign import main_progress, run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.model.workload import load_workload
from loopcheck.options import add_adapter, add_cluster, add_proof_cache, proof_cache_of
from loopcheck.proofs.cache import ProofCache
from loopcheck.proofs.obligations import ProofPlan, run_all
from loopcheck.report import banner, checks_not_run, not_run_line, table
from loopcheck.runctl.pool import in_processes
from loopcheck.scoped_cmd import explore_part
from loopcheck.shipped import shipped_example

EXPLORE_CASES = (("livelock_min.json", 2), ("livelock.json", 0))
LIVELOCK_SEARCH = 4            # the unguarded campaign looks for the livelock up to this many budgets ...
LIVELOCK_SHRINK_REPLAYS = 120  # ... and shrinks it in at most this many replays (not in what time is left)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fuzz-seconds", type=float, default=15.0,
                   help="budget per campaign (three campaigns; the unguarded one looks for the livelock up to "
                        f"{LIVELOCK_SEARCH} times as long)")
    p.add_argument("--max-examples", type=int, metavar="N",
                   help="also end each campaign after N examples (a work bound: the same seed then gives the same "
                        "verdict whatever the machine's load)")
    p.add_argument("--seed", type=int, help="fuzz seed (default: fresh, printed)")
    p.add_argument("--out", help="folder for counterexamples (default: a temporary folder)")
    add_proof_cache(p)
    add_adapter(p, "torch")
    add_cluster(p, "the fuzz campaigns (and another system's exploration)", workers=False)


Row = list[object]


def prove_rows(cache: ProofCache | None) -> list[Row]:
    """`loopcheck prove`'s obligations with the drain rows of the guarded policy
    only (the policy verify vouches for; prove itself also has the unguarded
    refutations and no preemption); those read from `cache` say so."""
    base = load_workload(shipped_example("livelock.json")).config
    rows: list[Row] = []
    for result, _ in run_all(ProofPlan(base, 3, 6, 6, policies=("guarded",)),
                             lambda label: main_progress(f"  prove {label}"), cache=cache):
        rows.append([f"{result.name} ({result.policy})", "prove", result.status,
                     "ok" if result.as_expected else "FAIL",
                     f"{result.seconds:.2f} (cached)" if result.cached else f"{result.seconds:.2f}"])
    return rows


def explore_rows() -> list[Row]:
    rows: list[Row] = []
    for name, spread in EXPLORE_CASES:
        for policy in ("guarded", "unguarded"):
            main_progress(f"  explore {name} ({policy}, spread {spread}) ...")
            start = time.perf_counter()
            found = survey(load_workload(shipped_example(name)).with_config(preemption_policy=policy), spread)
            live = found.liveness
            seconds = time.perf_counter() - start
            if policy == "guarded":
                ok = found.complete and not live.livelock and live.can_drain == found.states
                status = f"all {found.states} states drain (worst {live.worst_drain_steps} steps)"
            else:
                ok = found.complete and live.livelock
                status = f"lasso found in {found.states} states" if live.livelock else "no lasso"
            if not found.complete:
                status = "INCOMPLETE (state cap)"
            rows.append([f"liveness {name} ({policy})", "explore", status, "ok" if ok else "FAIL",
                         f"{seconds:.2f}"])
    return rows


FUZZ_ROWS = (("guarded", "regression"), ("guarded", "random"), ("unguarded", "regression"))


def fuzz_rows(seconds: float, seed_value: int, out: Path, max_examples: int | None, ray: Any = None) -> list[Row]:
    """The guarded campaigns run `seconds` (or `max_examples`) each and must stay
    clean; the unguarded one must find the livelock, within LIVELOCK_SEARCH times
    as long (a time box of `seconds` missed it for a few percent of seeds, more
    on a loaded machine; it stops at the first livelock, so this costs time only
    then). The three are independent and run at once (`in_parallel`); the rows
    come in this order whatever finishes first."""
    from loopcheck.engine import llm_engine  # noqa: F401  (imported once, with torch, for the forked workers to share)

    jobs = [(policy, mode, seconds, seed_value, out, max_examples) for policy, mode in FUZZ_ROWS]
    return in_parallel(fuzz_row, jobs, [out / f"{policy}-{mode}" for policy, mode in FUZZ_ROWS], ray)


def in_parallel(fn: Callable[[Any], Any], jobs: list[Any], folders: list[Path], ray: Any) -> list[Any]:
    """fn(job) for every job at once: as tasks of the connected cluster `ray`
    (job k's files in `folders[k]` come back here), or else in a forked
    process each; the results in job order."""
    if ray is not None:
        return in_tasks(ray, fn, jobs, folders)
    return in_processes(fn, jobs, len(jobs), fork=True)


def fuzz_row(job: tuple[str, str, float, int, Path, int | None]) -> Row:
    """One campaign of `fuzz_rows` (run in a worker process), its progress lines
    named by the campaign."""
    policy, mode, seconds, seed_value, out, max_examples = job
    unguarded = policy == "unguarded"
    budget = seconds * LIVELOCK_SEARCH if unguarded else seconds
    name = f"{policy} on {mode} configs"
    main_progress(f"  fuzz {name} for {'up to ' if unguarded else ''}{budget:g}s ...")
    result = run_campaign(CampaignSettings(
        policy, budget, seed_value, out / f"{policy}-{mode}", mode,
        max_replays=LIVELOCK_SHRINK_REPLAYS if unguarded else None,
        max_examples=None if max_examples is None else max_examples * (LIVELOCK_SEARCH if unguarded else 1)),
        progress=lambda line: main_progress(f"  fuzz {name}: {line.strip()}"))
    v = result.violation
    if not unguarded:
        ok = v is None
        status = f"clean: {result.stats.examples} examples" if ok else f"{v.prop}: {result.counterexample}"
    else:
        ok = v is not None and v.prop == "livelock"
        status = (f"livelock after {result.time_to_failure:.1f}s, {result.requests} requests"
                  if ok else (f"{v.prop}: {result.counterexample}" if v else "no livelock found"))
    return [f"lockstep + liveness, {mode} configs ({policy})", "fuzz", status, "ok" if ok else "FAIL",
            f"{result.seconds:.2f}"]


AdapterRow = tuple[Row, Counter, int]   # a row, and the checks that did not run (why -> runs) in its runs


def adapter_rows(adapter: str, seconds: float, seed_value: int, out: Path, max_examples: int | None,
                 ray: Any = None) -> tuple[list[Row], str]:
    """Property-mode campaigns on another system, random configs it supports,
    with and without priority preemption, and every workload of the tiny scope
    explored, the three at once (`in_parallel`); and the line that says which
    checks did not run, in how many runs, and why."""
    jobs: list[tuple] = [(adapter_campaign, adapter, seconds, seed_value, out, max_examples, preempt)
                         for preempt in (True, False)]
    folders = [out / f"preemption-{preempt}" for preempt in (True, False)] + [out / "explore-tiny"]
    done: list[AdapterRow] = in_parallel(called, [*jobs, (scope_row, adapter, out)], folders, ray)
    not_run = sum((n for _, n, _ in done), Counter())
    runs = sum(r for _, _, r in done)
    return [row for row, _, _ in done], not_run_line(checks_not_run(not_run), runs) if not_run else ""


def called(job: tuple) -> Any:
    """job[0](*job[1:]): a job that names its own function (`adapter_rows`)."""
    fn, *args = job
    return fn(*args)


def adapter_campaign(adapter: str, seconds: float, seed_value: int, out: Path, max_examples: int | None,
                     preempt: bool) -> AdapterRow:
    """A property-mode campaign of `adapter_rows`, priority preemption on or off."""
    from loopcheck.options import factory_of

    factory = factory_of(argparse.Namespace(adapter=adapter))
    label = f"properties, random configs, priority preemption {'on' if preempt else 'off'}"
    main_progress(f"  fuzz {adapter}: {label} for {seconds:g}s ...")
    result = run_campaign(CampaignSettings(
        "guarded", seconds, seed_value, out / f"preemption-{preempt}", "random", factory=factory,
        checks=CheckSet("property"), fixed={"priority_preemption": preempt}, max_examples=max_examples),
        progress=lambda line: main_progress(f"  fuzz {adapter} (priority preemption {'on' if preempt else 'off'}): "
                                            f"{line.strip()}"))
    v = result.violation
    status = f"clean: {result.stats.examples} examples" if v is None else f"{v.prop}: {result.counterexample}"
    return ([label, "fuzz", status, "ok" if v is None else "FAIL", f"{result.seconds:.2f}"], result.stats.not_run,
            result.stats.examples)


def scope_row(adapter: str, out: Path) -> AdapterRow:
    """Every workload of the tiny scope explored on the system with its property
    checks: a certificate, or the shortest finding (its row; the line of checks
    that did not run counts the campaigns' runs only)."""
    main_progress(f"  explore {adapter}: every workload of the tiny scope ...")
    cert = certificate_from_json(explore_part((adapter, PRESETS["tiny"], CheckSet("property"), False, Limits(),
                                               (1, 1), out / "explore-tiny", "")), "verify")
    t = cert.tally
    if cert.findings:
        (f,) = cert.findings
        status, ok = f"{f['signature']} in {f['steps']} steps: {f['file']}", False
    elif not t.complete:
        status, ok = "INCOMPLETE", False
    else:
        status, ok = f"certificate: {t.workloads} workloads, {t.states} states, {t.transitions} transitions", True
    return (["properties, every workload of the tiny scope", "explore", status, "ok" if ok else "FAIL",
             f"{cert.seconds:.2f}"], Counter(), 0)


def run(args: argparse.Namespace) -> int:
    """The main job: prove, explore and fuzz; one verdict table."""
    if not (math.isfinite(args.fuzz_seconds) and args.fuzz_seconds > 0):
        print("loopcheck verify: error: --fuzz-seconds must be a finite number > 0", file=sys.stderr)
        return 2
    if args.max_examples is not None and args.max_examples < 1:
        print(f"loopcheck verify: error: --max-examples must be >= 1, got {args.max_examples}", file=sys.stderr)
        return 2
    seed_value = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    argv = ["verify", "--fuzz-seconds", f"{args.fuzz_seconds:g}", "--seed", str(seed_value), "--adapter", args.adapter]
    argv += ["--max-examples", str(args.max_examples)] if args.max_examples is not None else []
    argv += ["--out", args.out] if args.out else []
    argv += ["--no-cache"] if args.no_cache else ["--cache", args.cache] if args.cache else []
    argv += ["--cluster", args.cluster] if args.cluster else []
    banner(seed_value, argv)
    ray = connect(args.cluster) if args.cluster else None
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="loopcheck-verify-"))
    not_run = ""
    if args.adapter == "torch":
        rows = (prove_rows(proof_cache_of(args)) + explore_rows()
                + fuzz_rows(args.fuzz_seconds, seed_value, out, args.max_examples, ray))
    else:
        rows, not_run = adapter_rows(args.adapter, args.fuzz_seconds, seed_value, out, args.max_examples, ray)
    print(table(["obligation", "tool", "result", "", "seconds"], rows))
    if not_run:
        print(not_run)
    failed = [r for r in rows if r[3] != "ok"]
    if failed:
        print(f"VERDICT: FAIL ({len(failed)} of {len(rows)} checks); counterexamples under {out}")
        return 1
    if args.adapter != "torch":
        print(f"VERDICT: PASS: no property broke on {args.adapter} (files under {out})")
        return 0
    print(f"VERDICT: PASS: the guarded policy holds in every check and the unguarded livelock is found "
          f"by prove, explore and fuzz (files under {out})")
    return 0
