"""Safety obligations checked on concrete model states and steps.

Each check returns a list of human-readable violations; empty means it holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from loopcheck.model.config import Config
from loopcheck.model.events import Draft, Event, Preempt, Prefill
from loopcheck.model.state import FINISHED, RUNNING, SchedState
from loopcheck.model.workload import Workload


def state_violations(state: SchedState, cfg: Config, indices: Sequence[int] | None = None) -> list[str]:
    """KV conservation, reference counts and the slot bound on one state; and, when
    every request finished, nothing held.

    With `indices`, only those requests are read: the caller vouches that every other
    request holds nothing and was already checked (the model SUT passes the running
    requests and those the last step's events name: a status or pages change only
    with an event), and the drained check is left to the caller (the driver's
    kv-conservation check makes it from the observation)."""
    out: list[str] = []
    reqs = list(enumerate(state.reqs)) if indices is None else [(i, state.reqs[i]) for i in indices]
    private = sum(p is None for _, r in reqs for p in r.pages)
    total = state.free + cfg.planes * (private + len(state.cache))
    if total != cfg.num_blocks or state.free < 0:
        out.append(f"KV conservation: free {state.free} + held/cached blocks "
                   f"{total - state.free} != num_blocks {cfg.num_blocks}")
    holders = Counter(p for _, r in reqs for p in r.pages if p is not None)
    for h, refs in state.cache:
        if holders[h] != refs:
            out.append(f"ref count of cached page {h:x}: {refs} != {holders[h]} holders")
    if set(holders) - {h for h, _ in state.cache}:
        out.append("a request holds a shared page that is not in the prefix cache")
    running = sum(r.status == RUNNING for _, r in reqs)
    if running > cfg.max_num_seqs:
        out.append(f"running {running} > max_num_seqs {cfg.max_num_seqs}")
    for i, r in reqs:
        if r.status != RUNNING and r.pages:
            out.append(f"request #{i} is {r.status} but holds {len(r.pages)} pages")
    if indices is None and all(r.status == FINISHED for r in state.reqs):
        held = state.blocks_held(cfg.num_blocks, cfg.planes)
        if held:
            out.append(f"{held} blocks held after drain")
    return out


def batch_tokens(events: list[Event]) -> int:
    """Token-budget cost of one step, read from its events: each prefill event costs
    its chunk's length; a decode row costs one token, except a first token, which
    rides on its prefill row, and one more per draft token it verifies."""
    tokens = 0
    prefilled = {e.rid for e in events if e.kind == "prefill"}
    decoded: set[str] = set()
    for e in events:
        if isinstance(e, Prefill):
            tokens += e.end - e.start
        elif isinstance(e, Draft):
            tokens += e.count
        elif e.kind == "token" and e.rid not in prefilled and e.rid not in decoded:
            tokens += 1
            decoded.add(e.rid)
    return tokens


def step_violations(before: SchedState, after: SchedState, events: list[Event],
                    workload: Workload) -> list[str]:
    """Token budget and frontier monotonicity across one step."""
    cfg = workload.config
    out: list[str] = []
    tokens = batch_tokens(events)
    if tokens > cfg.max_num_batched_tokens:
        out.append(f"batch tokens {tokens} > max_num_batched_tokens {cfg.max_num_batched_tokens}")
    rewound = {e.rid for e in events if isinstance(e, Preempt) and not e.keeps_tokens}
    for spec, r0, r1 in zip(workload.requests, before.reqs, after.reqs, strict=False):
        if r1.frontier < r0.frontier and spec.rid not in rewound:
            out.append(f"{spec.rid}: frontier went back from {r0.frontier} to {r1.frontier}")
    return out
