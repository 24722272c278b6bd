"""`loopcheck explore`: exhaustive state-space exploration of the reference model."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import networkx as nx

from loopcheck.report import banner, table
from loopcheck.simulate_cmd import prepare
from model.bounds import preemption_bound
from model.explore import explore
from model.lasso_export import lasso_graph, lasso_workload, write_dot
from model.liveness import analyse
from model.workload import Workload, save_workload


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", help="workload JSON (loopcheck/workload@1)")
    p.add_argument("--max-states", type=int, default=200_000,
                   help="stop at this many states with an INCOMPLETE verdict (default 200000)")
    p.add_argument("--spread", type=int, default=0,
                   help="enumerate each request's arrival shifted by 0..SPREAD")
    p.add_argument("--no-reduce", action="store_true", help="keep finished requests' details")
    p.add_argument("--policy", choices=("unguarded", "guarded"), help="override config.preemption_policy")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", metavar="DIR", help="write a found lasso (.json, .graphml, .dot)")


def argv_of(args: argparse.Namespace) -> list[str]:
    out = ["explore", args.workload, "--max-states", str(args.max_states), "--spread", str(args.spread)]
    out += ["--no-reduce"] if args.no_reduce else []
    out += ["--policy", args.policy] if args.policy else []
    out += ["--out", args.out] if args.out else []
    return out


def summary(workload: Workload, args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    start = time.perf_counter()
    ex = explore(workload, args.max_states, args.spread, reduce=not args.no_reduce)
    live = analyse(ex)
    seconds = time.perf_counter() - start
    depth = max(nx.get_node_attributes(ex.graph, "depth").values(), default=0)
    figures = {
        "states": ex.states, "transitions": ex.transitions, "depth": depth,
        "drained_states": len(ex.drained), "states_that_can_drain": live.can_drain,
        "livelock": live.livelock, "non_progress_cycles": live.non_progress_sccs,
        "unrealisable_cycles": live.unrealisable_cycles,
        "worst_drain_steps": live.worst_drain_steps, "worst_preemptions": live.worst_preemptions,
        "preemption_bound": preemption_bound(workload),
        "complete": ex.complete, "seconds": round(seconds, 3),
    }
    return figures, (ex, live)


def run(args: argparse.Namespace) -> int:
    """Explore every reachable state; report livelocks and worst-case drain figures."""
    if args.max_states < 1 or args.spread < 0:
        print("loopcheck explore: error: --max-states must be >= 1 and --spread >= 0", file=sys.stderr)
        return 2
    workload = prepare(args)
    banner(None, argv_of(args), sys.stderr if args.json else None)
    figures, (ex, live) = summary(workload, args)
    written = []
    if live.lasso is not None and args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        save_workload(lasso_workload(workload, args.spread, ex.graph, live.lasso), out / "lasso.json")
        small = lasso_graph(ex.graph, live.lasso)
        nx.write_graphml(small, out / "lasso.graphml")
        write_dot(small, out / "lasso.dot")
        written = [str(out / n) for n in ("lasso.json", "lasso.graphml", "lasso.dot")]
    if args.json:
        print(json.dumps({**figures, "files": written}))
    else:
        print(table(["figure", "value"], [[k, "-" if v is None else v] for k, v in figures.items()]))
        if not ex.complete:
            print(f"INCOMPLETE: the state cap of {args.max_states} cut exploration short; no verdict.")
        elif live.livelock:
            print(f"LIVELOCK: a lasso of {len(live.lasso.stem) - 1} steps then a cycle of "
                  f"{len(live.lasso.cycle) - 1} steps in which nothing finishes.")
        else:
            print(f"no livelock: all {ex.states} reachable states can drain.")
        for path in written:
            print(f"written: {path}")
    if not ex.complete:
        return 1
    return 1 if live.livelock else 0
