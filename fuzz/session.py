"""A lockstep session: one engine (through the adapter protocol) and the
reference model, driven together, with every check the fuzzer makes. The
Hypothesis machine is a thin layer over it; `replay_workload` drives it from a
recorded workload file (for shrinking and for users' replays)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fuzz.adapter import EngineAdapter, Observation
from fuzz.lockstep import EngineFedEnv, compare_step
from model.bounds import drain_step_bound, preemption_bound, work_units
from model.config import Config
from model.events import Event
from model.invariants import state_violations, step_violations
from model.reference import step
from model.simulate import Counters
from model.state import FINISHED, add_request, initial_state
from model.workload import RequestSpec, Workload, submit_due

AdapterFactory = Callable[[Config], EngineAdapter]


@dataclass
class Violation(AssertionError):
    """A property the session found broken."""

    prop: str
    message: str
    cycle: dict[str, int] | None = None

    def __str__(self) -> str:
        return f"{self.prop}: {self.message}"


class Session:
    def __init__(self, cfg: Config, adapter_factory: AdapterFactory,
                 on_events: Callable[[list[Event]], None] | None = None) -> None:
        self.cfg = cfg
        self.adapter_factory = adapter_factory
        self.adapter = adapter_factory(cfg)
        self.specs: list[RequestSpec] = []
        self.env = EngineFedEnv(Workload(cfg, ()))
        self.state = initial_state(cfg.num_blocks, 0)
        self.t = 0
        self.counters = Counters()
        self.trace: list[list[Event]] = []
        self.on_events = on_events

    def workload(self) -> Workload:
        return Workload(self.cfg, tuple(self.specs))

    def add(self, spec: RequestSpec) -> None:
        """Submit a request; it arrives at the current step."""
        spec = replace(spec, arrival=self.t, abort_at=None)
        self.adapter.add(spec)
        self.specs.append(spec)
        self.state = add_request(self.state)
        self.env.workload = self.workload()

    def abort(self, rid: str) -> None:
        """Abort at the current step (no effect once finished or already aborted)."""
        index = next(i for i, s in enumerate(self.specs) if s.rid == rid)
        if self.specs[index].abort_at is None and self.state.reqs[index].status != FINISHED:
            self.adapter.abort(rid)
            self.specs[index] = replace(self.specs[index], abort_at=self.t)
            self.env.workload = self.workload()

    def step(self) -> None:
        """One step on both sides: equal events (conformance), KV accounting sound and
        equal on both sides, budgets and frontiers (safety)."""
        engine_events = self.adapter.step()
        self.env.feed(engine_events)
        before = self.state
        self.state, model_events = step(self.state, self.env)
        self.t += 1
        self.trace.append(engine_events)
        self.counters.fold(engine_events)
        if self.on_events:
            self.on_events(engine_events)
        obs = self.adapter.observe()
        bad = compare_step(self.t - 1, model_events, engine_events, self.state, obs.blocks_held, obs.kv_errors,
                           self.cfg)
        if bad is not None:
            raise Violation("conformance" if "events differ" in bad.problems else "safety", bad.describe())
        problems = step_violations(before, self.state, model_events, self.workload())
        if problems:
            raise Violation("safety", "; ".join(problems))

    def check_kv(self) -> None:
        problems = self.adapter.observe().kv_errors + state_violations(self.state, self.cfg)
        if problems:
            raise Violation("kv-conservation", "; ".join(problems))

    def finish(self) -> None:
        """Drain, then check liveness, bounds and output equivalence."""
        w = self.workload()
        bound = drain_step_bound(w)
        cap = bound if bound is not None else self.t + 4 * sum(work_units(w)) + 50
        seen: dict[Any, int] = {}
        while any(r.status != FINISHED for r in self.state.reqs):
            key = (self.state.reqs, self.state.free, self.state.cache, self.state.guard)
            if key in seen:
                raise Violation("livelock", f"state at step {self.t} repeats step {seen[key]}; nothing finishes",
                                {"start": seen[key], "length": self.t - seen[key]})
            seen[key] = self.t
            if self.t >= cap:
                raise Violation("liveness", f"not drained after {self.t} steps (bound {cap})")
            self.step()
            self.check_kv()
        obs = self.adapter.observe()
        if obs.blocks_held or obs.unfinished:
            raise Violation("drain", f"drained, but the engine holds {obs.blocks_held} blocks "
                                     f"(unfinished requests: {obs.unfinished})")
        p_bound = preemption_bound(w)
        if p_bound is not None and self.counters.preemptions > p_bound:
            raise Violation("preemption-bound", f"{self.counters.preemptions} preemptions > bound {p_bound}")
        self.check_outputs(obs)

    def check_outputs(self, obs: Observation) -> None:
        """Outputs (and their exact bits, where the adapter reports them) equal a
        run of the same workload without priority preemption; aborted requests,
        whose outputs depend on timing, are left out."""
        if not self.specs:
            return
        ref = self.adapter_factory(replace(self.cfg, priority_preemption=False))
        last_arrival = max(s.arrival for s in self.specs)
        t = 0
        while True:
            submit_due(self.specs, t, ref.add, ref.abort)
            ref.step()
            t += 1
            if t > last_arrival and not ref.observe().unfinished:
                break
            if t > 10 * self.t + 100:
                raise Violation("reference-liveness", "the run without priority preemption does not drain")
        want = ref.observe()
        for s in self.specs:
            if s.abort_at is not None:
                continue
            got_o, want_o = obs.outputs[s.rid].to_json(), want.outputs[s.rid].to_json()
            if got_o != want_o or obs.fingerprints.get(s.rid) != want.fingerprints.get(s.rid):
                raise Violation("output-equivalence", f"{s.rid}: {got_o} differs from the run without "
                                                      f"preemption {want_o} (or in logit bits)")


def replay_workload(workload: Workload, adapter_factory: AdapterFactory) -> tuple[Violation | None, Session]:
    """Drive a session from a recorded workload (arrivals and aborts by step);
    return the first violation (or None) and the session, whose trace holds the
    engine's events."""
    session = Session(workload.config, adapter_factory)
    try:
        last = max((max(s.arrival, s.abort_at or 0) for s in workload.requests), default=0)
        for t in range(last + 1):
            submit_due(workload.requests, t, session.add, session.abort)
            session.step()
            session.check_kv()
        session.finish()
    except Violation as v:
        return v, session
    return None, session
