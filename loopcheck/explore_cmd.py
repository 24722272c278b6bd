"""`loopcheck explore`: exhaustive state-space exploration of the reference model on a workload, or
(`--scope`, loopcheck.scoped_cmd) of any system on every workload of a scope."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import networkx as nx

from loopcheck.explorer.explore import peak_memory_mb
from loopcheck.explorer.lasso_export import lasso_graph, lasso_workload, write_dot
from loopcheck.explorer.scope import PRESETS
from loopcheck.explorer.survey import Survey, survey
from loopcheck.model.bounds import preemption_bound
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import Workload, save_workload
from loopcheck.options import add_adapter, add_check_mode, add_cluster
from loopcheck.report import banner, table
from loopcheck.runctl.stop import Deadline
from loopcheck.runctl.ticker import Ticker
from loopcheck.scoped_cmd import DEFAULT_MAX_STATES, DEFAULT_OUT, run_scoped
from loopcheck.simulate_cmd import prepare

MODEL_MAX_STATES = 200_000
MODEL_ONLY = ("max_memory_mb", "no_reduce", "merge", "policy")   # the flags of each way of exploring
SCOPE_ONLY = ("adapter", "part", "keep_going", "check_key", "ignore", "check", "cluster")


def given_flags(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """Of these flags, those given (not left at their defaults), as typed."""
    return [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) not in (None, False, 0, [])]


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", nargs="?",
                   help="workload JSON (loopcheck/workload@1): explore the reference model on it (leave out with "
                        "--scope)")
    p.add_argument("--scope", metavar="PRESET|SCOPE_FILE",
                   help=f"explore every workload of this scope (a preset: {', '.join(PRESETS)}; a scope file, "
                        "docs/exploring.md; or a workload file, with --spread) on --adapter, ending in a "
                        "certificate (exit 0) or the shortest findings (exit 1)")
    add_adapter(p, None, "model (with --scope)")
    add_check_mode(p)
    p.add_argument("--part", metavar="K/N", help="with --scope: explore part K of N (combine the parts' "
                   "certificates with loopcheck combine)")
    add_cluster(p, "with --scope: the parts")
    p.add_argument("--keep-going", action="store_true",
                   help="with --scope: report every distinct signature in the scope (default: the shortest finding)")
    p.add_argument("--check-key", type=int, default=0, metavar="N",
                   help="with --scope: replay up to N merged states per unit from the root and compare them (a "
                        "divergence is an adapter fault, exit 2)")
    p.add_argument("--max-seconds", type=float,
                   help="stop after this long with an INCOMPLETE verdict")
    p.add_argument("--max-states", type=int, default=None,
                   help=f"stop at this many states with an INCOMPLETE verdict (default {MODEL_MAX_STATES}, with "
                        f"--scope {DEFAULT_MAX_STATES})")
    p.add_argument("--spread", type=int, default=0,
                   help="enumerate each request's arrival shifted by 0..SPREAD (the workload's, or with --scope a "
                        "workload file's: each shift a unit)")
    p.add_argument("--max-memory-mb", type=float,
                   help="stop when one process (this one or a worker) passes this peak memory (MiB), "
                   "with an INCOMPLETE verdict")
    p.add_argument("--workers", type=int, default=1,
                   help="processes exploring the family's variants, or with --scope its parts (same result as one)")
    p.add_argument("--no-reduce", action="store_true", help="keep finished requests' details")
    p.add_argument("--merge", action="store_true",
                   help="one node for all states of the family with the same futures (what is still to come and the "
                        "state but its step counter): fewer states, same verdict and worst cases; one process")
    p.add_argument("--policy", choices=("unguarded", "guarded"), help="override config.preemption_policy")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", metavar="DIR", help=f"write a found lasso (.json, .graphml, .dot); with --scope the "
                   f"certificate, report.md and counterexamples (default {DEFAULT_OUT})")


def argv_of(args: argparse.Namespace) -> list[str]:
    out = ["explore", args.workload, "--max-states", str(args.max_states), "--spread", str(args.spread),
           "--workers", str(args.workers)]
    out += ["--max-memory-mb", f"{args.max_memory_mb:g}"] if args.max_memory_mb is not None else []
    out += ["--max-seconds", f"{args.max_seconds:g}"] if args.max_seconds is not None else []
    out += ["--no-reduce"] if args.no_reduce else []
    out += ["--merge"] if args.merge else []
    out += ["--policy", args.policy] if args.policy else []
    out += ["--out", args.out] if args.out else []
    return out


class Progress:
    """A progress line on stderr about every 2 s: states, states/s, what is left
    (`left`: what the second number counts), peak memory."""

    def __init__(self, left: str) -> None:
        self.ticker = Ticker()
        self.left = left

    def __call__(self, states: int, left: int) -> None:
        if not self.ticker.due():
            return
        elapsed = self.ticker.elapsed
        print(f"[{elapsed:6.1f}s] states {states:,}, {states / max(elapsed, 1e-9):,.0f} states/s, {self.left} "
              f"{left:,}, memory {peak_memory_mb():,.0f} MiB", file=sys.stderr, flush=True)


def summary(workload: Workload, args: argparse.Namespace) -> tuple[dict[str, Any], Survey]:
    start = time.perf_counter()
    deadline = Deadline(args.max_seconds)
    found = survey(workload, args.spread, not args.no_reduce, args.max_states, args.max_memory_mb, args.workers,
                   progress=Progress("queue" if args.merge else "variants left"), merge=args.merge, deadline=deadline)
    live = found.liveness
    seconds = time.perf_counter() - start
    figures = {
        "states": found.states, "states_explored": found.explored, "transitions": found.transitions,
        "depth": found.depth,
        "drained_states": found.drained, "states_that_can_drain": live.can_drain,
        "livelock": live.livelock, "non_progress_cycles": live.non_progress_sccs,
        "unrealisable_cycles": live.unrealisable_cycles,
        "worst_drain_steps": live.worst_drain_steps, "worst_preemptions": live.worst_preemptions,
        "preemption_bound": preemption_bound(workload),
        "fingerprint_collision_probability": float(f"{found.collision_probability:.2g}"),
        "complete": found.complete, "seconds": round(seconds, 3),
        "states_per_second": round(found.states / max(seconds, 1e-9)),
        "peak_memory_mb": round(peak_memory_mb(children=True)),   # workers included
    }
    return figures, found


def run(args: argparse.Namespace) -> int:
    """Explore every state of the reference model on a workload, or every workload of a scope on any system."""
    if args.scope is not None:
        if args.workload is not None:
            raise WorkloadError("give a workload (the model's states) or --scope (any system), not both")
        for flag in given_flags(args, MODEL_ONLY):
            raise WorkloadError(f"{flag} explores the model on a workload: not with --scope")
        return run_scoped(args)
    if args.workload is None:
        raise WorkloadError("give a workload JSON (the model's states) or --scope NAME|FILE (any system)")
    for flag in given_flags(args, SCOPE_ONLY):
        raise WorkloadError(f"{flag} needs --scope")
    args.max_states = args.max_states or MODEL_MAX_STATES
    memory, seconds = args.max_memory_mb, args.max_seconds
    if args.max_states < 1 or args.spread < 0 or args.workers < 1 or any(
            bound is not None and not (math.isfinite(bound) and bound > 0) for bound in (memory, seconds)):
        print("loopcheck explore: error: --max-states and --workers must be >= 1, --spread >= 0, and "
              "--max-memory-mb and --max-seconds numbers > 0", file=sys.stderr)
        return 2
    if args.merge and args.workers > 1:
        print("loopcheck explore: error: --merge explores the family as one graph, on one process: "
              "leave out --workers", file=sys.stderr)
        return 2
    workload = prepare(args)
    banner(None, argv_of(args), sys.stderr if args.json else None)
    figures, found = summary(workload, args)
    live = found.liveness
    written = []
    if live.lasso is not None and args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        save_workload(lasso_workload(workload, args.spread, live.lasso), out / "lasso.json")
        small = lasso_graph(live.lasso)
        nx.write_graphml(small, out / "lasso.graphml")
        write_dot(small, out / "lasso.dot")
        written = [str(out / n) for n in ("lasso.json", "lasso.graphml", "lasso.dot")]
    if args.json:
        print(json.dumps({**figures, "files": written}))
    else:
        print(table(["figure", "value"], [[k, "-" if v is None else v] for k, v in figures.items()]))
        if live.livelock:
            print(f"LIVELOCK: a lasso of {len(live.lasso.stem) - 1} steps then a cycle of "
                  f"{len(live.lasso.cycle) - 1} steps in which nothing finishes.")
        if not found.complete:   # (a lasso among the states explored is a livelock all the same)
            cap = (f"the time cap of {seconds:g} s" if seconds is not None and figures["seconds"] >= seconds
                   else f"the memory cap of {memory:g} MiB" if memory is not None and figures["peak_memory_mb"] > memory
                   else f"the state cap of {args.max_states}")
            print(f"INCOMPLETE: {cap} cut exploration short; " + (
                "the figures cover the states explored." if live.livelock else "no verdict."))
        elif not live.livelock:
            print(f"no livelock: all {found.states} reachable states can drain.")
        for path in written:
            print(f"written: {path}")
    if not found.complete:
        return 1
    return 1 if live.livelock else 0
