"""Immutable, hashable scheduler state of the reference model."""

from __future__ import annotations

from dataclasses import dataclass

PENDING, WAITING, RUNNING, PREEMPTED, FINISHED = (
    "pending", "waiting", "running", "preempted", "finished")


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
