"""The engine's production scheduler.

Written from docs/semantics.md independently of model/reference.py (it shares only
the vocabulary types). It owns real pages in a BlockPool and calls back into the
engine to offload a victim's KV before its pages go, and to restore it on resume.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from loopcheck.engine.kv_cache import BlockPool, Page, prefix_key
from loopcheck.engine.runner import Sampled
from loopcheck.engine.sequence import FINISHED, PREEMPTED, RUNNING, WAITING, Sequence, WorkItem
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
)


@dataclass
class Admission:
    """A worked-out admission: prefix keys to share, frontier, first work item, pages."""

    keys: list[bytes]
    frontier: int
    kind: str
    start: int
    end: int
    cost: int
    pages: int


class Scheduler:
    def __init__(self, cfg: Config, pool: BlockPool,
                 offload: Callable[[Sequence], None],
                 restore: Callable[[Sequence, int], None]) -> None:
        self.cfg = cfg
        self.pool = pool
        self.offload = offload
        self.restore = restore
        self.seqs: list[Sequence] = []
        self.arrived: list[Sequence] = []
        self.abort_requests: set[str] = set()
        self.guard: set[tuple[str, int]] = set()
        self.events: list[Event] = []

    # ----- bookkeeping ------------------------------------------------------------
    def emit(self, kind: type[Event], seq: Sequence, *fields: object) -> None:
        self.events.append(kind(seq.rid, *fields))

    def lifetime_pages(self, seq: Sequence) -> int:
        written = seq.prompt_len + max(seq.spec.max_tokens, 1) - 1   # a prompt-only request writes its prompt
        return -(-written // self.cfg.block_size)

    def key_of(self, seq: Sequence, page: int) -> bytes:
        """Prefix-cache key of the request's prompt page (memoised on the request)."""
        if page not in seq.page_keys:
            seq.page_keys[page] = prefix_key(seq.spec.prompt[: (page + 1) * self.cfg.block_size])
        return seq.page_keys[page]

    def running(self) -> list[Sequence]:
        return [s for s in self.seqs if s.status == RUNNING]

    def drop_pages(self, seq: Sequence) -> None:
        for page in seq.pages:
            self.pool.release(page)
        seq.pages = []

    def end(self, seq: Sequence, reason: str) -> None:
        self.drop_pages(seq)
        seq.status, seq.finish_reason = FINISHED, reason
        seq.snapshot = seq.hidden = None
        seq.chunk_end, seq.chunk_depth = seq.frontier, 0
        self.emit(Finish, seq, reason)

    # ----- step phase 1 -----------------------------------------------------------
    def admit_arrivals(self) -> None:
        for seq in self.arrived:
            self.emit(Arrive, seq)
            need = self.lifetime_pages(seq) * self.pool.planes
            if need > self.cfg.num_blocks:
                self.emit(Reject, seq, f"needs {need} blocks, pool has {self.cfg.num_blocks}")
                seq.status, seq.finish_reason = FINISHED, "rejected"
                self.emit(Finish, seq, "rejected")
        self.arrived = []
        for seq in self.seqs:
            if seq.rid in self.abort_requests and seq.status != FINISHED:
                self.emit(Abort, seq)
                self.end(seq, "abort")
        self.abort_requests = set()

    # ----- step phase 2 -----------------------------------------------------------
    def schedule(self) -> list[WorkItem]:
        self.batch: list[WorkItem] = []
        self.in_batch: set[str] = set()
        self.budget = self.cfg.max_num_batched_tokens
        self.stage: str | None = None
        self.passed_over: list[Sequence] = []
        self.was_active = any(s.status == RUNNING for s in self.seqs)
        for seq in sorted((s for s in self.seqs if s.status != FINISHED), key=lambda s: s.spec.key):
            if seq.status == RUNNING:
                self.continue_running(seq)
            elif seq.status in (WAITING, PREEMPTED):
                self.try_admit(seq)
        return self.batch

    def stage_ok(self, kind: str) -> bool:
        return self.cfg.execution == "mixed" or self.stage is None or self.stage == kind

    def enqueue(self, seq: Sequence, kind: str, start: int, end: int, cost: int) -> None:
        if kind == "decode":
            first, last = 1, self.cfg.num_loops
        elif self.cfg.wcpb:
            first = last = seq.chunk_depth + 1
        else:
            first, last = 1, self.cfg.num_loops
        self.batch.append(WorkItem(seq, kind, start, end, first, last))
        self.in_batch.add(seq.rid)
        self.budget -= cost
        if self.stage is None:
            self.stage = kind

    def continue_running(self, seq: Sequence) -> None:
        if seq.chunk_end > seq.frontier:
            kind, start, end = "prefill", seq.frontier, seq.chunk_end
        elif seq.frontier < seq.prompt_len:
            n = min(self.cfg.prefill_chunk_size, seq.prompt_len - seq.frontier, self.budget)
            kind, start, end = "prefill", seq.frontier, seq.frontier + n
        else:
            pos = seq.prompt_len + seq.generated - 1
            kind, start, end = "decode", pos, pos + 1
        cost = end - start
        if cost <= 0 or cost > self.budget or not self.stage_ok(kind):
            return
        missing = -(-end // self.cfg.block_size) - len(seq.pages)
        while missing > 0 and self.pool.free_count() < missing * self.pool.planes:
            victims = self.victims(lambda v: v.spec.key > seq.spec.key)
            if not victims:
                self.preempt(seq, seq)
                return
            self.preempt(victims[0], seq)
        for _ in range(max(0, missing)):
            seq.pages.append(self.pool.new_page())
        if kind == "prefill":
            seq.chunk_end = end
        self.enqueue(seq, kind, start, end, cost)

    def victims(self, eligible: Callable[[Sequence], bool]) -> list[Sequence]:
        cands = [s for s in self.running() if s.rid not in self.in_batch and eligible(s)]
        return sorted(cands, key=lambda s: s.spec.key, reverse=True)

    def preempt(self, victim: Sequence, for_seq: Sequence) -> None:
        if victim.chunk_end > victim.frontier:
            self.emit(Rewind, victim, victim.frontier)
            victim.chunk_end, victim.chunk_depth, victim.hidden = victim.frontier, 0, None
        if self.cfg.snapshots:
            self.offload(victim)
        self.drop_pages(victim)
        if not self.cfg.snapshots:
            victim.frontier = victim.chunk_end = 0
            victim.token_ids, victim.exit_depths, victim.fingerprint = [], [], ""
        victim.status = PREEMPTED
        self.emit(Preempt, victim, for_seq.rid, self.cfg.snapshots)

    def hit_keys(self, seq: Sequence, pending: frozenset[bytes] | set[bytes] = frozenset()) -> list[bytes]:
        if not self.cfg.prefix_caching:
            return []
        keys = []
        for page in range((seq.prompt_len - 1) // self.cfg.block_size):
            key = self.key_of(seq, page)
            if self.pool.lookup(key) is None and key not in pending:
                break
            keys.append(key)
        return keys

    def admission(self, seq: Sequence, keys: list[bytes]) -> Admission | None:
        bs = self.cfg.block_size
        frontier = max(seq.frontier, len(keys) * bs)
        if frontier < seq.prompt_len:
            cost = min(self.cfg.prefill_chunk_size, seq.prompt_len - frontier, self.budget)
            kind, start, end = "prefill", frontier, frontier + cost
        else:
            cost, kind = 1, "decode"
            start = seq.prompt_len + seq.generated - 1
            end = start + 1
        if cost < 1 or cost > self.budget:
            return None
        pages = self.lifetime_pages(seq) if self.cfg.allocation == "upfront" else -(-end // bs)
        return Admission(keys, frontier, kind, start, end, cost, pages)

    def room_for(self, adm: Admission, free_blocks: int, running: int,
                 cache_only: Callable[[bytes], bool], watermark: bool) -> bool:
        if running >= self.cfg.max_num_seqs:
            return False
        spare = free_blocks - self.pool.planes * sum(1 for k in adm.keys if cache_only(k))
        if watermark:
            spare -= self.cfg.watermark_blocks
        return spare >= self.pool.planes * (adm.pages - len(adm.keys))

    def fits_now(self, adm: Admission, watermark: bool) -> bool:
        return self.room_for(adm, self.pool.free_count(), len(self.running()), self.pool.is_cache_only, watermark)

    def keeps_watermark(self, seq: Sequence) -> bool:
        """The watermark stays free while something was running: for a fresh
        admission, and for a resumption unless resume_watermark is off."""
        return self.was_active and (seq.status == WAITING or self.cfg.resume_watermark)

    def preflight(self, seq: Sequence, victim: Sequence, watermark: bool) -> bool:
        """Guarded check: room for seq once `victim` is preempted, counting prompt
        pages other running requests hold privately as (pending) hits."""
        freed = [p for p in victim.pages if p.key is None or p.holders == 1]
        freed_keys = {p.key for p in freed if p.key is not None}
        pending = {self.key_of(s, i) for s in self.running() if s is not victim
                   for i, p in enumerate(s.pages)
                   if p.key is None and (i + 1) * self.cfg.block_size <= s.prompt_len}
        adm = self.admission(seq, self.hit_keys(seq, pending))
        if adm is None:
            return False
        return self.room_for(
            adm, self.pool.free_count() + self.pool.planes * len(freed), len(self.running()) - 1,
            lambda k: self.pool.is_cache_only(k) or k in freed_keys, watermark)

    def try_admit(self, seq: Sequence) -> None:
        fresh = seq.status == WAITING
        adm = self.admission(seq, self.hit_keys(seq))
        blocked = fresh and any(s.bypasses >= self.cfg.max_bypasses for s in self.passed_over)
        if adm is None or not self.stage_ok(adm.kind) or blocked:
            self.passed_over.append(seq)
            return
        watermark = self.keeps_watermark(seq)
        ok = self.fits_now(adm, watermark)
        if not ok and self.cfg.priority_preemption:
            budget = self.pool.free_count()
            victim = self.choose_victim(seq, budget, watermark)
            if victim is not None:
                self.preempt(victim, seq)
                adm = self.admission(seq, self.hit_keys(seq))
                ok = adm is not None and self.fits_now(adm, watermark)
                if not ok and self.cfg.preemption_policy == "guarded":
                    self.guard.add((seq.rid, budget))
        if not ok or adm is None:
            self.passed_over.append(seq)
            return
        self.start(seq, adm, fresh)

    def choose_victim(self, seq: Sequence, budget: int, watermark: bool) -> Sequence | None:
        cands = self.victims(lambda v: v.spec.priority > seq.spec.priority)
        if self.cfg.preemption_policy == "unguarded":
            return cands[0] if cands else None
        if (seq.rid, budget) in self.guard:
            return None
        return next((v for v in cands if self.preflight(seq, v, watermark)), None)

    def start(self, seq: Sequence, adm: Admission, fresh: bool) -> None:
        """Atomic admission: share the hits, take the private pages, restore."""
        seq.pages = [self.pool.share(k) for k in adm.keys]
        seq.pages += [self.pool.new_page() for _ in range(adm.pages - len(adm.keys))]
        restored = 0
        if seq.snapshot is not None:
            restored = max(0, seq.snapshot.written - len(adm.keys) * self.cfg.block_size)
            self.restore(seq, len(adm.keys))
            seq.snapshot = None
        seq.frontier = seq.chunk_end = adm.frontier
        seq.chunk_depth = 0
        seq.status, seq.bypasses = RUNNING, 0
        self.guard = {g for g in self.guard if g[0] != seq.rid}
        if fresh:
            self.emit(Admit, seq, len(adm.keys))
            for other in self.passed_over:
                other.bypasses += 1
        else:
            self.emit(Resume, seq, len(adm.keys), restored)
        if adm.kind == "prefill":
            seq.chunk_end = adm.end
        self.enqueue(seq, adm.kind, adm.start, adm.end, adm.cost)

    # ----- step phase 3 -----------------------------------------------------------
    def complete(self, item: WorkItem, token: Sampled | None) -> None:
        """Apply one executed work item (in priority order), with the token it
        produced if any, then publish and finish."""
        seq, L = item.seq, self.cfg.num_loops
        if item.kind == "prefill":
            self.emit(Prefill, seq, item.start, item.end, item.last_depth)
            if item.last_depth == L:
                seq.frontier, seq.chunk_depth = item.end, 0
            else:
                seq.chunk_depth = item.last_depth
        if token is not None:
            self.emit(Token, seq, seq.generated, token.token_id, token.exit_depth)
            seq.token_ids.append(token.token_id)
            seq.exit_depths.append(token.exit_depth)
            seq.fingerprint = hashlib.sha256(seq.fingerprint.encode() + token.logit_bits).hexdigest()
        self.publish(seq)
        if token is None:
            if seq.spec.max_tokens == 0 and seq.frontier == seq.prompt_len:
                self.end(seq, "length")
            return
        if seq.spec.stop_token is not None and token[0] == seq.spec.stop_token:
            self.end(seq, "stop")
        elif seq.generated >= seq.spec.max_tokens:
            self.end(seq, "length")

    def publish(self, seq: Sequence) -> None:
        if not self.cfg.prefix_caching:
            return
        limit = min(seq.frontier, seq.prompt_len) // self.cfg.block_size
        for i, page in enumerate(seq.pages[:limit]):
            if page.key is None and self.pool.publish(page, self.key_of(seq, i)):
                self.emit(Publish, seq, i)

    def held_pages(self) -> list[Page]:
        return [p for s in self.seqs for p in s.pages]
