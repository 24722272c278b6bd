"""Conformance: the engine's scheduler and the reference model emit the same
events step by step, and their KV accounting agrees (the lockstep check)."""

from __future__ import annotations

from functools import partial

from hypothesis import HealthCheck, given, settings

from loopcheck.adapters.torch_sut import TorchSUT
from loopcheck.checks.lockstep import Lockstep, ModelBounds
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.strategies import workloads
from loopcheck.model.bounds import preemption_bound
from loopcheck.model.events import Event, Preempt, Resume
from loopcheck.model.workload import Workload
from loopcheck.sut.model_sut import ModelSUT
from tests.engine_workloads import busy, livelock_example


def lockstep(w: Workload, max_steps: int):
    """The first lockstep violation within max_steps steps, or None."""
    run = run_workload(w, TorchSUT, [Lockstep()], max_steps)
    return run.violation if run.violation is None or run.violation.prop != "liveness" else None


def test_examples_conform() -> None:
    for policy in ("unguarded", "guarded"):
        w = livelock_example().with_config(preemption_policy=policy)
        assert lockstep(w, 500) is None
    for cfg in ({}, {"snapshots": False}, {"allocation": "incremental"}, {"execution": "refill"},
                {"kv_layout": "shared"}, {"wcpb": False}):
        d = lockstep(busy(**cfg), 500)
        assert d is None, str(d)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_random_workloads_conform(w: Workload) -> None:
    d = lockstep(w, 300)
    assert d is None, str(d)


def test_a_seeded_divergence_is_reported(monkeypatch) -> None:
    """The comparison bites: a model told a different token outcome diverges."""
    from loopcheck.model.simulate import WorkloadEnv

    original = WorkloadEnv.outcome
    monkeypatch.setattr(WorkloadEnv, "outcome", lambda self, rid, i: original(self, rid, i)._replace(token_id=-7))
    d = lockstep(livelock_example(), 50)
    assert d is not None and d.prop == "conformance" and "events differ" in d.message


class Repreempting(ModelSUT):
    """The model, with `extra` more preemptions: a request that got a token in a
    step is preempted (keeping its tokens) and resumed at its end, until `extra`
    are spent. A policy that preempts more than it needs to, yet drains."""

    def __init__(self, cfg, extra: int) -> None:
        super().__init__(cfg)
        self.extra = extra

    def step(self) -> list[Event]:
        events = super().step()
        decoded = [e.rid for e in events if e.kind == "token" and not any(
            f.kind == "finish" and f.rid == e.rid for f in events)]
        for rid in decoded[:self.extra]:
            events += [Preempt(rid, None, True), Resume(rid, 0, 0)]
            self.extra -= 1
        return events


def test_more_preemptions_than_the_proved_bound_are_reported() -> None:
    """The bound (model/bounds.py) on a workload with two priority levels; a
    system whose preemptions exceed it is reported at the end of the run, one
    within it is not."""
    w = livelock_example().with_config(preemption_policy="guarded")
    bound = preemption_bound(w)
    assert bound is not None
    clean = run_workload(w, ModelSUT, [ModelBounds()])
    assert clean.violation is None and clean.drained and clean.driver.counters.preemptions <= bound
    over = run_workload(w, partial(Repreempting, extra=bound + 1), [ModelBounds()])
    assert over.violation is not None and over.violation.prop == "preemption-bound"
    assert over.violation.message == f"{clean.driver.counters.preemptions + bound + 1} preemptions > bound {bound}"
