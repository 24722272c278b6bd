"""Lockstep conformance: the SUT paired with the reference model, compared step by
step. Only for systems that implement docs/semantics.md (capabilities.semantics
== "loopcheck"). Also the proved preemption bound of model/bounds.py."""

from __future__ import annotations

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.model.bounds import preemption_bound
from loopcheck.model.config import Config
from loopcheck.model.events import Event
from loopcheck.model.invariants import step_violations
from loopcheck.sut.model_sut import ModelSUT
from loopcheck.sut.protocol import Capabilities, Observation


def _semantics(caps: Capabilities) -> str | None:
    return None if caps.semantics == "loopcheck" else "the system does not implement loopcheck's semantics"


def divergence(step: int, model_events: list[Event], events: list[Event], problems: list[str]) -> str:
    lines = [f"step {step}: system and model diverge"] + [f"  {p}" for p in problems]
    lines.append("  model:  " + " ".join(map(str, model_events)))
    lines.append("  system: " + " ".join(map(str, events)))
    return "\n".join(lines)


class Lockstep(Check):
    """Equal events every step (the model's token outcomes are fed from the
    system's events, so any difference is a scheduling difference), both sides' KV
    accounting sound and equal, and the model's frontiers and budget kept."""

    props = ("conformance", "kv-conservation", "safety")

    def __init__(self) -> None:
        self.model: ModelSUT | None = None

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return _semantics(caps)

    def _model(self, run: RunView) -> ModelSUT:
        if self.model is None:
            self.model = ModelSUT(run.cfg)
        return self.model

    def on_input(self, run: RunView, kind: str, rid: str) -> None:
        model = self._model(run)
        if kind == "add":
            model.add(run.view.requests[rid].spec)
        else:
            model.abort(rid)

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        model = self._model(run)
        model.feed(events)
        before = model.state
        model_events = model.step()
        mobs = model.observe()
        problems = ["events differ"] if model_events != events else []
        problems += ["model: " + p for p in mobs.kv_errors]
        problems += ["system: " + p for p in obs.kv_errors]
        if mobs.blocks_held != obs.blocks_held:
            problems.append(f"blocks held: model {mobs.blocks_held}, system {obs.blocks_held}")
        if problems:
            prop = "conformance" if "events differ" in problems else "kv-conservation"
            self.broke(Violation(prop, divergence(run.t - 1, model_events, events, problems),
                                 rule="" if prop == "conformance" else "lockstep"))
        problems = step_violations(before, model.state, model_events, model.env.workload)
        if problems:
            self.broke(Violation("safety", "; ".join(problems)))


class ModelBounds(Check):
    """Preemptions stay within model/bounds.py's proved bound, where it claims one
    (guarded policy, upfront allocation, no prefix caching)."""

    props = ("preemption-bound",)

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return _semantics(caps)

    def at_end(self, run: RunView, obs: Observation) -> None:
        bound = preemption_bound(run.workload())
        if bound is not None and run.counters.preemptions > bound:
            self.broke(Violation("preemption-bound", f"{run.counters.preemptions} preemptions > bound {bound}"))
