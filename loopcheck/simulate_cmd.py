"""`loopcheck simulate`: run a workload to drain or to the step cap."""

from __future__ import annotations

import argparse
import json
import sys

from loopcheck.report import banner, table
from model.simulate import SimResult, simulate_model
from model.workload import Workload, load_workload


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", help="workload or counterexample JSON (loopcheck/workload@1)")
    p.add_argument("--engine", choices=("model", "torch"), default="model")
    p.add_argument("--max-steps", type=int, default=500)
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


def simulate(workload: Workload, engine: str, max_steps: int, keep_trace: bool) -> SimResult:
    if engine == "torch":
        from engine.simulate import simulate_engine

        return simulate_engine(workload, max_steps, keep_trace=keep_trace)
    return simulate_model(workload, max_steps, keep_trace=keep_trace)


def argv_of(args: argparse.Namespace) -> list[str]:
    out = ["simulate", args.workload, "--engine", args.engine, "--max-steps", str(args.max_steps)]
    if args.policy:
        out += ["--policy", args.policy]
    if args.no_preemption:
        out.append("--no-preemption")
    return out


def run(args: argparse.Namespace) -> int:
    """Run a workload on the reference model or the torch engine."""
    if args.max_steps < 1:
        print("loopcheck simulate: error: --max-steps: must be >= 1", file=sys.stderr)
        return 2
    workload = prepare(args)
    result = simulate(workload, args.engine, args.max_steps, args.trace)
    banner(workload.config.model_seed, argv_of(args), sys.stderr if args.json else None)
    if args.json:
        print(json.dumps(result.to_json(with_trace=args.trace)))
    else:
        print(render(result))
    return 0 if result.drained else 1


def render(result: SimResult) -> str:
    cfg = result.workload.config
    rows = []
    for spec in result.workload.requests:
        out = result.outputs[spec.rid]
        depths = " ".join(map(str, out.exit_depths[:12]))
        if len(out.exit_depths) > 12:
            depths += " ..."
        rows.append([spec.rid, spec.priority, spec.arrival, len(spec.prompt),
                     out.finish_reason or "-", len(out.token_ids), depths])
    head = table(["id", "prio", "arrival", "prompt", "finish", "tokens", "exit depths"], rows)
    c = result.counters
    verdict = "drained" if result.drained else f"NOT drained after {c.steps} steps (liveness failure)"
    return (f"{head}\n\nengine={result.engine} policy={cfg.preemption_policy} "
            f"finished {result.finished}/{len(result.outputs)} in {c.steps} steps; "
            f"preemptions {c.preemptions} (futile {c.futile_preemptions}), resumptions "
            f"{c.resumptions}, kv blocks held {result.kv_blocks_held}: {verdict}")
