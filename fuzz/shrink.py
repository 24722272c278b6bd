"""Shrinking a failing recorded workload directly: drop requests (alone, or with
the requests after each moved by up to three steps or by as long as it lived,
so that the gap it leaves closes), then drop aborts, shorten prompts and
max_tokens, and move arrivals earlier, keeping each
change only if replaying still breaks the same rule (the violation's
signature). Bounded by work (a number of replays): the result after n replays is
the same on any machine under any load. A deadline, where given, may stop it earlier; the result says after how
many replays, so that the same bound reproduces it. Before that, `separated` tells a finding that came only after
an ignored one from that one's consequence, by dropping one request at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from loopcheck.checks.base import Check
from loopcheck.driver.driver import Run, run_workload
from loopcheck.model.events import Event
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.runctl.stop import StopRequest
from loopcheck.runctl.ticker import Ticker
from loopcheck.sut.protocol import SutFactory


def with_request(w: Workload, i: int, r: RequestSpec | None) -> Workload:
    """`w` with request i replaced by `r`, or dropped when `r` is None."""
    reqs = list(w.requests)
    if r is None:
        del reqs[i]
    else:
        reqs[i] = r
    return Workload(w.config, tuple(reqs))


def shifted(r: RequestSpec, by: int) -> RequestSpec:
    """`r` arriving (and aborted, if it is) `by` steps later."""
    return replace(r, arrival=r.arrival + by, abort_at=None if r.abort_at is None else r.abort_at + by)


def _shift_from(w: Workload, step: int, by: int) -> Workload:
    """Every request arriving at or after `step` arrives `by` steps later (earlier
    when negative)."""
    return Workload(w.config, tuple(shifted(r, by) if r.arrival >= step else r for r in w.requests))


def lifetimes(trace: list[list[Event]]) -> dict[str, int]:
    """Per request, the steps from its first event to its last in `trace`."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for t, events in enumerate(trace):
        for e in events:
            first.setdefault(e.rid, t)
            last[e.rid] = t
    return {rid: last[rid] - first[rid] + 1 for rid in first}


def candidates(w: Workload, lives: dict[str, int]) -> Iterator[Workload]:
    """Smaller or simpler variants of `w`, the likeliest gains first; `lives`:
    each request's lifetime in steps in `w`'s run."""
    for i in range(len(w.requests)):
        yield with_request(w, i, None)
        later = [r.arrival for r in w.requests if r.arrival > w.requests[i].arrival]
        if later:   # drop it and move the requests after it, to keep the timing that matters (the gap it
            first = min(later)   # leaves: as long as it lived)
            life = lives.get(w.requests[i].rid, 0)
            for by in sorted({-3, -2, -1, 1, 2, 3, -life - 1, -life, 1 - life} - {0}):
                if first + by >= 0:
                    yield _shift_from(with_request(w, i, None), first, by)
    for step in sorted({r.arrival for r in w.requests} - {0}):
        yield _shift_from(w, step, -1)
    for i, r in enumerate(w.requests):
        if r.abort_at is not None:
            yield with_request(w, i, replace(r, abort_at=None))
        for shorter in sorted({len(r.prompt) // 2, len(r.prompt) - 1} - {0, len(r.prompt)}):
            yield with_request(w, i, replace(r, prompt=r.prompt[:shorter]))
        for fewer in sorted({r.max_tokens // 2, r.max_tokens - 1} - {-1, 0, r.max_tokens}):
            yield with_request(w, i, replace(r, max_tokens=fewer))
        if r.arrival > 0:
            yield with_request(w, i, shifted(r, -1))
        if r.lora:
            yield with_request(w, i, replace(r, lora=0))
        if r.grammar_ready is not None:
            yield with_request(w, i, replace(r, grammar_ready=None))
        if r.grammar_ready not in (None, 0):
            yield with_request(w, i, replace(r, grammar_ready=0))
        if r.kv_load_steps is not None:
            yield with_request(w, i, replace(r, kv_load_steps=None, kv_load_fails=False))
        if r.kv_load_fails:
            yield with_request(w, i, replace(r, kv_load_fails=False))
        if r.kv_load_steps not in (None, 1):
            yield with_request(w, i, replace(r, kv_load_steps=1))
        if r.spec_accepts:
            yield with_request(w, i, replace(r, spec_accepts=()))
    if w.config.spec_tokens:
        yield w.with_config(spec_tokens=0)
    if w.config.async_scheduling:
        yield w.with_config(async_scheduling=False)
    if w.config.pause != "off":
        yield w.with_config(pause="off", pause_at=0, pause_steps=1)
        if w.config.pause_steps > 1:
            yield w.with_config(pause_steps=w.config.pause_steps - 1)
        if w.config.pause_at:
            yield w.with_config(pause_at=w.config.pause_at - 1)


@dataclass
class Shrunk:
    """A shrink's outcome: the smallest workload found, its run, the replays made,
    and whether the deadline (not the work bound or a fixpoint) ended it."""

    workload: Workload
    run: Run
    replays: int
    cut: bool


class NotReproduced(Exception):
    """The workload to shrink does not break the rule it was recorded for."""


def separated(w: Workload, signature: str, factory: SutFactory, checks: Callable[[], list[Check]]) -> Run | None:
    """A run of `w` with one of its requests dropped (each in turn; at most one
    replay per request) that reports a violation of `signature` as its own
    finding, no ignored finding before it; None if none does. A violation that
    came only after an ignored finding in `w`'s run may be that finding's
    consequence; one that a request fewer shows alone is a bug of its own."""
    for i in range(len(w.requests) if len(w.requests) > 1 else 0):
        StopRequest.check()
        run = run_workload(with_request(w, i, None), factory, checks())
        if run.violation is not None and run.violation.signature == signature:
            return run
    return None


def shrink(w: Workload, signature: str, factory: SutFactory, checks: Callable[[], list[Check]],
           max_replays: int = 400, deadline: float | None = None,
           progress: Callable[[str], None] | None = None, tick: float = 2.0) -> Shrunk:
    """The smallest workload found within `max_replays` replays (and before the
    `deadline`, a time.monotonic() value, if any) that still breaks the same
    rule: a violation of `signature` (`Violation.signature`, PROP@WHERE), or of
    its property alone when `signature` names only a property; NotReproduced if
    `w` itself does not. `progress` gets a line about every `tick`
    seconds."""
    def same(run: Run) -> bool:
        v = run.violation
        return v is not None and signature in (v.signature, v.prop)

    best = run_workload(w, factory, checks())
    if not same(best):
        raise NotReproduced(f"the workload does not reproduce {signature!r}")
    replays = 0
    improved = True
    clock = Ticker(tick)
    while improved and replays < max_replays:
        improved = False
        for cand in candidates(w, lifetimes(best.driver.trace)):
            if not cand.requests:
                continue
            if replays >= max_replays:
                break
            if deadline is not None and time.monotonic() >= deadline:
                return Shrunk(w, best, replays, cut=True)
            if progress and clock.due():
                progress(f"shrinking: {replays} replays, {len(w.requests)} requests")
            replays += 1
            StopRequest.check()
            run = run_workload(cand, factory, checks())
            if same(run):
                w, best, improved = cand, run, True
                break
    return Shrunk(w, best, replays, cut=False)
