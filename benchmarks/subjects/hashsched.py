"""A small scheduler written for the deep-bug benchmark, NOT sharing loopcheck's
semantics: a block-hash prefix cache with reference counts and LRU eviction of
unreferenced cached blocks, chunked prefill, recompute preemption (a preempted
request keeps its tokens and computes prompt and tokens again), FCFS or
priority order, and its own allocation scheme: at admission it takes blocks for
the whole prompt at once (hits shared, the rest fresh), then one block per page
as decoding grows. Running requests are scheduled in the order they were
admitted; one that finds no block preempts the least urgent running request
(under FCFS the last admitted), which may be itself or one already in the
step's batch (its work is then taken out of the batch).

Bugs in its prefix-cache and preemption paths can be planted one at a time
(`BUGS`); benchmarks/deep_bugs.py measures how fast loopcheck finds each.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from loopcheck.model.config import Config
from loopcheck.model.events import (
    Abort,
    Admit,
    Arrive,
    Event,
    Finish,
    Preempt,
    Prefill,
    Reject,
    RequestOutput,
    Resume,
    Token,
)
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import PLAIN_ENGINE, Capabilities, Observation

# Its allocation is neither upfront nor incremental: it holds at most what upfront allows.
PINNED = {**PLAIN_ENGINE, "allocation": "upfront", "watermark_blocks": 0, "execution": "mixed"}
BUGS = {
    "stale-hash": "eviction leaves the evicted block's hash in the table",
    "partial-hash": "a page is hashed when a chunk ends inside it, before it is full",
    "eager-hash": "pages are hashed when their chunk is scheduled, and a preemption in the same step "
                  "does not take them back",
    "leak-on-preempt": "a preempted request's blocks keep their references",
    "double-release": "a preempted request releases its shared (hit) blocks twice",
    "hit-no-ref": "a prefix hit shares a cached block without taking a reference",
    "evict-held": "eviction may take a cached block a running request still holds",
    "urgent-victim": "growth preempts the most urgent other running request, not the least urgent",
    "keep-computed": "a preempted request keeps its computed positions, whose blocks it freed",
    "victim-in-batch": "a request preempted after it was put in the step's batch keeps its work there",
    "prompt-only-token": "a request with max_tokens 0 samples a token when its prompt is done (the limit is "
                         "checked only after a token is appended)",
}


@dataclass
class Seq:
    spec: RequestSpec
    tokens: list[int] = field(default_factory=list)
    computed: int = 0                                  # positions whose KV is written
    blocks: list[int] = field(default_factory=list)
    hashed: int = 0                                    # leading pages registered in the cache
    done: str | None = None
    preempted: bool = False

    @property
    def length(self) -> int:
        """Positions it has: the prompt and the tokens sampled so far."""
        return len(self.spec.prompt) + len(self.tokens)

    def context(self, end: int) -> tuple[int, ...]:
        return (tuple(self.spec.prompt) + tuple(self.tokens))[:end]


class BlockTable:
    """Free blocks, reference counts, and the hash table of full pages."""

    def __init__(self, num_blocks: int, bugs: frozenset[str]) -> None:
        self.bugs = bugs
        self.free: deque[int] = deque(range(num_blocks))
        self.refs = [0] * num_blocks
        self.by_hash: dict[int, int] = {}
        self.hash_of: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()   # cached blocks nobody references, oldest first

    def available(self) -> int:
        return len(self.free) + len(self.lru)

    def take(self, held: set[int]) -> int:
        if self.free:
            block = self.free.popleft()
        else:
            block, _ = self.lru.popitem(last=False)
            if "evict-held" in self.bugs and held:
                self.lru[block] = None
                block = min(held)   # the bug: a held cached block is taken instead
            self._forget(block)
        self.refs[block] = 1
        return block

    def _forget(self, block: int) -> None:
        key = self.hash_of.pop(block, None)
        if key is not None and "stale-hash" not in self.bugs:
            del self.by_hash[key]

    def share(self, block: int) -> None:
        if "hit-no-ref" not in self.bugs or self.refs[block] == 0:
            self.refs[block] += 1
        self.lru.pop(block, None)

    def release(self, block: int) -> None:
        self.refs[block] = max(0, self.refs[block] - 1)
        if self.refs[block] == 0:
            if block in self.hash_of:
                self.lru[block] = None
            elif block not in self.free:
                self.free.append(block)

    def register(self, key: int, block: int) -> None:
        if key not in self.by_hash and block not in self.hash_of:
            self.by_hash[key], self.hash_of[block] = block, key


class HashScheduler:
    def __init__(self, cfg: Config, bugs: frozenset[str] = frozenset()) -> None:
        unknown = bugs - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs: {sorted(unknown)}")
        self.cfg, self.bugs = cfg, bugs
        self.capabilities = Capabilities(kv=True, state_key=True, priorities=cfg.priority_preemption,
                                         pinned=PINNED, block_tables=True, code=(__name__,), cached_pages=True)
        self.table = BlockTable(cfg.num_blocks, bugs)
        self.page_tokens: dict[int, tuple[int, ...]] = {}   # a hash-table key -> the tokens it was made of
        self.seqs: dict[str, Seq] = {}
        self.waiting: list[Seq] = []
        self.running: list[Seq] = []
        self.arrivals: list[RequestSpec] = []
        self.aborts: list[str] = []

    # ----- the protocol ------------------------------------------------------------------
    def add(self, spec: RequestSpec) -> None:
        self.arrivals.append(spec)

    def abort(self, rid: str) -> None:
        self.aborts.append(rid)

    def step(self) -> list[Event]:
        """Intake; then the running requests in the order they were admitted, each
        computing its next chunk or token (growing by a block, or preempting for
        one), but, under priority, one less urgent than the most urgent waiting
        request that fits leaves it the budget; then the waiting requests in
        order (by priority, else arrival), each admitted if a slot (under
        priority, made by preempting a less urgent one) and its blocks are
        there, else it and those after it wait; then the batch runs."""
        events: list[Event] = []
        self._intake(events)
        batch: dict[str, int] = {}   # request -> positions it computes this step
        preempted: set[str] = set()
        head = min(self.waiting, key=self._order, default=None) if self.cfg.priority_preemption else None
        yields = head is not None and self._fits(head)
        for s in list(self.running):
            left = self.cfg.max_num_batched_tokens - sum(batch.values())
            if s not in self.running or left <= 0 or (yields and self._order(head) < self._order(s)):
                continue
            self._work(s, batch, left, events, preempted)
        for s in sorted(self.waiting, key=self._order):
            left = self.cfg.max_num_batched_tokens - sum(batch.values())
            if left <= 0 or s.spec.rid in preempted or not self._admit(s, batch, left, events, preempted):
                break
        self._run(batch, events)
        return events

    def observe(self) -> Observation:
        held = self.cfg.num_blocks - self.table.available()
        outputs = {rid: RequestOutput(rid, list(s.tokens), [1] * len(s.tokens), s.done) for rid, s in self.seqs.items()}
        key = (tuple((rid, s.computed, tuple(s.blocks), len(s.tokens), s.done) for rid, s in self.seqs.items()),
               tuple(s.spec.rid for s in self.waiting), tuple(s.spec.rid for s in self.running),
               tuple(self.table.free), tuple(self.table.lru), tuple(sorted(self.table.by_hash.items())))
        return Observation(blocks_held=held, outputs=outputs, state_key=key,
                           unfinished=bool(self.arrivals) or any(s.done is None for s in self.seqs.values()),
                           block_tables={s.spec.rid: [[b] for b in s.blocks] for s in self.running},
                           cached_pages=sorted(self.page_tokens[k] for k in self.table.by_hash))

    # ----- one step ----------------------------------------------------------------------
    def _order(self, s: Seq) -> tuple:
        return s.spec.key if self.cfg.priority_preemption else (s.spec.arrival, s.spec.rid)

    def _intake(self, events: list[Event]) -> None:
        bs = self.cfg.block_size
        for spec in self.arrivals:
            s = self.seqs[spec.rid] = Seq(spec)
            events.append(Arrive(spec.rid))
            if -(-(len(spec.prompt) + max(spec.max_tokens, 1) - 1) // bs) > self.cfg.num_blocks:
                events.append(Reject(spec.rid, "longer than the pool"))
                self._finish(s, "rejected", events)
            else:
                self.waiting.append(s)
        self.arrivals = []
        for rid in self.aborts:
            s = self.seqs[rid]
            if s.done is None:
                events.append(Abort(rid))
                self._finish(s, "abort", events)
        self.aborts = []

    def _work(self, s: Seq, batch: dict[str, int], budget: int, events: list[Event], preempted: set[str]) -> None:
        """A running request's next chunk (or its one decode position) in the
        batch, after growing by a block per page it reaches, preempting for a
        block when none is left (possibly itself)."""
        n = min(self.cfg.prefill_chunk_size, s.length - s.computed, budget)
        while -(-(s.computed + n) // self.cfg.block_size) > len(s.blocks):
            if self.table.available() > 0:
                s.blocks.append(self._take())
                continue
            victim = self._victim(s)
            self._preempt(victim, s, events, batch, preempted)
            if victim is s:
                return
        if n > 0:
            batch[s.spec.rid] = n
            if "eager-hash" in self.bugs:
                self._register(s, s.computed + n)

    def _victim(self, growing: Seq) -> Seq:
        """The running request to preempt for a block: the least urgent (under FCFS
        the last admitted), in the batch or not, possibly the one growing."""
        if "urgent-victim" in self.bugs and len(self.running) > 1:
            return min((v for v in self.running if v is not growing), key=self._order)
        return max(self.running, key=self._order) if self.cfg.priority_preemption else self.running[-1]

    def _preempt(self, victim: Seq, by: Seq, events: list[Event], batch: dict[str, int], preempted: set[str]) -> None:
        """Recompute preemption: its blocks go back, its tokens stay (the event
        says it keeps them), it computes everything again when admitted."""
        events.append(Preempt(victim.spec.rid, by.spec.rid, True))
        preempted.add(victim.spec.rid)
        self.running.remove(victim)
        if "victim-in-batch" not in self.bugs:
            batch.pop(victim.spec.rid, None)
        if "leak-on-preempt" not in self.bugs:
            hits = victim.blocks[:victim.hashed] if "double-release" in self.bugs else []
            for block in victim.blocks + hits:
                self.table.release(block)
        victim.blocks = []
        victim.hashed = 0
        if "keep-computed" not in self.bugs:
            victim.computed = 0
        victim.preempted = True
        self.waiting.append(victim)

    def _hits(self, s: Seq) -> list[int]:
        """Cached blocks of its leading full pages, leaving its last position to compute."""
        if not self.cfg.prefix_caching:
            return []
        bs, out = self.cfg.block_size, []
        while (len(out) + 1) * bs < s.length:
            block = self.table.by_hash.get(hash(s.context((len(out) + 1) * bs)))
            if block is None:
                break
            out.append(block)
        return out

    def _admit(self, s: Seq, batch: dict[str, int], budget: int, events: list[Event], preempted: set[str]) -> bool:
        """Admit a waiting request with the blocks of its whole context at once
        (hit pages shared) and its first chunk in the batch, if a slot is free
        (under priority, made free by preempting the least urgent running
        request outside the batch, if less urgent) and the blocks are there.
        Whether it was admitted."""
        cfg, bs = self.cfg, self.cfg.block_size
        if not self._fits(s):
            return False
        hits = self._hits(s)
        fresh = -(-s.length // bs) - len(hits)
        if len(self.running) >= cfg.max_num_seqs:
            outside = [v for v in self.running if v.spec.rid not in batch]
            victim = max(outside, key=self._order, default=None)
            if not (cfg.priority_preemption and victim is not None and self._order(victim) > self._order(s)):
                return False
            self._preempt(victim, s, events, batch, preempted)
        for block in hits:
            self.table.share(block)
        s.blocks = hits + [self._take() for _ in range(fresh)]
        s.hashed = len(hits)
        s.computed = max(s.computed, len(hits) * bs)
        self.waiting.remove(s)
        self.running.append(s)
        events.append(Resume(s.spec.rid, len(hits), 0) if s.preempted
                      else Admit(s.spec.rid, len(hits)))
        s.preempted = False
        batch[s.spec.rid] = min(cfg.prefill_chunk_size, s.length - s.computed, budget)
        if "eager-hash" in self.bugs:
            self._register(s, s.computed + batch[s.spec.rid])
        return True

    def _fits(self, s: Seq) -> bool:
        """Whether its whole context's blocks are there (hit pages shared)."""
        hits = self._hits(s)
        fresh = -(-s.length // self.cfg.block_size) - len(hits)
        return fresh <= self.table.available() - sum(self.table.refs[b] == 0 for b in hits)

    def _take(self) -> int:
        held = ({b for s in self.running for b in s.blocks if b in self.table.hash_of} if "evict-held" in self.bugs
                else set())
        return self.table.take(held)

    def _register(self, s: Seq, upto: int) -> None:
        """Hash its full pages up to position `upto` into the cache."""
        if not self.cfg.prefix_caching:
            return
        bs = self.cfg.block_size
        pages = upto // bs if "partial-hash" not in self.bugs else -(-upto // bs)
        for k in range(s.hashed, min(pages, len(s.blocks))):
            tokens = s.context((k + 1) * bs)
            self.page_tokens[hash(tokens)] = tokens
            self.table.register(hash(tokens), s.blocks[k])
            s.hashed = k + 1

    def _run(self, batch: dict[str, int], events: list[Event]) -> None:
        for rid, n in batch.items():
            s = self.seqs[rid]
            start = s.computed
            s.computed += n
            if start < s.length - 1 or n > 1 or not s.spec.max_tokens:   # (a decode computes its one position)
                events.append(Prefill(rid, start, s.computed))
            if s in self.running:
                self._register(s, s.computed)
            if s.computed >= s.length and s.spec.max_tokens == 0 and "prompt-only-token" not in self.bugs:
                self._finish(s, "length", events)   # a prompt-only request: no token
            elif s.computed >= s.length:
                token = hash(s.context(s.length)) % 64
                events.append(Token(rid, len(s.tokens), token))
                s.tokens.append(token)
                if token == s.spec.stop_token:
                    self._finish(s, "stop", events)
                elif len(s.tokens) >= s.spec.max_tokens:
                    self._finish(s, "length", events)

    def _finish(self, s: Seq, reason: str, events: list[Event]) -> None:
        s.done = reason
        for block in s.blocks:
            self.table.release(block)
        s.blocks = []
        for queue in (self.waiting, self.running):
            if s in queue:
                queue.remove(s)
        events.append(Finish(s.spec.rid, reason))


def factory(*bugs: str):
    """A factory of the scheduler with these bugs planted."""
    def build(cfg: Config) -> HashScheduler:
        return HashScheduler(cfg, frozenset(bugs))
    build.__qualname__ = f"hashsched[{','.join(bugs) or 'clean'}]"
    return build


clean = factory()
