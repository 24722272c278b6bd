"""`loopcheck replay`: replay a counterexample (or any workload) step by step on a
system through the same driver and checks that found it, showing what changes,
marking the cycle, and reporting the violation it reproduces."""

from __future__ import annotations

import argparse
import json
import sys

from loopcheck.adapters.loader import capabilities_of, warn_costly
from loopcheck.checks.signatures import PLACED
from loopcheck.checks.suite import CheckSet
from loopcheck.model.workload import Workload
from loopcheck.options import add_adapter, add_check_mode, check_set_of, factory_of
from loopcheck.replayed import Replay, replay
from loopcheck.report import banner
from loopcheck.runctl.stop import Deadline, OutOfTime
from loopcheck.simulate_cmd import StepProgress, prepare
from loopcheck.timeline import check_matplotlib, draw

DEFAULT_RUNS = 2   # replay runs a file twice, to tell whether the system is deterministic


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="counterexample or workload JSON (loopcheck/workload@1)")
    add_adapter(p, "model")
    add_check_mode(p)
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop after this many steps (default: the checks' own step cap)")
    p.add_argument("--max-seconds", type=float, metavar="SECONDS",
                   help="stop after this long with an INCOMPLETE verdict (exit 1): the steps run so far are shown, "
                        "and no second run is made")
    p.add_argument("--policy", choices=("unguarded", "guarded"), help="override config.preemption_policy")
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, metavar="N",
                   help="run the file N times and say 'not deterministic', with the first step where the runs "
                        "differ, if they do (default 2; 1: once)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with the trace)")
    p.add_argument("--plot", metavar="PNG", help="draw the run as a timeline: a row per request (waiting, running, "
                   "preempted; prefill and decode work; preemptions and resumptions marked, with arrows from "
                   "requester to victim), the cycle shaded, the prefix cache's pages where the system reports "
                   "them, blocks held beneath")


def render(workload: Workload, rep: Replay) -> str:
    lines = []
    cycle = rep.violation.cycle if rep.violation else None
    start, period = (cycle["start"], cycle["length"]) if cycle else (None, None)
    quiet_from = None
    for t, events in enumerate(rep.events):
        if start is not None and period and t >= start and (t - start) % period == 0:
            lines.append(f"--- cycle {'starts' if t == start else 'repeats'} at step {t} (period {period}) ---")
        if not events:
            quiet_from = t if quiet_from is None else quiet_from
            if t + 1 < len(rep.events):
                continue
        if quiet_from is not None:
            lines.append(f"step {quiet_from:4d}{'..' + str(t if not events else t - 1) if t - quiet_from > 1 else ''}"
                         f"  held {rep.held[quiet_from]}  (no events)")
            quiet_from = None
            if not events:
                continue
        delta = rep.held[t] - (rep.held[t - 1] if t else 0)
        held = f"held {rep.held[t]} ({delta:+d})" if delta else f"held {rep.held[t]}"
        lines.append(f"step {t:4d}  {held:14s} {' '.join(map(str, events))}")
    v = rep.violation
    verdict = (f"REPRODUCED {v.prop} at step {v.step}: {v.message}\n  signature {v.signature}" if v else
               f"ended by {ended_by(rep)}: {rep.ended_by.signature} at step {rep.ended_by.step}: "
               f"{rep.ended_by.message}" if rep.ended_by else
               f"INCOMPLETE: --max-seconds passed after {len(rep.events)} steps (determinism not checked)"
               if rep.out_of_time else
               "drained: no check failed" if rep.drained else f"not drained after {len(rep.events)} steps")
    lines.append(f"{verdict}\nfinished {rep.finished[-1] if rep.finished else 0}/{len(workload.requests)}, "
                 f"preemptions {rep.preemptions[-1] if rep.preemptions else 0}, "
                 f"blocks held {rep.held[-1] if rep.held else 0}")
    if rep.refused:
        lines.append("refused by the system (left out of the run): "
                     + "; ".join(f"{rid} ({why})" for rid, why in rep.refused.items()))
    if rep.never_ready:
        lines.append("left waiting for a grammar that is never compiled (not a stall of the others): "
                     + ", ".join(rep.never_ready))
    if rep.skipped:
        lines.append("checks not run: " + "; ".join(f"{k} ({why})" for k, why in rep.skipped.items()))
    if rep.differs is not None:
        lines.append(f"NOT DETERMINISTIC: {rep.runs} runs of this file differ from step {rep.differs} (the usual "
                     "causes: docs/checking.md, \"Determinism\")")
    for _, v in rep.ignored:
        lines.append(f"ignored (--ignore): {v.signature} (step {v.step}): {v.message}")
    return "\n".join(lines)


def ended_by(rep: Replay) -> str:
    """Why the finding that ended the run is not reported: it is ignored, or it
    came after an ignored one (its consequence; the system crashed or hung: said)."""
    ended = rep.ended_by
    assert ended is not None
    why = ("an ignored finding (--ignore)" if rep.ended_by_ignored
           else "a finding after an ignored one (its consequence)")
    crashed = ended.prop in PLACED
    return why + ("; the system crashed or hung, so nothing after it is judged" if crashed else "")


def argv_of(args: argparse.Namespace, checks: CheckSet) -> list[str]:
    out = ["replay", args.file, "--adapter", args.adapter, *checks.flags()]
    out += ["--max-steps", str(args.max_steps)] if args.max_steps else []
    out += ["--policy", args.policy] if args.policy else []
    out += ["--runs", str(args.runs)] if args.runs != DEFAULT_RUNS else []
    out += ["--max-seconds", f"{args.max_seconds:g}"] if args.max_seconds is not None else []
    return out


def run(args: argparse.Namespace) -> int:
    """Replay a counterexample step by step, twice by default (exit 1 when a
    violation reproduces, or the runs differ)."""
    if args.max_steps is not None and args.max_steps < 1:
        print("loopcheck replay: error: --max-steps: must be >= 1", file=sys.stderr)
        return 2
    if args.runs < 1:
        print("loopcheck replay: error: --runs: must be >= 1", file=sys.stderr)
        return 2
    if args.max_seconds is not None and not args.max_seconds > 0:
        print("loopcheck replay: error: --max-seconds: must be > 0", file=sys.stderr)
        return 2
    if args.plot:
        check_matplotlib("--plot")
    args.workload, args.no_preemption = args.file, False
    workload = prepare(args)
    factory = factory_of(args)
    warn_costly(factory, [workload.config])
    deadline = Deadline(args.max_seconds)
    try:
        caps = capabilities_of(factory, workload.config, deadline)
    except OutOfTime:
        print(json.dumps({"steps": 0, "incomplete": True}) if args.json else
              f"INCOMPLETE: --max-seconds {args.max_seconds:g} passed while the system was being built: no step ran")
        return 1
    checks = check_set_of(args, caps.semantics)
    banner(None, argv_of(args, checks), sys.stderr if args.json else None)
    rep = replay(workload, factory, checks, args.max_steps, args.runs, deadline, StepProgress(len(workload.requests)))
    if args.plot:
        draw(rep.timeline(workload, args.adapter), args.plot)
    if args.json:
        v = rep.violation
        print(json.dumps({"steps": len(rep.events), "drained": rep.drained,
                          "violation": {"property": v.prop, "signature": v.signature, "message": v.message,
                                        "step": v.step, "cycle": v.cycle} if v else None,
                          "expected": workload.extra.get("property"),
                          "finished": rep.finished[-1] if rep.finished else 0,
                          "preemptions": rep.preemptions[-1] if rep.preemptions else 0,
                          "kv_blocks_held": rep.held[-1] if rep.held else 0, "checks_not_run": rep.skipped,
                          "ignored": [{"property": v.prop, "signature": v.signature, "message": v.message,
                                       "step": v.step, "check": name} for name, v in rep.ignored],
                          "ended_by": rep.ended_by.signature if rep.ended_by else None,
                          "runs": rep.runs, "differs_from_step": rep.differs, "incomplete": rep.out_of_time,
                          "trace": [[e.to_json() for e in evs] for evs in rep.events]}))
    else:
        print(render(workload, rep))
        expected = workload.extra.get("property")
        if expected and not rep.out_of_time and (rep.violation is None or rep.violation.prop != expected):
            print(f"note: the file records {expected!r}; this replay "
                  f"{'found ' + repr(rep.violation.prop) if rep.violation else 'found no violation'}")
    return 1 if rep.violation or (not rep.drained and rep.ended_by is None) or rep.differs is not None else 0
