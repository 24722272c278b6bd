"""Conformance: the engine's scheduler and the reference model emit the same
events step by step, and their KV accounting agrees."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from fuzz.lockstep import lockstep
from fuzz.strategies import workloads
from model.workload import Workload
from tests.engine_workloads import busy, livelock_example


def test_examples_conform() -> None:
    for policy in ("unguarded", "guarded"):
        w = livelock_example().with_config(preemption_policy=policy)
        assert lockstep(w, 500) is None
    for cfg in ({}, {"snapshots": False}, {"allocation": "incremental"}, {"execution": "refill"},
                {"kv_layout": "shared"}, {"wcpb": False}):
        d = lockstep(busy(**cfg), 500)
        assert d is None, d.describe()


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_random_workloads_conform(w: Workload) -> None:
    d = lockstep(w, 300)
    assert d is None, d.describe()


def test_a_seeded_divergence_is_reported() -> None:
    """The comparison bites: a model told a different token outcome diverges."""
    from fuzz import lockstep as ls

    original = ls.EngineFedEnv.outcome
    ls.EngineFedEnv.outcome = lambda self, rid, i: original(self, rid, i)._replace(token_id=-7)
    try:
        d = lockstep(livelock_example(), 50)
    finally:
        ls.EngineFedEnv.outcome = original
    assert d is not None and "events differ" in d.problems
