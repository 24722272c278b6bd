"""Invariants of the design hold on every step of random workloads (Hypothesis)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings

from loopcheck.fuzz.strategies import workloads
from loopcheck.model import reference
from loopcheck.model.invariants import state_violations, step_violations
from loopcheck.model.reference import step
from loopcheck.model.simulate import WorkloadEnv
from loopcheck.model.state import FINISHED, ReqState, initial_state
from loopcheck.model.workload import InputSchedule
from loopcheck.sut.model_sut import ModelSUT

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
    """Pure: a step leaves the state it was given as it was (every field of the
    state and of each request, compared with a deep copy taken before), so the
    explorer may keep states as dictionary keys; deterministic: the same state
    and environment give the same next state and events."""
    env = WorkloadEnv(w)
    state = initial_state(w.config.num_blocks, len(w.requests))
    for _ in range(30):
        before = copy.deepcopy(state)
        nxt = step(state, env)
        assert state == before and state.reqs == before.reqs
        assert hash(state) == hash(before)   # no cached hash went stale
        assert step(state, env) == nxt
        state = nxt[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_the_step_index_is_only_a_cache(w) -> None:
    """Each step reuses the index the previous step left (live requests in priority
    order, pending ones); a run that rebuilds it every step gives the same states and
    events."""
    env = WorkloadEnv(w)
    state = initial_state(w.config.num_blocks, len(w.requests))
    warm = []
    for _ in range(60):
        state, events = step(state, env)
        warm.append((state, events))
    state = initial_state(w.config.num_blocks, len(w.requests))
    for expected in warm:
        reference._last_index = None
        state, events = step(state, env)
        assert (state, events) == expected


def _leaky_release(self, i: int) -> None:
    """A planted bug: a release that keeps a finished or preempted request's pages."""
    self.reqs[i] = self.reqs[i]


@pytest.mark.parametrize("bug", [None, _leaky_release])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(w=workloads())
def test_the_model_sut_kv_check_sees_what_the_full_check_sees(monkeypatch, bug, w) -> None:
    """The model SUT checks only running requests and those the step named; on a
    correct model and on one that leaks pages, it reports a problem exactly when the
    check of every request does."""
    if bug is not None:
        monkeypatch.setattr(reference._Step, "release", bug)
    sut = ModelSUT(w.config)
    inputs = InputSchedule(w.requests)
    for t in range(80):
        inputs.submit_due(t, sut.add, sut.abort)
        sut.step()
        full = [e for e in state_violations(sut.state, w.config) if "after drain" not in e]
        assert bool(sut.observe().kv_errors) == bool(full), full


def test_evolve_copies_a_request_record_with_fields_changed() -> None:
    r = ReqState(status="running", frontier=4, pages=(None, 7))
    hash(r)   # caches its code and hash, which the copy must not keep
    moved = r.evolve(frontier=6, generated=1)
    assert moved == ReqState(status="running", frontier=6, generated=1, pages=(None, 7))
    assert hash(moved) == hash(ReqState(status="running", frontier=6, generated=1, pages=(None, 7)))
    assert r.frontier == 4 and r.evolve() == r and r.evolve() is not r
    with pytest.raises(TypeError, match="no field 'frontiers'"):
        r.evolve(frontiers=6)
