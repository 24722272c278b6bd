"""A small third-party-style scheduler that does not share loopcheck's semantics
(FCFS or priority queue, chunked prefill, incremental KV blocks with ids, a
prefix cache whose full prompt pages requests share, recompute preemption of the last
admitted running request, no WCPB, no snapshots; under priority, the least
urgent running request is the one preempted, and the token budget goes to the
most urgent waiting request before less urgent running ones; a preemption names
the request it was for), with bugs that can be switched on one at a time. The
property checks must pass it clean and catch each bug without a reference model
of it."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from loopcheck.model.config import Config
from loopcheck.model.events import (
    BY_KIND,
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
from loopcheck.sut.protocol import PLAIN_ENGINE, Capabilities, Observation, Refused

PINNED = {**PLAIN_ENGINE, "allocation": "incremental", "watermark_blocks": 0, "execution": "mixed"}
# Bugs "misplaced-KIND": the toy reports an event of that kind, once, for a request in a state where no
# scheduler can report it (its arguments are well formed; SELF stands for the request's own id):
# kind -> (that state, the event's arguments).
SELF = "<self>"
MISPLACED = {"arrive": ("running", ()), "reject": ("running", ("too long",)), "abort": ("finished", ()),
             "admit": ("running", (0,)), "resume": ("waiting", (0, 0)), "preempt": ("waiting", (SELF, False)),
             "rewind": ("waiting", (0,)), "prefill": ("waiting", (0, 1, 1)), "token": ("finished", (0, 0, 1)),
             "publish": ("waiting", (0,)), "finish": ("finished", ("length",))}
BUGS = ("leak", "no-reject", "slot-cap", "budget", "crash-on-abort", "no-priority", "batch-dependent-token",
        "overshoot", "ignore-stop", "self-preempt", "spin", "skip-position", "chunk-overrun", "lost-abort",
        "unreported-stop", "short-alloc", "early-token", "stale-resume", "page-key",
        "keep-on-preempt", "phantom-restore", "urgent-victim", "stale-key", "split-chunk", "prompt-only-early",
        "grammar-early", "grammar-stuck", "grammar-starves", "lora-over", *(f"misplaced-{kind}" for kind in MISPLACED))


@dataclass
class Req:
    spec: RequestSpec
    computed: int = 0
    table: list[int] = field(default_factory=list)   # its blocks, one a page
    tokens: list[int] = field(default_factory=list)
    done: str | None = None
    preempted: bool = False
    preempted_once: bool = False


class Pool:
    """The toy's blocks: a free queue, and prefix-cache pages by key, shared by
    requests (a cached page nobody holds is free too, evicted oldest first).
    `stale_keys`: the bug that keeps an evicted page's key, so the key names a
    block that now holds other tokens."""

    def __init__(self, num_blocks: int, stale_keys: bool) -> None:
        self.stale_keys = stale_keys
        self.queue: deque[int] = deque(range(num_blocks))
        self.holders = [0] * num_blocks
        self.cached: dict[tuple[int, ...], int] = {}   # key -> block
        self.key_of: dict[int, tuple[int, ...]] = {}   # cached block -> its key
        self.evictable: OrderedDict[int, None] = OrderedDict()

    @property
    def free(self) -> int:
        return len(self.queue) + len(self.evictable)

    def take(self) -> int:
        """A block for a new page: from the queue, else the oldest evictable page's."""
        if self.queue:
            block = self.queue.popleft()
        else:
            block, _ = self.evictable.popitem(last=False)
            key = self.key_of.pop(block)
            if not self.stale_keys:
                del self.cached[key]
        self.holders[block] = 1
        return block

    def share(self, key: tuple[int, ...]) -> int:
        block = self.cached[key]
        if not self.holders[block] and block in self.evictable:
            del self.evictable[block]
        elif not self.holders[block]:
            self.queue.remove(block)   # a stale key's block, freed since
        self.holders[block] += 1
        return block

    def publish(self, block: int, key: tuple[int, ...]) -> None:
        if key not in self.cached and block not in self.key_of:
            self.cached[key], self.key_of[block] = block, key

    def release(self, block: int) -> None:
        self.holders[block] -= 1
        if not self.holders[block]:
            if block in self.key_of:
                self.evictable[block] = None
            else:
                self.queue.append(block)


class ToyScheduler:
    """`bugs`: names from BUGS, switched on. `block_tables`: whether it reports
    its block tables (without them, only the count of blocks held shows KV).
    `features`: the deployment features it claims (none by default): with
    "grammar", a request is admitted only once its grammar is compiled; with
    "lora", a step's batch takes requests of at most max_loras adapters."""

    def __init__(self, cfg: Config, bugs: frozenset[str] = frozenset(), block_tables: bool = True,
                 features: tuple[str, ...] = ()) -> None:
        self.cfg, self.bugs = cfg, bugs
        self.capabilities = Capabilities(kv=True, state_key=True, priorities=cfg.priority_preemption,
                                         pinned=PINNED, block_tables=block_tables, code=(__name__,),
                                         features=features)
        self.t = 0   # steps run
        self.pool = Pool(cfg.num_blocks, "stale-key" in bugs)
        self.pending: list[RequestSpec] = []
        self.aborting: list[str] = []
        self.reqs: dict[str, Req] = {}
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.reported: set[str] = set()   # the misplaced-KIND bugs whose event was reported

    def add(self, spec: RequestSpec) -> None:
        self.pending.append(spec)

    def abort(self, rid: str) -> None:
        self.aborting.append(rid)

    def _page_key(self, prompt: tuple[int, ...], end: int) -> tuple[int, ...]:
        """The prefix-cache key of the full prompt page ending at `end`: its prefix
        (the bug: only its own tokens, so pages of different prefixes collide)."""
        return prompt[end - self.cfg.block_size:end] if "page-key" in self.bugs else prompt[:end]

    def _hits(self, r: Req) -> list[tuple[int, ...]]:
        """With prefix caching, the keys of the leading full prompt pages in the
        cache, leaving the last prompt position to compute (none for a request
        that holds pages)."""
        keys, bs = [], self.cfg.block_size
        while self.cfg.prefix_caching and not r.table and (len(keys) + 1) * bs < len(r.spec.prompt) and \
                self._page_key(r.spec.prompt, (len(keys) + 1) * bs) in self.pool.cached:
            keys.append(self._page_key(r.spec.prompt, (len(keys) + 1) * bs))
        return keys

    def _need(self, r: Req, positions: int) -> int:
        pages = positions // self.cfg.block_size if "short-alloc" in self.bugs else -(-positions // self.cfg.block_size)
        return max(0, pages - len(r.table))   # the bug leaves a partly used last block out

    def _grow(self, r: Req, positions: int) -> None:
        for _ in range(self._need(r, positions)):
            r.table.append(self.pool.take())

    def _release(self, r: Req) -> None:
        if "leak" not in self.bugs or r.done is None:
            for block in r.table:
                self.pool.release(block)
        r.table = []

    def _finish(self, r: Req, reason: str, events: list[Event]) -> None:
        r.done = reason
        self._release(r)
        for queue in (self.waiting, self.running):
            if r in queue:
                queue.remove(r)
        events.append(Finish(r.spec.rid, reason))

    def _preempt(self, victim: Req, by: Req, events: list[Event]) -> None:
        events.append(Preempt(victim.spec.rid, by.spec.rid, False))
        if "keep-on-preempt" not in self.bugs:   # the bug keeps its blocks, reused when it is admitted again
            self._release(victim)
        # the bugs keep positions whose KV they freed (phantom-restore reports them as restored from a snapshot)
        kept = victim.computed if {"stale-resume", "phantom-restore"} & self.bugs else 0
        victim.computed, victim.tokens, victim.preempted = min(kept, len(victim.spec.prompt) - 1), [], True
        self.waiting.insert(0, victim)

    def step(self) -> list[Event]:
        cfg, events = self.cfg, []
        for spec in self.pending:
            r = self.reqs[spec.rid] = Req(spec)
            events.append(Arrive(spec.rid))
            life = -(-(len(spec.prompt) + max(spec.max_tokens, 1) - 1) // cfg.block_size)
            if life > cfg.num_blocks and "no-reject" not in self.bugs:
                events.append(Reject(spec.rid, "too long"))
                self._finish(r, "rejected", events)
            else:
                self.waiting.append(r)
        self.pending = []
        for rid in self.aborting:
            r = self.reqs[rid]
            if "crash-on-abort" in self.bugs and r in self.waiting:
                raise RuntimeError("abort of a waiting request")
            if r.done is None and not ("lost-abort" in self.bugs and r in self.waiting):
                events.append(Abort(rid))
                self._finish(r, "abort", events)
        self.aborting = []
        priority = cfg.priority_preemption and "no-priority" not in self.bugs
        self.waiting.sort(key=lambda r: r.spec.key if priority else (not r.preempted, r.spec.arrival, r.spec.rid))
        while priority and (head := self._head()) is not None and len(self.running) >= cfg.max_num_seqs:
            victim = max(self.running, key=lambda v: v.spec.key)   # slots are short: the least urgent goes
            if victim.spec.priority <= head.spec.priority:
                break
            self.running.remove(victim)
            self._preempt(victim, head, events)
        budget, batch = cfg.max_num_batched_tokens, []
        head = self._head() if priority else None
        for r in list(self.running):
            if r not in self.running:
                continue
            if head is not None and r.spec.key > head.spec.key and len(self.running) < cfg.max_num_seqs and \
                    self._need(head, len(head.spec.prompt)) <= self.pool.free:
                continue   # the token budget goes to the more urgent waiting request first
            left = len(r.spec.prompt) - r.computed if "chunk-overrun" not in self.bugs else cfg.prefill_chunk_size
            n = min(cfg.prefill_chunk_size, left) if r.computed < len(r.spec.prompt) else 1
            n = min(n, budget) if "budget" not in self.bugs else n
            if n <= 0:
                continue
            while self._need(r, r.computed + n) > self.pool.free and self.running:
                # of those not in the batch yet, the last admitted, or under priority the least urgent; may be r
                free_to_go = [v for v in self.running if not any(v is b for b, _ in batch)]
                victim = max(free_to_go, key=lambda v: v.spec.key) if priority else free_to_go[-1]
                others = [v for v in free_to_go if v is not r]
                if "urgent-victim" in self.bugs and priority and others:   # the most urgent other one goes
                    victim = min(others, key=lambda v: v.spec.key)
                self.running.remove(victim)
                self._preempt(victim, r, events)
                if victim is r:
                    break
            alone = all(x is r or x.done for x in self.reqs.values())
            if "self-preempt" in self.bugs and alone and r.tokens and not r.preempted_once:
                r.preempted_once = True
                self.running.remove(r)
                self._preempt(r, r, events)
            if r in self.running:
                self._grow(r, r.computed + n)
                budget -= n
                if "split-chunk" in self.bugs and n > 1 and r.computed < len(r.spec.prompt):
                    batch.append((r, n // 2))   # two entries of one request: the second attends without the first
                    n -= n // 2
                batch.append((r, n))
        order = (lambda r: r.spec.key) if priority else (lambda r: (not r.preempted, r.spec.arrival, r.spec.rid))
        self.waiting.sort(key=order)
        for r in list(self.waiting):
            if budget <= 0 or (len(self.running) >= cfg.max_num_seqs and "slot-cap" not in self.bugs):
                break
            if not self._may_join(r):
                continue
            keys = self._hits(r)
            hits = len(keys)
            start = max(r.computed, hits * cfg.block_size)
            n = min(cfg.prefill_chunk_size, len(r.spec.prompt) - start, budget)
            # new pages, and hit pages that nobody holds (free until shared)
            cost = self._need(r, start + n) - hits + sum(not self.pool.holders[self.pool.cached[k]] for k in keys)
            while "spin" in self.bugs and cost > self.pool.free:
                pass   # waits, inside the step, for blocks that only a later step can free
            if cost > self.pool.free:
                continue
            self.waiting.remove(r)
            self.running.append(r)
            r.computed = start
            r.table += [self.pool.share(k) for k in keys]
            self._grow(r, start + n)
            budget -= n
            restored = start - hits * cfg.block_size if "phantom-restore" in self.bugs else 0
            events.append(Resume(r.spec.rid, hits, restored) if r.preempted else
                          Admit(r.spec.rid, hits))
            r.preempted = False
            batch.append((r, n))
        for r, n in batch:
            start, r.computed = r.computed, r.computed + n
            for end in range(cfg.block_size, min(r.computed, len(r.spec.prompt)) + 1, cfg.block_size):
                self.pool.publish(r.table[end // cfg.block_size - 1], self._page_key(r.spec.prompt, end))
            if "skip-position" in self.bugs and 0 < start < len(r.spec.prompt) - 1:
                start += 1   # a continued prefill leaves out its first position
            if start < len(r.spec.prompt):
                events.append(Prefill(r.spec.rid, start, r.computed, 1))
            prompt_done = r.computed >= len(r.spec.prompt) or (   # the bug: a prompt-only request ends at once
                "prompt-only-early" in self.bugs and r.computed > 0)
            if r.spec.max_tokens == 0 and prompt_done:   # prompt-only: no token
                self._finish(r, "length", events)
                continue
            early = "early-token" in self.bugs and start < len(r.spec.prompt) and not r.tokens   # a token per chunk
            if r.computed >= len(r.spec.prompt) + len(r.tokens) or early:
                salt = len(batch) if "batch-dependent-token" in self.bugs else 0
                tok = (sum(r.spec.prompt) + 7 * len(r.tokens) + salt) % 64
                events.append(Token(r.spec.rid, len(r.tokens), tok, 1))
                r.tokens.append(tok)
                if tok == r.spec.stop_token and "ignore-stop" not in self.bugs:
                    self._finish(r, "stop", events)
                elif len(r.tokens) >= r.spec.max_tokens + ("overshoot" in self.bugs):
                    self._finish(r, "length", events)
        self.t += 1
        return events + self._misplaced()

    def _head(self) -> Req | None:
        """The first waiting request (in queue order) that may join (grammar-starves:
        the first, its grammar compiled or not)."""
        return next((w for w in self.waiting if "grammar-starves" in self.bugs or self._may_join(w)), None)

    def _ready(self, r: Req) -> bool:
        """Whether its grammar is compiled (grammar-early: whatever its grammar;
        grammar-stuck: only if it was at its arrival)."""
        ready = r.spec.ready_at()
        if "grammar-stuck" in self.bugs and ready is not None and ready > r.spec.arrival:
            ready = None
        return "grammar-early" in self.bugs or (ready is not None and ready <= self.t)

    def _may_join(self, r: Req) -> bool:
        """Whether a waiting request may be admitted: it is `_ready` and its LoRA
        adapter is one of the running requests' or one more fits max_loras
        (lora-over: always), so that no batch of running requests passes it."""
        if not self._ready(r):
            return False
        loras = {x.spec.lora for x in self.running} - {0}
        return "lora-over" in self.bugs or r.spec.lora in loras | {0} or len(loras) < self.cfg.max_loras

    def _misplaced(self) -> list[Event]:
        """The misplaced events of the "misplaced-KIND" bugs switched on: each once,
        the first step a request is in that bug's state (by the toy's own queues)."""
        states = {"running": list(self.running), "finished": [r for r in self.reqs.values() if r.done],
                  "waiting": [r for r in self.waiting if not r.preempted]}
        out = []
        for kind, (state, args) in MISPLACED.items():
            bug = f"misplaced-{kind}"
            if bug in self.bugs and bug not in self.reported and states[state]:
                self.reported.add(bug)
                r = states[state][0]
                out.append(BY_KIND[kind](r.spec.rid, *(r.spec.rid if a == SELF else a for a in args)))
        return out

    def observe(self) -> Observation:
        held = len({b for r in self.reqs.values() for b in r.table})
        errors = [] if self.pool.free + held == self.cfg.num_blocks else [
            f"free {self.pool.free} + held {held} != {self.cfg.num_blocks}"]
        shown = {rid: r.tokens[:-1] if "unreported-stop" in self.bugs and r.done == "stop" else r.tokens
                 for rid, r in self.reqs.items()}   # the bug leaves a stop token out of what it reports
        outputs = {rid: RequestOutput(rid, list(shown[rid]), [1] * len(shown[rid]), r.done)
                   for rid, r in self.reqs.items()}
        key = (tuple((rid, r.computed, tuple(r.table), len(r.tokens), r.done) for rid, r in self.reqs.items()),
               tuple(r.spec.rid for r in self.waiting), tuple(r.spec.rid for r in self.running),
               tuple(self.pool.queue), tuple(self.pool.evictable), tuple(sorted(self.pool.cached.items())),
               tuple((rid, ready - self.t) for rid, r in self.reqs.items()   # grammars still compiling
                     if r.done is None and (ready := r.spec.ready_at()) is not None and ready > self.t))
        return Observation(blocks_held=self.cfg.num_blocks - self.pool.free, kv_errors=errors, outputs=outputs,
                           unfinished=bool(self.pending) or any(r.done is None for r in self.reqs.values()),
                           state_key=key, block_tables={rid: [[b] for b in r.table] for rid, r in self.reqs.items()
                                                        if r.table and self.capabilities.block_tables})


def leaky(cfg: Config) -> ToyScheduler:
    """The toy with its finished requests' blocks never freed."""
    return ToyScheduler(cfg, frozenset({"leak"}))


def toy_with_features(*bugs: str) -> Callable[[Config], ToyScheduler]:
    """The toy claiming the "lora" and "grammar" features, with `bugs` on."""
    return partial(ToyScheduler, bugs=frozenset(bugs), features=("lora", "grammar"))


def toy(*bugs: str) -> Callable[[Config], ToyScheduler]:
    """A factory of the toy with these bugs switched on."""
    return partial(ToyScheduler, bugs=frozenset(bugs))


def leaky_over_slots(cfg: Config) -> ToyScheduler:
    """The toy with two bugs: finished requests' blocks never freed, and more
    requests running than max_num_seqs."""
    return ToyScheduler(cfg, frozenset({"leak", "slot-cap"}))


def spinning(cfg: Config) -> ToyScheduler:
    """The toy waiting, inside a step, for blocks a waiting request needs."""
    return ToyScheduler(cfg, frozenset({"spin"}))


class LongPromptsRefused(ToyScheduler):
    """The toy behind an API that refuses prompts longer than 4 tokens (as a server
    with a maximum length answers such a request with an error)."""

    def add(self, spec: RequestSpec) -> None:
        if len(spec.prompt) > 4:
            raise Refused(f"prompt of {len(spec.prompt)} tokens, the most is 4")
        super().add(spec)


class CoarseKey(ToyScheduler):
    """The toy scheduling by priority without saying so (capabilities.priorities
    False, so no check reads priorities) and with a state key that, like the
    toy's, leaves priorities out: states whose waiting requests differ only in
    priority, and so are admitted in another order later, share a key."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.capabilities = replace(self.capabilities, priorities=False)
