"""Lockstep runs: the engine and the reference model driven by the same workload,
compared event by event. The model's environment takes each token's outcome (ID
and exit depth) from the engine's events of the same step, so any difference is a
scheduling difference."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.llm_engine import LLMEngine
from engine.simulate import drive
from model.config import Config
from model.events import Event, TokenOutcome
from model.invariants import state_violations
from model.reference import step
from model.state import SchedState, initial_state
from model.workload import Workload


class EngineFedEnv:
    """Model environment whose token outcomes come from the engine's last step."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.extra_aborts: set[str] = set()
        self.tokens: dict[tuple[str, int], TokenOutcome] = {}

    def feed(self, events: list[Event]) -> None:
        self.tokens = {(e.rid, e.args[0]): TokenOutcome(e.args[1], e.args[2])
                       for e in events if e.kind == "token"}

    def aborts(self, t: int) -> frozenset[str]:
        return frozenset(r.rid for r in self.workload.requests if r.abort_at == t) | self.extra_aborts

    def outcome(self, rid: str, index: int) -> TokenOutcome:
        # A token the engine did not produce this step is a divergence; report it as
        # an impossible outcome so the event comparison fails at this step.
        return self.tokens.get((rid, index), TokenOutcome(-1, -1))


@dataclass
class Divergence:
    step: int
    model: list[Event]
    engine: list[Event]
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"step {self.step}: engine and model diverge"]
        lines += [f"  {p}" for p in self.problems]
        lines.append("  model:  " + " ".join(map(str, self.model)))
        lines.append("  engine: " + " ".join(map(str, self.engine)))
        return "\n".join(lines)


def compare_step(t: int, model_events: list[Event], engine_events: list[Event], state: SchedState,
                 engine_held: int, engine_kv_errors: list[str], cfg: Config) -> Divergence | None:
    """Events equal, and both sides' KV accounting sound and equal (the engine's
    side as observed: blocks held and conservation errors on its real pool)."""
    problems = []
    if model_events != engine_events:
        problems.append("events differ")
    problems += ["model: " + p for p in state_violations(state, cfg)]
    problems += ["engine: " + p for p in engine_kv_errors]
    model_held = state.blocks_held(cfg.num_blocks, cfg.planes)
    if model_held != engine_held:
        problems.append(f"blocks held: model {model_held}, engine {engine_held}")
    return Divergence(t, model_events, engine_events, problems) if problems else None


def lockstep(workload: Workload, max_steps: int) -> Divergence | None:
    """Run both until both drain or `max_steps`; return the first divergence."""
    engine = LLMEngine(workload.config)
    env = EngineFedEnv(workload)
    state = initial_state(workload.config.num_blocks, len(workload.requests))
    for t in range(max_steps):
        engine_events = drive(engine, workload)
        env.feed(engine_events)
        state, model_events = step(state, env)
        bad = compare_step(t, model_events, engine_events, state, engine.blocks_held(),
                           engine.conservation_errors(), workload.config)
        if bad:
            return bad
        if t >= max((r.arrival for r in workload.requests), default=0) and not engine.has_unfinished():
            break
    return None
