"""Exploration speed: states per second on one and on two processes, memory per
state (the explored graph plus the graph of futures, which is bounded), and
the effect of the finished-request reduction and of --merge, on the shipped
examples (livelock.json also at spread 1: many variants that livelock) and a
five-request family with stop-token choices at spreads 3 to 5 (rates: the
median of 3 runs, each version in a fresh process; states of translated
variants are derived, not explored: both rates are shown); then, for the
scaling over processes only, larger families (seconds each: livelock.json at
spread 2, the five-request family at spread 6); with --before, the same rates
of another version of loopcheck beside them; with --largest, the largest
spread of that family verified within a time limit. With --systems, instead: scoped
exploration (`loopcheck explore --scope`) of each named system at a preset with
--keep-going, so that every workload is run: its units, workloads, states,
transitions and transitions/s on one core (seconds: the median of --repeat runs;
the counts are the same in every run).

Usage: python -m benchmarks.explore [--spread N] [--largest SECONDS] [--before CHECKOUT]
       python -m benchmarks.explore --systems model,minisched,vllm,sglang,lmdeploy [--scope tiny] [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

from benchmarks.checkout import FROM_CHECKOUT
from loopcheck.explorer.explore import explore
from loopcheck.explorer.survey import survey
from loopcheck.model.workload import Workload, load_workload
from loopcheck.report import table
from tests.helpers import five_requests

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def cases(spread: int) -> list[tuple[str, Workload, int]]:
    out = []
    for name in ("livelock_min.json", "livelock_min.json+stop", "livelock.json"):
        for policy in ("unguarded", "guarded"):
            w = load_workload(EXAMPLES / name.split("+")[0]).with_config(preemption_policy=policy)
            if name.endswith("+stop"):  # stop tokens make finished requests' outcomes branch
                w = Workload(w.config, tuple(replace(r, stop_token=5) for r in w.requests))
            for s in (0, 1) if name == "livelock.json" else (spread,):
                out.append((f"{name} {policy}", w, s))
    out += [("five requests guarded", five_requests(), spread) for spread in (3, 4, 5)]
    return out


def larger() -> list[tuple[str, Workload, int]]:
    """Families that take seconds, where starting processes costs little: their
    rates on one and two processes only."""
    out = [(f"livelock.json {policy}", load_workload(EXAMPLES / "livelock.json").with_config(preemption_policy=policy),
            2) for policy in ("unguarded", "guarded")]
    return [*out, ("five requests guarded", five_requests(), 6)]


MEASURE = FROM_CHECKOUT + """
import json, statistics, time
from loopcheck.explorer.survey import survey
from loopcheck.model.workload import workload_from_json
w, spread, workers = workload_from_json(json.load(sys.stdin)), int(sys.argv[1]), int(sys.argv[2])
rates = []
for _ in range(3):
    start = time.perf_counter()
    found = survey(w, spread, workers=workers, max_states=10**8)
    rates.append(found.states / (time.perf_counter() - start))
print(json.dumps([found.states, getattr(found, "explored", found.states), statistics.median(rates)]))
"""


def rate(w: Workload, spread: int, workers: int, checkout: Path = ROOT) -> tuple[int, int, float]:
    """States of the family, those explored (the others derived from
    translations), and states per second, the median of 3 runs, as
    `checkout`'s own code (this one, or another version of loopcheck) explores
    it in a fresh process."""
    done = subprocess.run([sys.executable, "-c", MEASURE, str(spread), str(workers)], input=json.dumps(w.to_json()),
                          cwd=checkout, capture_output=True, text=True, check=True)
    states, explored, per_second = json.loads(done.stdout)
    return states, explored, per_second


def rates(w: Workload, spread: int, checkout: Path = ROOT) -> tuple[int, int, float, float]:
    """`rate` on one process and on two: states, explored, both states/s."""
    states, explored, one = rate(w, spread, 1, checkout)
    *_, two = rate(w, spread, 2, checkout)
    return states, explored, one, two


def bytes_per_state(w: Workload, spread: int) -> float:
    """Python heap per state while exploring the family (tracemalloc peak: the
    explored graph, plus one variant's fingerprints and queue)."""
    tracemalloc.start()
    ex = explore(w, spread=spread)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / ex.states


def largest(limit: float) -> None:
    for spread in itertools.count():
        start = time.perf_counter()
        found = survey(five_requests(), spread, max_states=10**9, workers=2)
        seconds = time.perf_counter() - start
        verdict = "complete" if found.complete else "INCOMPLETE"
        print(f"five requests, spread {spread}: {found.states:,} states ({found.explored:,} explored) in "
              f"{seconds:.1f}s on 2 processes ({found.states / seconds:,.0f} states/s), "
              f"{verdict}", file=sys.stderr, flush=True)
        if seconds > limit or not found.complete:
            break


SYSTEMS = {"minisched": "examples/adapter/minisched_adapter.py:MiniSchedSUT",   # short names of the others
           "turnsched": "examples/plain/turnsched_adapter.py:TurnschedSUT"}


def scoped_rows(systems: list[str], scope_name: str, repeat: int) -> list[list[object]]:
    """Per system: the tally of a keep-going exploration of the scope, and its
    transitions per second (the median of `repeat` runs, each in this process)."""
    from loopcheck.adapters.loader import capabilities_of, load_factory
    from loopcheck.checks.suite import CheckSet, default_mode
    from loopcheck.explorer.scope import load_scope
    from loopcheck.explorer.scoped import Limits, explore_units, make_plan

    rows = []
    for name in systems:
        factory = load_factory(str(ROOT / SYSTEMS[name]) if name in SYSTEMS else name)
        caps = capabilities_of(factory)
        plan = make_plan(factory, load_scope(scope_name), caps)
        runs = [explore_units(factory, plan, list(range(len(plan.units))), CheckSet(default_mode(caps.semantics)),
                              Limits(), keep_going=True) for _ in range(repeat)]
        seconds = sorted(r.seconds for r in runs)[len(runs) // 2]
        t = runs[0].tally
        rows.append([name, scope_name, t.units, f"{t.workloads:,}", f"{t.states:,}", f"{t.transitions:,}",
                     f"{t.steps:,}", len(runs[0].findings), f"{seconds:.1f}", f"{t.transitions / seconds:,.0f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--systems", help="comma-separated adapters (model, torch, vllm, sglang, lmdeploy, minisched, "
                        "MODULE:FACTORY): scoped exploration speed instead of the model explorer's")
    parser.add_argument("--scope", default="tiny", help="the scope of --systems (default tiny)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per system with --systems (default 3)")
    parser.add_argument("--spread", type=int, default=2)
    parser.add_argument("--largest", type=float, help="grow the five-request family's spread until this many seconds")
    parser.add_argument("--before", type=Path, metavar="CHECKOUT",
                        help="another version of loopcheck (e.g. a git worktree of an older commit): its states/s "
                             "on the same families, measured in the same run")
    args = parser.parse_args()
    if args.systems:
        print(table(["system", "scope", "units", "workloads", "states", "transitions", "system steps", "findings",
                     "seconds (median)", "transitions/s"], scoped_rows(args.systems.split(","), args.scope,
                                                                       args.repeat)))
        return
    if args.before and not (args.before / "explorer" / "survey.py").is_file():
        parser.error(f"--before {args.before}: not a loopcheck checkout with the explorer package "
                     "(no explorer/survey.py)")
    rows = []
    for name, w, spread in cases(args.spread):
        states, explored, one, two = rates(w, spread)
        full = explore(w, max_states=10**8, spread=spread, reduce=False).states
        merged = explore(w, max_states=10**8, spread=spread, merge=True).states
        row = [name, spread, states, explored, f"{one:,.0f}", f"{one * explored / states:,.0f}", f"{two:,.0f}",
               f"{two / one:.2f}x",
               f"{bytes_per_state(w, spread):,.0f}", f"{full / states:.2f}x", f"{states / merged:.2f}x"]
        if args.before:
            old_states, _, old_one, old_two = rates(w, spread, args.before)
            row += [f"{old_one:,.0f}", f"{old_two:,.0f}", f"{one / old_one:.1f}x",
                    "yes" if old_states == states else f"no ({old_states})"]
        rows.append(row)
    before = ["before: 1 proc", "before: 2 procs", "1 proc / before", "same states"] if args.before else []
    print(table(["workload", "spread", "states", "explored", "states/s (1 proc)", "explored/s (1 proc)",
                 "states/s (2 procs)", "2 procs / 1",
                 "bytes/state (explore)", "full/reduced states", "reduced/merged states", *before], rows))
    rows = []
    for name, w, spread in larger():
        states, explored, one, two = rates(w, spread)
        row = [name, spread, states, explored, f"{one:,.0f}", f"{two:,.0f}", f"{two / one:.2f}x"]
        if args.before:
            *_, old_one, old_two = rates(w, spread, args.before)
            row += [f"{old_one:,.0f}", f"{old_two:,.0f}", f"{old_two / old_one:.2f}x"]
        rows.append(row)
    before = ["before: 1 proc", "before: 2 procs", "before: 2 procs / 1"] if args.before else []
    print()
    print(table(["larger family", "spread", "states", "explored", "states/s (1 proc)", "states/s (2 procs)",
                 "2 procs / 1", *before], rows))
    if args.largest:
        largest(args.largest)


if __name__ == "__main__":
    main()
