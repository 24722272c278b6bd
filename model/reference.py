"""The reference scheduler: `step(state, env) -> (state, events)`, a pure function.

This is the executable form of docs/semantics.md; every rule there is written
here once, readably. The engine's scheduler is an independent rendition.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from loopcheck.model.config import Config
from loopcheck.model.events import (
    Abort,
    Admit,
    Arrive,
    Event,
    Finish,
    Preempt,
    Prefill,
    Publish,
    Reject,
    Resume,
    Rewind,
    Token,
    TokenOutcome,
)
from loopcheck.model.state import FINISHED, PENDING, PREEMPTED, RUNNING, WAITING, ReqState, SchedState
from loopcheck.model.workload import RequestSpec, Workload


class Env(Protocol):
    """What the world decides: the workload so far, aborts, and each token's outcome."""

    workload: Workload

    def aborts(self, step: int) -> frozenset[str]: ...

    def outcome(self, rid: str, index: int) -> TokenOutcome: ...


@lru_cache(maxsize=65536)
def page_hash(prefix: tuple[int, ...]) -> int:
    """Prefix-cache key of the page that ends a token prefix (content hash, stable)."""
    digest = hashlib.blake2b(repr(prefix).encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def total_pages(spec: RequestSpec, cfg: Config) -> int:
    """Pages a request needs for its whole life: prompt + max_tokens - 1 positions
    (the last token is never written), and the prompt's positions when it has
    max_tokens 0; under speculative decoding, `spec_tokens` positions more (the
    drafts a step may write past them; 0 in the reference scheduler)."""
    return ceil_div(len(spec.prompt) + max(spec.max_tokens, 1) - 1 + cfg.spec_tokens, cfg.block_size)


def never_fits(spec: RequestSpec, cfg: Config) -> bool:
    return total_pages(spec, cfg) * cfg.planes > cfg.num_blocks


@dataclass(frozen=True)
class Plan:
    """An admission (fresh or resume) worked out against the current pool."""

    hits: int            # leading prompt pages taken from the prefix cache
    frontier: int        # frontier after admission
    generated: int       # tokens kept (snapshot) or 0
    end: int             # positions written once this step's work is done
    tokens: int          # budget tokens the first work item costs
    pages: int           # pages to hold after admission
    restored: int        # positions restored from a CPU snapshot


LIVE = (WAITING, RUNNING, PREEMPTED)


def arrival_order(specs: tuple[RequestSpec, ...]) -> Callable[[int], tuple[int, int]]:
    """Sort key of request indices by (arrival, index): the order arrivals are taken."""
    return lambda i: (specs[i].arrival, i)


@dataclass(frozen=True)
class Index:
    """Lookups derived from a state's statuses and its workload's requests, so that
    a step costs time in the requests it touches, not in all requests.

    live: schedulable requests (waiting, running, preempted) in priority order.
    running, preempted: those among them.
    pending: requests not yet arrived, by (arrival, index).
    touched: requests named by the events of the step that made `reqs`: no other
    request's status or pages changed in that step (for an index built afresh,
    every request).
    """

    specs: tuple[RequestSpec, ...]
    reqs: tuple[ReqState, ...]
    live: tuple[int, ...]
    running: frozenset[int]
    preempted: frozenset[int]
    pending: tuple[int, ...]
    touched: tuple[int, ...]

    @staticmethod
    def build(specs: tuple[RequestSpec, ...], reqs: tuple[ReqState, ...]) -> Index:
        live = sorted((i for i, r in enumerate(reqs) if r.status in LIVE), key=lambda i: specs[i].key)
        pending = sorted((i for i, r in enumerate(reqs) if r.status == PENDING), key=arrival_order(specs))
        running = frozenset(i for i in live if reqs[i].status == RUNNING)
        preempted = frozenset(i for i in live if reqs[i].status == PREEMPTED)
        return Index(specs, reqs, tuple(live), running, preempted, tuple(pending), tuple(range(len(reqs))))

    def extends(self, specs: tuple[RequestSpec, ...], reqs: tuple[ReqState, ...]) -> bool:
        """`specs` and `reqs` are these, plus requests appended since and still pending."""
        n = len(self.reqs)
        return (len(specs) == len(reqs) >= n and (specs is self.specs or specs[:n] == self.specs)
                and (reqs is self.reqs or reqs[:n] == self.reqs)
                and all(r.status == PENDING for r in reqs[n:]))


_last_index: Index | None = None   # the index of the last state a step returned (a cache only)


def index_of(specs: tuple[RequestSpec, ...], reqs: tuple[ReqState, ...]) -> Index:
    """The Index of (specs, reqs): the one the last step left, extended with the
    requests appended since, or built afresh."""
    last = _last_index
    if last is None or not last.extends(specs, reqs):
        return Index.build(specs, reqs)
    if len(reqs) == len(last.reqs):
        return last
    pending = list(last.pending)
    for i in range(len(last.reqs), len(reqs)):
        insort(pending, i, key=arrival_order(specs))
    return Index(specs, reqs, last.live, last.running, last.preempted, tuple(pending), last.touched)


class _Step:
    """Mutable working copy of one step; `run` returns the next frozen state."""

    def __init__(self, state: SchedState, env: Env) -> None:
        self.env = env
        self.cfg = env.workload.config
        self.specs = env.workload.requests
        self.planes = self.cfg.planes   # blocks per page
        self.reqs = list(state.reqs)
        self.free = state.free
        self.cache = dict(state.cache)  # insertion order is eviction order
        self.cache_only = sum(1 for h in self.cache.values() if h == 0)
        self.guard = set(state.guard)
        self.t = state.step
        self.events: list[Event] = []
        self.batch: dict[int, tuple[str, int, int]] = {}  # i -> (kind, start, end)
        self.budget = self.cfg.max_num_batched_tokens
        self.stage: str | None = None
        index = index_of(self.specs, state.reqs)
        self.order = list(index.live)           # schedulable requests, priority order
        self.pending = list(index.pending)
        self.touched: set[int] = set()          # requests named by this step's events
        self.running_now = set(index.running)
        self.preempted_now = set(index.preempted)
        # Requests skipped so far in this pass, in groups, each with the number of
        # fresh admissions made before it was skipped: each later fresh admission is
        # one bypass of it (added to its record when the step ends, see
        # `settle_bypasses`).
        self.skipped: list[tuple[Sequence[int], int]] = []
        self.fresh_admissions = 0
        self.blocked_from = float("inf")   # fresh_admissions at which a skipped request hits max_bypasses
        self.blocked_known = 0             # skip groups folded into blocked_from so far

    # ----- pool -----------------------------------------------------------------
    def free_count(self) -> int:
        return self.free + self.planes * self.cache_only

    def emit(self, kind: type[Event], i: int, *fields: object) -> None:
        self.events.append(kind(self.specs[i].rid, *fields))
        self.touched.add(i)

    def release(self, i: int) -> None:
        """Drop every page request i holds; shared pages lose one holder."""
        for page in self.reqs[i].pages:
            if page is None:
                self.free += self.planes
            else:
                self.cache[page] -= 1
                if self.cache[page] == 0:  # becomes cache-only: move to eviction tail
                    self.cache[page] = self.cache.pop(page)
                    self.cache_only += 1
        self.reqs[i] = self.reqs[i].evolve(pages=())

    def take_private(self, n: int) -> None:
        """Move n pages' blocks off the free queue, evicting cache-only pages first in
        eviction order when the queue is short. Assumes free_count() suffices."""
        need = n * self.planes
        while self.free < need:
            victim = next(h for h, holders in self.cache.items() if holders == 0)
            del self.cache[victim]
            self.cache_only -= 1
            self.free += self.planes
        self.free -= need

    # ----- request helpers --------------------------------------------------------
    def running(self) -> list[int]:
        return sorted(self.running_now)

    def set_status(self, i: int, r: ReqState) -> None:
        """Replace request i's record, keeping the set of running requests in step."""
        self.reqs[i] = r
        self.running_now.discard(i)
        self.preempted_now.discard(i)
        if r.status == RUNNING:
            self.running_now.add(i)
        elif r.status == PREEMPTED:
            self.preempted_now.add(i)

    def prompt_len(self, i: int) -> int:
        return len(self.specs[i].prompt)

    def prompt_hash(self, i: int, k: int) -> int:
        return page_hash(self.specs[i].prompt[: (k + 1) * self.cfg.block_size])

    def hit_pages(self, i: int, pending_from: frozenset[int] = frozenset()) -> int:
        """Leading prompt pages found in the prefix cache (or, for the guarded
        estimate, held privately by a running request in `pending_from`), leaving at
        least the last prompt position to compute."""
        if not self.cfg.prefix_caching:
            return 0
        pending = {self.prompt_hash(j, k) for j in pending_from
                   for k, p in enumerate(self.reqs[j].pages)
                   if p is None and (k + 1) * self.cfg.block_size <= self.prompt_len(j)}
        limit = (self.prompt_len(i) - 1) // self.cfg.block_size
        hits = 0
        while hits < limit:
            h = self.prompt_hash(i, hits)
            if h not in self.cache and h not in pending:
                break
            hits += 1
        return hits

    def plan(self, i: int, pending_from: frozenset[int] = frozenset()) -> Plan | None:
        """Admission plan for waiting/preempted request i, or None when the token
        budget cannot take its first work item."""
        r, bs, spec = self.reqs[i], self.cfg.block_size, self.specs[i]
        hits = self.hit_pages(i, pending_from)
        P = len(spec.prompt)
        frontier = max(r.frontier, hits * bs)
        if frontier >= P:  # snapshot of a decoding request
            tokens, end = 1, P + r.generated
            written = P + r.generated - 1
        else:
            tokens = min(self.cfg.prefill_chunk_size, P - frontier, self.budget)
            end = frontier + tokens
            written = r.frontier
        if tokens < 1 or tokens > self.budget:
            return None
        pages = total_pages(spec, self.cfg) if self.cfg.allocation == "upfront" else ceil_div(end, bs)
        return Plan(hits, frontier, r.generated, end, tokens, pages,
                    max(0, written - hits * bs))

    def slots_full(self) -> bool:
        return len(self.running_now) >= self.cfg.max_num_seqs

    def fits(self, i: int, plan: Plan, watermark: bool) -> bool:
        """Slots, and blocks: free - cache-only pages the hits reuse - the
        watermark (when it binds, see `schedule_waiting`) must cover the private
        pages."""
        if self.slots_full():
            return False
        hit_cache_only = sum(1 for k in range(plan.hits)
                             if self.cache.get(self.prompt_hash(i, k)) == 0)
        available = self.free_count() - self.planes * hit_cache_only
        if watermark:
            available -= self.cfg.watermark_blocks
        return available >= self.planes * (plan.pages - plan.hits)

    def victims(self, eligible: Callable[[RequestSpec], bool]) -> list[int]:
        """Running requests not in this step's batch passing `eligible`, least
        urgent (largest priority key) first."""
        cands = [j for j in self.running() if j not in self.batch and eligible(self.specs[j])]
        return sorted(cands, key=lambda j: self.specs[j].key, reverse=True)

    def preempt(self, v: int, by: int) -> None:
        r = self.reqs[v]
        if r.chunk_end > r.frontier:
            self.emit(Rewind, v, r.frontier)
            r = r.evolve(chunk_end=r.frontier, chunk_depth=0)
        self.reqs[v] = r
        self.release(v)
        if self.cfg.snapshots:
            self.set_status(v, self.reqs[v].evolve(status=PREEMPTED))
        else:
            self.set_status(v, self.reqs[v].evolve(status=PREEMPTED, frontier=0, chunk_end=0, generated=0))
        self.emit(Preempt, v, self.specs[by].rid, self.cfg.snapshots)

    def key_of(self, i: int) -> tuple[int, int, str]:
        return self.specs[i].key

    def finish(self, i: int, reason: str) -> None:
        """Finish a schedulable request (it leaves the priority order)."""
        del self.order[bisect_left(self.order, self.key_of(i), key=self.key_of)]
        self.release(i)
        self.set_status(i, self.reqs[i].evolve(status=FINISHED, finish=reason,
                                               chunk_end=self.reqs[i].frontier, chunk_depth=0))
        self.emit(Finish, i, reason)

    # ----- phases -----------------------------------------------------------------
    def arrivals_and_aborts(self) -> None:
        due = 0
        while due < len(self.pending) and self.specs[self.pending[due]].arrival <= self.t:
            due += 1
        arrived, self.pending = sorted(self.pending[:due]), self.pending[due:]
        for i in arrived:
            spec = self.specs[i]
            self.emit(Arrive, i)
            if never_fits(spec, self.cfg):
                need = total_pages(spec, self.cfg) * self.planes
                self.emit(Reject, i, f"needs {need} blocks, pool has {self.cfg.num_blocks}")
                self.reqs[i] = self.reqs[i].evolve(status=FINISHED, finish="rejected")
                self.emit(Finish, i, "rejected")
            else:
                self.reqs[i] = self.reqs[i].evolve(status=WAITING)
                insort(self.order, i, key=self.key_of)
        aborts = self.env.aborts(self.t)
        aborted = [i for i in self.order if self.specs[i].rid in aborts] if aborts else []
        for i in sorted(aborted, key=lambda j: (self.specs[j].arrival, j)):
            if self.reqs[i].status not in (PENDING, FINISHED):
                self.emit(Abort, i)
                self.finish(i, "abort")

    def work_of(self, i: int) -> tuple[str, int, int]:
        """Next work item of running request i: (kind, start, end)."""
        r, P = self.reqs[i], self.prompt_len(i)
        if r.chunk_end > r.frontier:
            return ("prefill", r.frontier, r.chunk_end)
        if r.frontier < P:
            n = min(self.cfg.prefill_chunk_size, P - r.frontier, self.budget)
            return ("prefill", r.frontier, r.frontier + n)
        return ("decode", P + r.generated - 1, P + r.generated)

    def stage_allows(self, kind: str) -> bool:
        return self.cfg.execution == "mixed" or self.stage in (None, kind)

    def put_in_batch(self, i: int, work: tuple[str, int, int]) -> None:
        self.batch[i] = work
        self.budget -= 1 if work[0] == "decode" else work[2] - work[1]
        self.stage = self.stage or work[0]

    def schedule_running(self, i: int) -> None:
        kind, start, end = self.work_of(i)
        tokens = 1 if kind == "decode" else end - start
        if tokens < 1 or tokens > self.budget or not self.stage_allows(kind):
            return
        grow = ceil_div(end, self.cfg.block_size) - len(self.reqs[i].pages)
        need = self.planes * max(0, grow)
        while self.free_count() < need:  # growth may use the watermark
            less_urgent = self.victims(lambda s: s.key > self.specs[i].key)
            if not less_urgent:
                self.preempt(i, by=i)
                return
            self.preempt(less_urgent[0], by=i)
        if grow > 0:
            self.take_private(grow)
            self.reqs[i] = self.reqs[i].evolve(pages=self.reqs[i].pages + (None,) * grow)
        self.put_in_batch(i, (kind, start, end))

    def bypass_blocked(self) -> bool:
        """Some request skipped earlier in this pass has been bypassed max_bypasses times."""
        for group, before in self.skipped[self.blocked_known:]:
            fewest_left = self.cfg.max_bypasses - max(self.reqs[j].bypasses for j in group)
            self.blocked_from = min(self.blocked_from, fewest_left + before)
        self.blocked_known = len(self.skipped)
        return self.fresh_admissions >= self.blocked_from

    def skip(self, group: Sequence[int]) -> None:
        """Skip these waiting or preempted requests (one, or a run of the order)."""
        if group:
            self.skipped.append((group, self.fresh_admissions))

    def settle_bypasses(self) -> None:
        """Each skipped request was bypassed by every fresh admission after its skip."""
        for group, before in self.skipped:
            if self.fresh_admissions > before:
                for j in group:
                    bypasses = self.reqs[j].bypasses + self.fresh_admissions - before
                    self.reqs[j] = self.reqs[j].evolve(bypasses=bypasses)

    def choose_victim(self, i: int, watermark: bool) -> int | None:
        """Priority preemption for waiting request i: None means do not preempt."""
        urgency = self.specs[i].priority
        guarded = self.cfg.preemption_policy == "guarded"
        if guarded and (i, self.free_count()) in self.guard:
            return None
        cands = self.victims(lambda s: s.priority > urgency)
        if not guarded:
            return cands[0] if cands else None
        running = frozenset(self.running())
        for v in cands:
            if self.preflight(i, v, running - {v}, watermark):
                return v
        return None

    def preflight(self, i: int, v: int, others: frozenset[int], watermark: bool) -> bool:
        """Guarded check: would i fit once v is preempted, counting prefix pages that
        other running requests are still prefilling as hits (optimistic)?"""
        saved = (self.reqs[v], self.free, dict(self.cache), self.cache_only)
        self.set_status(v, self.reqs[v].evolve(status=PREEMPTED))
        self.release(v)
        plan = self.plan(i, pending_from=others)
        ok = plan is not None and self.fits(i, plan, watermark)
        self.set_status(v, saved[0])
        self.free, self.cache, self.cache_only = saved[1:]
        return ok

    def schedule_waiting(self, i: int, active: bool) -> None:
        """Admit waiting or preempted request i if it fits, maybe after one
        preemption. The watermark binds while something was active, for a fresh
        admission always and for a resumption only with `resume_watermark`."""
        fresh = self.reqs[i].status == WAITING
        watermark = active and (fresh or self.cfg.resume_watermark)
        plan = self.plan(i)
        if (plan is None or not self.stage_allows(self.kind_of(i, plan))
                or (fresh and self.bypass_blocked())):
            self.skip((i,))
            return
        admitted = self.fits(i, plan, watermark)
        if not admitted and self.cfg.priority_preemption:
            budget = self.free_count()
            victim = self.choose_victim(i, watermark)
            if victim is not None:
                self.preempt(victim, by=i)
                plan = self.plan(i)
                admitted = plan is not None and self.fits(i, plan, watermark)
                if not admitted and self.cfg.preemption_policy == "guarded":
                    self.guard.add((i, budget))
        if not admitted:
            self.skip((i,))
            return
        assert plan is not None
        self.admit(i, plan, fresh)

    def admit(self, i: int, plan: Plan, fresh: bool) -> None:
        hashes = []
        for k in range(plan.hits):
            h = self.prompt_hash(i, k)
            self.cache_only -= self.cache[h] == 0
            self.cache[h] += 1
            hashes.append(h)
        self.take_private(plan.pages - plan.hits)
        r = self.reqs[i]
        self.set_status(i, r.evolve(status=RUNNING, frontier=plan.frontier,
                                    chunk_end=plan.frontier, chunk_depth=0,
                                    pages=tuple(hashes) + (None,) * (plan.pages - plan.hits),
                                    bypasses=0))
        self.guard = {g for g in self.guard if g[0] != i}
        if fresh:
            self.emit(Admit, i, plan.hits)
            self.fresh_admissions += 1
        else:
            self.emit(Resume, i, plan.hits, plan.restored)
        kind = self.kind_of(i, plan)
        start = plan.end - 1 if kind == "decode" else plan.frontier
        self.put_in_batch(i, (kind, start, plan.end))

    def kind_of(self, i: int, plan: Plan) -> str:
        return "decode" if plan.frontier >= self.prompt_len(i) else "prefill"

    def schedule(self) -> None:
        active = bool(self.running_now)
        order, pos = self.order, 0
        while pos < len(order) and self.budget > 0:   # no budget: nothing more can enter the batch
            i = order[pos]
            status = self.reqs[i].status
            end = None
            if status == RUNNING:
                self.schedule_running(i)
            elif self.idle_until(i):
                end = self.next_position(i, self.running_now)
            elif status == WAITING and self.bypass_blocked():  # only resumptions can follow
                end = self.next_position(i, self.running_now, self.preempted_now)
            else:
                self.schedule_waiting(i, active)
            if end is None:
                pos += 1
            else:   # i, and every request up to `end`, can only be skipped
                self.skip(order[pos:end])
                pos = end

    def idle_until(self, i: int) -> bool:
        """Waiting request i, and every waiting request after it up to the next
        running one, can only be skipped: no slot is free and no running request
        outside the batch is less urgent than i (so none could be preempted)."""
        if not self.slots_full():
            return False
        if not self.cfg.priority_preemption:
            return True
        urgency = self.specs[i].priority
        return not self.victims(lambda s: s.priority > urgency)

    def next_position(self, i: int, *among: set[int]) -> int:
        """Position in the order of the first request after i that is in one of
        `among` (or the end)."""
        later = [j for group in among for j in group if self.key_of(j) > self.key_of(i)]
        if not later:
            return len(self.order)
        first = min(later, key=self.key_of)
        return bisect_left(self.order, self.key_of(first), key=self.key_of)

    def execute(self) -> None:
        L, P_of = self.cfg.num_loops, self.prompt_len
        for i in sorted(self.batch, key=lambda j: self.specs[j].key):
            kind, start, end = self.batch[i]
            r, spec = self.reqs[i], self.specs[i]
            if kind == "prefill":
                depth = r.chunk_depth + 1 if self.cfg.wcpb else L
                self.emit(Prefill, i, start, end, depth)
                if depth == L:
                    r = r.evolve(frontier=end, chunk_end=end, chunk_depth=0)
                else:
                    r = r.evolve(chunk_end=end, chunk_depth=depth)
                self.reqs[i] = r
                if not (depth == L and end == P_of(i)):
                    self.publish(i)
                    continue
                if spec.max_tokens == 0:   # a prompt-only request: no token
                    self.publish(i)
                    self.finish(i, "length")
                    continue
            outcome = self.env.outcome(spec.rid, r.generated)
            depth = L if r.generated == 0 else outcome.exit_depth
            self.emit(Token, i, r.generated, outcome.token_id, depth)
            self.reqs[i] = r.evolve(generated=r.generated + 1)
            self.publish(i)
            if spec.stop_token is not None and outcome.token_id == spec.stop_token:
                self.finish(i, "stop")
            elif r.generated + 1 >= spec.max_tokens:
                self.finish(i, "length")

    def publish(self, i: int) -> None:
        """Full prompt pages below the frontier enter the prefix cache."""
        if not self.cfg.prefix_caching:
            return
        r, bs = self.reqs[i], self.cfg.block_size
        pages = list(r.pages)
        for k, page in enumerate(pages):
            if page is None and (k + 1) * bs <= min(r.frontier, self.prompt_len(i)):
                h = self.prompt_hash(i, k)
                if h not in self.cache:
                    self.cache[h] = 1  # the private page's blocks now back the entry
                    pages[k] = h
                    self.emit(Publish, i, k)
        self.reqs[i] = r.evolve(pages=tuple(pages))

    def run(self) -> tuple[SchedState, list[Event]]:
        self.arrivals_and_aborts()
        self.schedule()
        self.settle_bypasses()
        self.execute()
        reqs = tuple(self.reqs)
        state = SchedState(self.t + 1, reqs, self.free, tuple(self.cache.items()), frozenset(self.guard))
        global _last_index
        _last_index = Index(self.specs, reqs, tuple(self.order), frozenset(self.running_now),
                            frozenset(self.preempted_now), tuple(self.pending),
                            tuple(sorted(self.touched)))
        return state, self.events


def step(state: SchedState, env: Env) -> tuple[SchedState, list[Event]]:
    """One scheduler step: arrivals, aborts, schedule, execute, update.

    Pure: `state` is not changed; the same state and env give the same result.
    """
    return _Step(state, env).run()
