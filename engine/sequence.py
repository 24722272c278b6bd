"""The engine's per-request record (mutable, owned by the scheduler)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from loopcheck.engine.kv_cache import Page, Snapshot
from loopcheck.model.workload import RequestSpec

WAITING, RUNNING, PREEMPTED, FINISHED = "waiting", "running", "preempted", "finished"


@dataclass(eq=False)
class Sequence:
    """One request inside the engine.

    frontier: prompt tokens done at every depth; chunk_end/chunk_depth: the WCPB
    chunk in flight (chunk_end > frontier) and its depths done; hidden: that chunk's
    rows after chunk_depth depths. token_ids / exit_depths are the outputs so far;
    fingerprint is a running hash of the exact bits of their logits; page_keys
    memoises the prefix-cache keys of its prompt pages.
    """

    spec: RequestSpec
    status: str = WAITING
    frontier: int = 0
    chunk_end: int = 0
    chunk_depth: int = 0
    pages: list[Page] = field(default_factory=list)
    bypasses: int = 0
    finish_reason: str | None = None
    token_ids: list[int] = field(default_factory=list)
    exit_depths: list[int] = field(default_factory=list)
    snapshot: Snapshot | None = None
    hidden: torch.Tensor | None = None
    fingerprint: str = ""
    page_keys: dict[int, bytes] = field(default_factory=dict)

    @property
    def rid(self) -> str:
        return self.spec.rid

    @property
    def prompt_len(self) -> int:
        return len(self.spec.prompt)

    @property
    def generated(self) -> int:
        return len(self.token_ids)

    @property
    def written(self) -> int:
        """Positions whose KV is complete: the frontier while prefilling, else every
        position before the next decode input."""
        return self.frontier if self.frontier < self.prompt_len else self.prompt_len + self.generated - 1


@dataclass(eq=False)
class WorkItem:
    """What one batched request runs this step: a prompt chunk [start, end) at
    depths first..last (1-based), or one decode token at position `start`."""

    seq: Sequence
    kind: str
    start: int
    end: int
    first_depth: int
    last_depth: int
