"""Small builders shared by the tests."""

from __future__ import annotations

from typing import Any

from loopcheck.model.config import Config
from loopcheck.model.events import Event
from loopcheck.model.reference import step
from loopcheck.model.simulate import WorkloadEnv
from loopcheck.model.state import SchedState, initial_state
from loopcheck.model.workload import RequestSpec, Workload


def req(rid: str, prompt_len: int, max_tokens: int, arrival: int = 0, priority: int = 0,
        base: int = 1, **kw: Any) -> RequestSpec:
    return RequestSpec(rid, tuple((base + k) % 64 for k in range(prompt_len)), max_tokens,
                       arrival, priority, **kw)


def workload(*reqs: RequestSpec, **cfg: Any) -> Workload:
    return Workload(Config(**cfg), tuple(reqs))


def run_steps(w: Workload, n: int) -> tuple[SchedState, list[list[Event]]]:
    """Run n model steps; return the last state and each step's events."""
    env = WorkloadEnv(w)
    state = initial_state(w.config.num_blocks, len(w.requests))
    trace = []
    for _ in range(n):
        state, events = step(state, env)
        trace.append(events)
    return state, trace


def kinds(events: list[Event]) -> list[str]:
    return [str(e) for e in events]


def five_requests() -> Workload:
    """Five requests at four priorities, three with stop tokens, on a pool that
    holds two at a time (the explorer's pinned family with spread 3)."""
    return workload(req("a", 3, 2, priority=2, stop_token=1), req("b", 2, 2, priority=1, stop_token=2),
                    req("c", 3, 1, priority=0), req("d", 2, 2, priority=3, stop_token=3), req("e", 1, 2, priority=1),
                    num_blocks=6, block_size=2, num_loops=2, kv_layout="shared", max_num_seqs=2,
                    max_num_batched_tokens=4, prefill_chunk_size=2, allocation="upfront")
