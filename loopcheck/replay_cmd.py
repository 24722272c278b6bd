"""`loopcheck replay`: replay a counterexample step by step on the model, the
engine or both, showing only what changes, marking the cycle, and (with both)
the first step where they diverge."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from loopcheck.report import banner
from loopcheck.simulate_cmd import prepare
from model.errors import WorkloadError
from model.events import Event
from model.workload import Workload


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="counterexample or workload JSON (loopcheck/workload@1)")
    p.add_argument("--engine", choices=("model", "torch", "both"), default="both")
    p.add_argument("--max-steps", type=int, default=None,
                   help="default: two turns of the file's cycle, else 500")
    p.add_argument("--policy", choices=("unguarded", "guarded"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--plot", metavar="PNG", help="draw finished, preemptions and blocks held per step")


@dataclass
class Replay:
    """What a replay saw, per step."""

    events: list[list[Event]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)
    repeat: tuple[int, int] | None = None      # (first step of the cycle, period)
    divergence: str | None = None
    drained: bool = False

    def record(self, events: list[Event], held: int) -> None:
        done = sum(e.kind == "finish" for e in events) + (self.finished[-1] if self.finished else 0)
        pre = sum(e.kind == "preempt" for e in events) + (self.preemptions[-1] if self.preemptions else 0)
        self.events.append(events)
        self.held.append(held)
        self.finished.append(done)
        self.preemptions.append(pre)


def replay(workload: Workload, engine: str, max_steps: int) -> Replay:
    """Step the chosen side(s); detect a repeating model state after the last
    arrival; with both, stop at the first divergence."""
    from model.reference import step
    from model.simulate import WorkloadEnv
    from model.state import FINISHED, initial_state

    cfg = workload.config
    out = Replay()
    state = initial_state(cfg.num_blocks, len(workload.requests))
    model_env: Any = WorkloadEnv(workload)
    eng = None
    if engine in ("torch", "both"):
        from engine.llm_engine import LLMEngine
        from engine.simulate import drive
        from fuzz.lockstep import EngineFedEnv, compare_step

        eng = LLMEngine(cfg)
        if engine == "both":
            model_env = EngineFedEnv(workload)
    last_arrival = max((r.arrival for r in workload.requests), default=0)
    seen: dict[Any, int] = {}
    for t in range(max_steps):
        if eng is not None:
            eng_events = drive(eng, workload)
        if engine == "torch":
            out.record(eng_events, eng.blocks_held())
        else:
            if engine == "both":
                model_env.feed(eng_events)
            state, model_events = step(state, model_env)
            out.record(model_events, state.blocks_held(cfg.num_blocks, cfg.planes))
            if engine == "both":
                bad = compare_step(t, model_events, eng_events, state, eng.blocks_held(),
                                   eng.conservation_errors(), cfg)
                if bad:
                    out.divergence = bad.describe()
                    return out
        if engine == "torch":
            key: Any = eng.state_key()
            out.drained = t >= last_arrival and not eng.has_unfinished()
        else:
            key = (state.reqs, state.free, state.cache, state.guard)
            out.drained = all(r.status == FINISHED for r in state.reqs)
        if out.drained:
            return out
        if t >= last_arrival and out.repeat is None:
            if key in seen:
                out.repeat = (seen[key] + 1, t - seen[key])
            seen[key] = t
    return out


def render(workload: Workload, rep: Replay, cycle: dict[str, int] | None) -> str:
    lines = []
    start = rep.repeat[0] if rep.repeat else (cycle or {}).get("start")
    period = rep.repeat[1] if rep.repeat else (cycle or {}).get("length")
    shown_cycles = 0
    for t, events in enumerate(rep.events):
        if start is not None and period and t >= start and (t - start) % period == 0:
            shown_cycles += 1
            if shown_cycles > 2:
                lines.append(f"... the cycle repeats every {period} steps (elided)")
                break
            lines.append(f"--- cycle {'starts' if shown_cycles == 1 else 'repeats'} at step {t} "
                         f"(period {period}) ---")
        delta = rep.held[t] - (rep.held[t - 1] if t else 0)
        held = f"held {rep.held[t]} ({delta:+d})" if delta else f"held {rep.held[t]}"
        text = " ".join(map(str, events)) if events else "(nothing changes)"
        lines.append(f"step {t:4d}  {held:14s} {text}")
    if rep.divergence:
        lines.append("DIVERGENCE " + rep.divergence)
    verdict = ("drained" if rep.drained else
               f"not drained after {len(rep.events)} steps" + (" (livelock: state repeats)" if rep.repeat else ""))
    lines.append(f"{verdict}; finished {rep.finished[-1] if rep.finished else 0}/{len(workload.requests)}, "
                 f"preemptions {rep.preemptions[-1] if rep.preemptions else 0}, "
                 f"blocks held {rep.held[-1] if rep.held else 0}")
    return "\n".join(lines)


def plot(rep: Replay, path: str) -> None:
    try:
        import matplotlib
    except ImportError as exc:
        raise WorkloadError("--plot: needs matplotlib (python3 -m pip install matplotlib)") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    steps = range(len(rep.events))
    ax.plot(steps, rep.finished, label="finished requests")
    ax.plot(steps, rep.preemptions, label="preemptions (cumulative)")
    ax.plot(steps, rep.held, label="KV blocks held")
    if rep.repeat:
        ax.axvline(rep.repeat[0], color="red", linestyle=":", label="cycle starts")
    ax.set_xlabel("step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def argv_of(args: argparse.Namespace) -> list[str]:
    out = ["replay", args.file, "--engine", args.engine]
    out += ["--max-steps", str(args.max_steps)] if args.max_steps else []
    out += ["--policy", args.policy] if args.policy else []
    return out


def run(args: argparse.Namespace) -> int:
    """Replay a counterexample step by step (exit 1 when the failure reproduces)."""
    args.workload, args.no_preemption = args.file, False
    workload = prepare(args)
    cycle = workload.extra.get("cycle")
    max_steps = args.max_steps or (cycle["start"] + 2 * cycle["length"] + 1 if cycle else 500)
    if max_steps < 1:
        print("loopcheck replay: error: --max-steps: must be >= 1", file=sys.stderr)
        return 2
    banner(workload.config.model_seed, argv_of(args), sys.stderr if args.json else None)
    rep = replay(workload, args.engine, max_steps)
    if args.plot:
        plot(rep, args.plot)
    if args.json:
        print(json.dumps({"steps": len(rep.events), "drained": rep.drained,
                          "cycle": {"start": rep.repeat[0], "length": rep.repeat[1]} if rep.repeat else None,
                          "divergence": rep.divergence, "finished": rep.finished[-1] if rep.finished else 0,
                          "preemptions": rep.preemptions[-1] if rep.preemptions else 0,
                          "kv_blocks_held": rep.held[-1] if rep.held else 0,
                          "trace": [[e.to_json() for e in evs] for evs in rep.events]}))
    else:
        print(render(workload, rep, cycle))
    return 0 if rep.drained and not rep.divergence else 1
