"""Conformance: the engine's scheduler and the reference model emit the same
events step by step, and their KV accounting agrees (the lockstep check)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from loopcheck.checks.lockstep import Lockstep
from loopcheck.fuzz.strategies import workloads
from loopcheck.model.workload import Workload
from loopcheck.sut.driver import run_workload
from loopcheck.sut.torch_sut import TorchSUT
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
