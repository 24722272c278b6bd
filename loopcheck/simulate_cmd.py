"""`loopcheck simulate`: run a workload on a system to drain or to the step cap."""

from __future__ import annotations

import argparse
import json
import sys

from loopcheck.adapters.loader import warn_costly
from loopcheck.adapters.simulate import simulate
from loopcheck.model.events import Event
from loopcheck.model.simulate import SimResult
from loopcheck.model.workload import Workload, load_workload
from loopcheck.options import add_adapter, factory_of
from loopcheck.report import banner, table
from loopcheck.runctl.stop import Deadline
from loopcheck.runctl.ticker import Ticker
from loopcheck.sut.protocol import Observation


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", help="workload or counterexample JSON (loopcheck/workload@1)")
    add_adapter(p, "model")
    p.add_argument("--max-steps", type=int, default=500, help="stop after this many steps (default 500)")
    p.add_argument("--max-seconds", type=float, metavar="SECONDS",
                   help="stop after this long with an INCOMPLETE verdict (exit 1): what ran so far is reported")
    p.add_argument("--policy", choices=("unguarded", "guarded"),
                   help="override config.preemption_policy")
    p.add_argument("--no-preemption", action="store_true",
                   help="reference run: priority preemption off")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trace", action="store_true", help="with --json, include per-step events")


def prepare(args: argparse.Namespace) -> Workload:
    """The workload with the command-line overrides applied."""
    workload = load_workload(args.workload)
    changes: dict[str, object] = {}
    if getattr(args, "policy", None):
        changes["preemption_policy"] = args.policy
    if getattr(args, "no_preemption", False):
        changes["priority_preemption"] = False
    return workload.with_config(**changes) if changes else workload


def argv_of(args: argparse.Namespace) -> list[str]:
    out = ["simulate", args.workload, "--adapter", args.adapter, "--max-steps", str(args.max_steps)]
    if args.max_seconds is not None:
        out += ["--max-seconds", f"{args.max_seconds:g}"]
    if args.policy:
        out += ["--policy", args.policy]
    if args.no_preemption:
        out.append("--no-preemption")
    return out


def run(args: argparse.Namespace) -> int:
    """Run a workload on a system (exit 1 if it does not drain, crashes or hangs)."""
    if args.max_steps < 1:
        print("loopcheck simulate: error: --max-steps: must be >= 1", file=sys.stderr)
        return 2
    if args.max_seconds is not None and not args.max_seconds > 0:
        print("loopcheck simulate: error: --max-seconds: must be > 0", file=sys.stderr)
        return 2
    if args.trace and not args.json:
        print("loopcheck simulate: error: --trace: only with --json (the trace is part of the JSON)", file=sys.stderr)
        return 2
    workload = prepare(args)
    factory = factory_of(args)
    warn_costly(factory, [workload.config])
    banner(None, argv_of(args), sys.stderr if args.json else None)
    result, failed, out_of_time = simulate(workload, factory, args.max_steps, args.adapter, args.trace,
                                           StepProgress(len(workload.requests)), Deadline(args.max_seconds))
    incomplete = f"INCOMPLETE: --max-seconds {args.max_seconds:g} passed" if out_of_time else None
    if args.json:
        out = result.to_json(with_trace=args.trace)
        out.update({prop: failed.message if failed and failed.prop == prop else None for prop in ("crash", "hang")})
        out["incomplete"] = incomplete
        print(json.dumps(out))
    else:
        print(render(result, incomplete))
        if failed:
            print(f"{failed.prop.upper()} at step {failed.step}: {failed.message}")
    return 0 if result.drained and not failed else 1


class StepProgress:
    """After each step: a progress line on stderr about every 2 s (steps, steps/s,
    requests finished, blocks held)."""

    def __init__(self, requests: int) -> None:
        self.ticker, self.requests, self.steps, self.finished = Ticker(), requests, 0, 0

    def __call__(self, events: list[Event], obs: Observation) -> None:
        self.steps += 1
        self.finished += sum(e.kind == "finish" for e in events)
        if self.ticker.due():
            elapsed = self.ticker.elapsed
            print(f"[{elapsed:6.1f}s] step {self.steps:,}, {self.steps / elapsed:,.0f} steps/s, finished "
                  f"{self.finished}/{self.requests}, blocks held {obs.blocks_held}", file=sys.stderr, flush=True)


def render(result: SimResult, incomplete: str | None = None) -> str:
    """The run's table and summary line, ending with its verdict (`incomplete`,
    where a bound stopped it)."""
    cfg = result.workload.config
    rows = []
    for spec in result.workload.requests:
        out = result.outputs.get(spec.rid)
        depths = " ".join(map(str, out.exit_depths[:12])) if out else ""
        if out and len(out.exit_depths) > 12:
            depths += " ..."
        rows.append([spec.rid, spec.priority, spec.arrival, len(spec.prompt),
                     (out.finish_reason if out else None) or "-", len(out.token_ids) if out else 0, depths])
    head = table(["id", "prio", "arrival", "prompt", "finish", "tokens", "exit depths"], rows)
    c = result.counters
    verdict = incomplete or ("drained" if result.drained else f"NOT drained after {c.steps} steps (liveness failure)")
    return (f"{head}\n\nsystem={result.engine} policy={cfg.preemption_policy} "
            f"finished {result.finished}/{len(result.workload.requests)} in {c.steps} steps; "
            f"preemptions {c.preemptions} (futile {c.futile_preemptions}), resumptions "
            f"{c.resumptions}, kv blocks held {result.kv_blocks_held}: {verdict}")
