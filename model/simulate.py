"""Running a workload on the reference model: environment, run loop, results."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from model.events import Event, RequestOutput, TokenOutcome
from model.reference import step
from model.state import FINISHED, SchedState, initial_state
from model.workload import Workload


class WorkloadEnv:
    """The model's environment for a fixed workload.

    Aborts come from each request's `abort_at`. Token IDs come from
    `script_tokens` (cycled) or are abstract (the token's index mod vocab_size);
    exit depths of tokens after the first come from `script_exit_depths` (cycled)
    or are num_loops. The first token always exits at full depth.
    """

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._specs = {r.rid: r for r in workload.requests}

    def aborts(self, step: int) -> frozenset[str]:
        return frozenset(r.rid for r in self.workload.requests if r.abort_at == step)

    def outcome(self, rid: str, index: int) -> TokenOutcome:
        spec, cfg = self._specs[rid], self.workload.config
        token = (spec.script_tokens[index % len(spec.script_tokens)] if spec.script_tokens
                 else index % cfg.vocab_size)
        depth = cfg.num_loops
        if index > 0 and spec.script_exit_depths:
            depth = spec.script_exit_depths[(index - 1) % len(spec.script_exit_depths)]
        return TokenOutcome(token, depth)


@dataclass
class Counters:
    """Run totals, folded from events."""

    steps: int = 0
    preemptions: int = 0
    resumptions: int = 0
    futile_preemptions: int = 0

    def fold(self, events: list[Event]) -> None:
        """Count one step's events. A preemption is futile when the request it was
        made for does no work in the same step."""
        self.steps += 1
        worked = {e.rid for e in events if e.kind in ("prefill", "token")}
        for e in events:
            if e.kind == "preempt":
                self.preemptions += 1
                if e.args[0] != e.rid and e.args[0] not in worked:
                    self.futile_preemptions += 1
            elif e.kind == "resume":
                self.resumptions += 1


def fold_outputs(outputs: dict[str, RequestOutput], events: list[Event]) -> None:
    """Apply one step's events to per-request outputs (a preemption without snapshot
    discards the tokens, which are generated again)."""
    for e in events:
        out = outputs[e.rid]
        if e.kind == "token":
            out.token_ids.append(e.args[1])
            out.exit_depths.append(e.args[2])
        elif e.kind == "preempt" and not e.args[1]:
            out.token_ids.clear()
            out.exit_depths.clear()
        elif e.kind == "finish":
            out.finish_reason = e.args[0]


@dataclass
class SimResult:
    """The outcome of a run, in the shape `loopcheck simulate --json` prints."""

    workload: Workload
    engine: str
    counters: Counters
    outputs: dict[str, RequestOutput]
    kv_blocks_held: int
    drained: bool
    trace: list[list[Event]] = field(default_factory=list)
    fingerprints: dict[str, str] = field(default_factory=dict)  # engine runs only

    @property
    def finished(self) -> int:
        return sum(o.finish_reason is not None for o in self.outputs.values())

    def to_json(self, with_trace: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine, "finished": self.finished, "total": len(self.outputs),
            "steps": self.counters.steps, "preemptions": self.counters.preemptions,
            "resumptions": self.counters.resumptions,
            "futile_preemptions": self.counters.futile_preemptions,
            "kv_blocks_held": self.kv_blocks_held, "drained": self.drained,
            "requests": {rid: o.to_json() for rid, o in self.outputs.items()},
        }
        for rid, fp in self.fingerprints.items():
            out["requests"][rid]["logits_sha256"] = fp
        if with_trace:
            out["trace"] = [[e.to_json() for e in evs] for evs in self.trace]
        return out


def drained(state: SchedState) -> bool:
    return all(r.status == FINISHED for r in state.reqs)


def model_steps(workload: Workload) -> Iterator[tuple[SchedState, list[Event]]]:
    """Endless (state, events) after each step of the reference model."""
    env = WorkloadEnv(workload)
    state = initial_state(workload.config.num_blocks, len(workload.requests))
    while True:
        state, events = step(state, env)
        yield state, events


def simulate_model(workload: Workload, max_steps: int, keep_trace: bool = False) -> SimResult:
    """Run the reference model until drained or `max_steps` steps."""
    cfg = workload.config
    counters = Counters()
    outputs = {r.rid: RequestOutput(r.rid, [], [], None) for r in workload.requests}
    trace: list[list[Event]] = []
    for state, events in model_steps(workload):
        counters.fold(events)
        fold_outputs(outputs, events)
        if keep_trace:
            trace.append(events)
        if drained(state) or counters.steps >= max_steps:
            break
    return SimResult(workload, "model", counters, outputs,
                     state.blocks_held(cfg.num_blocks, cfg.planes), drained(state), trace)
