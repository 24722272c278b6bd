"""Invariants of the design hold on every step of random workloads (Hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from fuzz.strategies import workloads
from model.invariants import state_violations, step_violations
from model.reference import step
from model.simulate import WorkloadEnv
from model.state import FINISHED, initial_state

BOUND = 400


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_safety_invariants_hold_on_every_step(w) -> None:
    env = WorkloadEnv(w)
    state = initial_state(w.config.num_blocks, len(w.requests))
    for _ in range(BOUND):
        before = state
        state, events = step(state, env)
        assert state_violations(state, w.config) == [], events
        assert step_violations(before, state, events, w) == [], events
        if all(r.status == FINISHED for r in state.reqs):
            break


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_step_is_pure_and_deterministic(w) -> None:
    env = WorkloadEnv(w)
    state = initial_state(w.config.num_blocks, len(w.requests))
    for _ in range(30):
        again = step(state, env)
        nxt = step(state, env)
        assert again == nxt
        hash(nxt[0])
        state = nxt[0]
