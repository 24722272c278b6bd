"""Immutable, hashable scheduler state of the reference model, and its stable
64-bit fingerprint."""

from __future__ import annotations

from dataclasses import dataclass

PENDING, WAITING, RUNNING, PREEMPTED, FINISHED = (
    "pending", "waiting", "running", "preempted", "finished")
_STATUS_CODE = {PENDING: 0, WAITING: 1, RUNNING: 2, PREEMPTED: 3, FINISHED: 4}
_FINISH_CODE = {None: 0, "length": 1, "stop": 2, "abort": 3, "rejected": 4}


@dataclass(frozen=True)
class ReqState:
    """One request's scheduling state.

    frontier: prompt tokens whose every depth is done. chunk_end > frontier while a
    WCPB chunk is in flight, with chunk_depth depths of it done. pages: one entry per
    KV page held, None for a private page, else the prefix-cache hash of a shared
    page. bypasses: how often a less urgent request was freshly admitted past it.
    """

    status: str = PENDING
    frontier: int = 0
    chunk_end: int = 0
    chunk_depth: int = 0
    generated: int = 0
    pages: tuple[int | None, ...] = ()
    bypasses: int = 0
    finish: str | None = None

    def evolve(self, **changes: object) -> ReqState:
        """A copy with some fields changed: `dataclasses.replace` without its
        per-call introspection (the model makes several per step)."""
        if not _REQ_FIELDS.issuperset(changes):
            raise TypeError(f"ReqState has no field {sorted(changes.keys() - _REQ_FIELDS)[0]!r}")
        new = object.__new__(ReqState)
        values = new.__dict__
        values.update(self.__dict__)
        values.pop("_code", None)
        values.pop("_hash", None)
        values.update(changes)
        return new

    def __hash__(self) -> int:
        """The hash of `code()`, computed once (the explorer's keys hash many requests)."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(self.code())
            object.__setattr__(self, "_hash", cached)
        return cached

    def code(self) -> tuple[int, ...]:
        """The fields as integers only (stable across processes, unlike the hash
        of a string or of None), computed once."""
        cached = self.__dict__.get("_code")
        if cached is None:
            cached = (_STATUS_CODE[self.status], self.frontier, self.chunk_end, self.chunk_depth, self.generated,
                      self.bypasses, _FINISH_CODE[self.finish], len(self.pages),
                      *(-1 if page is None else page for page in self.pages))
            object.__setattr__(self, "_code", cached)
        return cached


_REQ_FIELDS = frozenset(ReqState.__dataclass_fields__)


@dataclass(frozen=True)
class SchedState:
    """The whole state. `reqs` is aligned with the workload's requests by index.

    free: blocks on the free queue (not counting cache-only pages).
    cache: prefix-cache entries (hash, holders) in eviction order; an entry with no
    holder is cache-only, evictable, and counts as free.
    guard: (request index, free-block budget) pairs for which the guarded policy
    must not preempt again.
    """

    step: int
    reqs: tuple[ReqState, ...]
    free: int
    cache: tuple[tuple[int, int], ...] = ()
    guard: frozenset[tuple[int, int]] = frozenset()

    def __hash__(self) -> int:
        """The fields' hash, computed once (states are dictionary keys in the
        explorer, looked up many times)."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.step, self.reqs, self.free, self.cache, self.guard))
            object.__setattr__(self, "_hash", cached)
        return cached

    def content_fingerprint(self) -> int:
        """A 64-bit fingerprint of everything but the step counter, the same in
        every process and run (hashes of tuples of integers): equal contents have
        equal fingerprints; different ones collide with probability about 2^-64."""
        parts = [self.free, len(self.cache), *(x for entry in self.cache for x in entry)]
        for r in self.reqs:
            parts += r.code()
        for entry in sorted(self.guard):   # set order is not stable
            parts += entry
        return hash(tuple(parts))

    def free_count(self, planes: int) -> int:
        """Free blocks as admission sees them: free queue plus cache-only pages."""
        return self.free + planes * sum(1 for _, holders in self.cache if holders == 0)

    def blocks_held(self, num_blocks: int, planes: int) -> int:
        """Blocks that requests hold: everything not free."""
        return num_blocks - self.free_count(planes)


def initial_state(num_blocks: int, num_requests: int) -> SchedState:
    return SchedState(step=0, reqs=(ReqState(),) * num_requests, free=num_blocks)


def with_requests(state: SchedState, n: int) -> SchedState:
    """The state after pending requests were appended to the workload, up to n in all."""
    if len(state.reqs) >= n:
        return state
    return SchedState(state.step, state.reqs + (ReqState(),) * (n - len(state.reqs)), state.free, state.cache,
                      state.guard)
