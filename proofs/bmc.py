"""The whole scheduler step as z3 terms, for every config switch: upfront or
incremental allocation, prefix caching on or off. Requests are numbered in
priority-key order (the solver must keep priorities sorted). Everything
numeric may be an unknown: the config's sizes (`SymConfig`), prompt lengths,
max_tokens, priorities, arrivals and each request's block need; stop tokens
and aborts are per-step inputs. The boolean modes (allocation, prefix caching,
execution, WCPB, preemption, policy, snapshots) stay Python values: each
combination is its own encoding.

The pool is counted in blocks: per request its private blocks and the blocks
of the prefix-cache pages it holds, and for the pool the free count (free
queue plus cache-only pages) and the blocks of cache pages some request holds.
What depends on prompt contents or on page arithmetic under an unknown block
size is left open as a *choice* (`Pass.choose`), bounded by facts that every
pool of model/ satisfies (`StepTrace.facts`): how many leading prompt pages
hit, how many of those were cache-only, which shared pages a release leaves
held by others, the guarded preflight's verdict where pages pending
publication decide it, growth, publication, and whether the futility guard
holds an entry for the current free count. A proof over the encoding then
holds for every cache and every prompt-sharing pattern within those facts.
Where the block size and layout are concrete (`SymConfig.of`), the choices
also satisfy their page arithmetic exactly. With upfront allocation and
no prefix caching there is no choice: the step is a function of the state
and the inputs (`deterministic`).

`sym_step_traced` is the z3 rendition of docs/semantics.md; proofs/binding.py
checks it on concrete states against model/ (and `loopcheck prove` refuses to
report proofs when they disagree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from loopcheck.model.config import Config

PENDING, WAITING, RUNNING, PREEMPTED, FINISHED = range(5)
STATUS_CODES = {"pending": PENDING, "waiting": WAITING, "running": RUNNING,
                "preempted": PREEMPTED, "finished": FINISHED}


@dataclass(frozen=True)
class SymConfig:
    """The config as the step sees it: sizes as z3 terms, modes as Python values.
    The block size and KV layout enter through each request's need, and, where
    known (`pages`: block size and blocks per page), through the page
    arithmetic of the choices."""

    num_blocks: z3.ArithRef
    max_num_seqs: z3.ArithRef
    max_num_batched_tokens: z3.ArithRef
    prefill_chunk_size: z3.ArithRef
    num_loops: z3.ArithRef
    max_bypasses: z3.ArithRef
    watermark: z3.ArithRef
    resume_watermark: z3.BoolRef
    execution: str
    wcpb: bool
    priority_preemption: bool
    preemption_policy: str
    snapshots: bool
    allocation: str = "upfront"
    prefix_caching: bool = False
    pages: tuple[int, int] | None = None

    SIZES = ("num_blocks", "max_num_seqs", "max_num_batched_tokens", "prefill_chunk_size", "num_loops",
             "max_bypasses")

    @staticmethod
    def of(cfg: Config, watermark: z3.ArithRef | None = None) -> SymConfig:
        """A concrete config; `watermark` replaces the config's when given."""
        sizes = {name: z3.IntVal(getattr(cfg, name)) for name in SymConfig.SIZES}
        return SymConfig(**sizes, watermark=z3.IntVal(cfg.watermark_blocks) if watermark is None else watermark,
                         resume_watermark=z3.BoolVal(cfg.resume_watermark), **modes_of(cfg),
                         pages=(cfg.block_size, cfg.planes))

    @staticmethod
    def unknown(modes: dict[str, object]) -> tuple[SymConfig, list[z3.BoolRef]]:
        """Every size an unknown within the config's own validation (>= 1; the
        watermark and bypass limit >= 0, the watermark below num_blocks), and
        whether resumptions keep the watermark an unknown too."""
        sizes = {name: z3.Int(name) for name in SymConfig.SIZES}
        sc = SymConfig(**sizes, watermark=z3.Int("watermark_blocks"),  # type: ignore[arg-type]
                       resume_watermark=z3.Bool("resume_watermark"), **modes)
        facts = [x >= (0 if name == "max_bypasses" else 1) for name, x in sizes.items()]
        facts += [sc.watermark >= 0, sc.watermark < sc.num_blocks]
        return sc, facts

    @property
    def upfront(self) -> bool:
        return self.allocation == "upfront"


def modes_of(cfg: Config) -> dict[str, object]:
    return dict(execution=cfg.execution, wcpb=cfg.wcpb, priority_preemption=cfg.priority_preemption,
                preemption_policy=cfg.preemption_policy, snapshots=cfg.snapshots, allocation=cfg.allocation,
                prefix_caching=cfg.prefix_caching)


def deterministic(modes: dict[str, object]) -> str | None:
    """Why the step leaves choices open under these modes, or None (upfront
    allocation, no prefix caching: a function of the state and the inputs)."""
    if modes["allocation"] != "upfront":
        return "allocation is incremental"
    if modes["prefix_caching"]:
        return "prefix caching is on"
    return None


@dataclass(frozen=True)
class SymWorkload:
    """Per request: prompt length, max_tokens, priority, arrival, and the blocks
    it holds for its whole life (need; derived from the others by `needs_of`,
    or an unknown >= 1 where the proof covers every block size and layout)."""

    prompt: tuple[z3.ArithRef, ...]
    max_tokens: tuple[z3.ArithRef, ...]
    priority: tuple[z3.ArithRef, ...]
    arrival: tuple[z3.ArithRef, ...]
    need: tuple[z3.ArithRef, ...]

    @property
    def K(self) -> int:
        return len(self.prompt)

    def facts(self) -> list[z3.BoolRef]:
        """What every workload satisfies: prompts and needs >= 1, max_tokens and
        arrivals >= 0, index order is priority order."""
        out = [x >= 1 for x in (*self.prompt, *self.need)] + [m >= 0 for m in self.max_tokens]
        out += [a >= 0 for a in self.arrival]
        out += [self.priority[i] <= self.priority[i + 1] for i in range(self.K - 1)]
        return out


def needs_of(prompt: tuple[z3.ArithRef, ...], max_tokens: tuple[z3.ArithRef, ...],
             cfg: Config) -> tuple[z3.ArithRef, ...]:
    """Blocks for a request's whole life: pages for prompt + max_tokens - 1
    positions (the prompt's at max_tokens 0), times the planes of the layout."""
    bs = cfg.block_size
    return tuple(cfg.planes * ((p + z3.If(m >= 1, m, 1) - 1 + bs - 1) / bs)
                 for p, m in zip(prompt, max_tokens, strict=True))


@dataclass(frozen=True)
class SymState:
    """Per request its scheduling fields and its pool: `private` blocks, blocks
    of the prefix-cache pages it holds (`shared`), and how many entries the
    futility guard keeps for it (`guarded`); for the pool the free count (free
    queue and cache-only pages) and the blocks of cache pages some running
    request holds (`cached`)."""

    status: tuple[z3.ArithRef, ...]
    frontier: tuple[z3.ArithRef, ...]
    chunk_end: tuple[z3.ArithRef, ...]
    chunk_depth: tuple[z3.ArithRef, ...]
    generated: tuple[z3.ArithRef, ...]
    bypasses: tuple[z3.ArithRef, ...]
    private: tuple[z3.ArithRef, ...]
    shared: tuple[z3.ArithRef, ...]
    guarded: tuple[z3.ArithRef, ...]
    free: z3.ArithRef
    cached: z3.ArithRef

    FIELDS = ("status", "frontier", "chunk_end", "chunk_depth", "generated", "bypasses", "private", "shared",
              "guarded")

    @property
    def K(self) -> int:
        return len(self.status)

    def fields(self) -> list[z3.ArithRef]:
        return [term for _, term in self.named()]

    def named(self) -> list[tuple[str, z3.ArithRef]]:
        """(field[i], term) for every field, for naming a disagreement."""
        out = [(f"{name}[{i}]", getattr(self, name)[i]) for name in self.FIELDS for i in range(self.K)]
        return out + [("free", self.free), ("cached", self.cached)]

    @staticmethod
    def unknown(prefix: str, K: int) -> SymState:
        def ints(name: str) -> tuple[z3.ArithRef, ...]:
            return tuple(z3.Int(f"{prefix}{name}{i}") for i in range(K))
        return SymState(*(ints(name) for name in SymState.FIELDS), z3.Int(f"{prefix}free"),
                        z3.Int(f"{prefix}cached"))


@dataclass(frozen=True)
class StepInputs:
    """What the world decides in one step: which requests are aborted, and which
    would emit their stop token if they produce a token."""

    aborts: tuple[z3.BoolRef, ...]
    stops: tuple[z3.BoolRef, ...]

    @staticmethod
    def none(K: int) -> StepInputs:
        return StepInputs((z3.BoolVal(False),) * K, (z3.BoolVal(False),) * K)

    @staticmethod
    def unknown(prefix: str, K: int) -> StepInputs:
        return StepInputs(tuple(z3.Bool(f"{prefix}abort{i}") for i in range(K)),
                          tuple(z3.Bool(f"{prefix}stop{i}") for i in range(K)))


def initial(K: int, c: SymConfig) -> SymState:
    zeros = tuple(z3.IntVal(0) for _ in range(K))
    return SymState(tuple(z3.IntVal(PENDING) for _ in range(K)), *(zeros,) * 8, c.num_blocks, z3.IntVal(0))


def _min(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a < b, a, b)


def _max(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a > b, a, b)


@dataclass(frozen=True)
class StepTrace:
    """What one symbolic step did besides the next state: per request whether it
    was admitted (fresh or resumed) and whether it wanted a preemption (eligible
    but not fitting); each possible priority preemption (happens, waiting
    request i, victim j); and the facts its choices satisfy."""

    admitted: tuple[z3.BoolRef, ...]
    wanted: tuple[z3.BoolRef, ...]
    preemptions: tuple[tuple[z3.BoolRef, int, int], ...]
    facts: tuple[z3.BoolRef, ...]


def sym_step(s: SymState, t: z3.ArithRef | int, w: SymWorkload, c: SymConfig,
             inputs: StepInputs | None = None) -> SymState:
    """One step (arrivals, aborts, schedule, execute) as z3 terms, for the
    modes where it is deterministic (no choices; see `deterministic`)."""
    s1, trace = sym_step_traced(s, t, w, c, inputs)
    if trace.facts:
        raise ValueError("sym_step: the step leaves choices open under these modes; use sym_step_traced")
    return s1


def sym_step_traced(s: SymState, t: z3.ArithRef | int, w: SymWorkload, c: SymConfig,
                    inputs: StepInputs | None = None, prefix: str = "") -> tuple[SymState, StepTrace]:
    """`sym_step`, also returning what the step did (`StepTrace`), its choices
    named with `prefix`. The step is the composition of `Pass`'s phases, in
    this order."""
    ins = inputs or StepInputs.none(w.K)
    p = Pass.start(s, w, c, prefix)
    for i in range(w.K):
        p.arrive(i, t)
    for i in range(w.K):
        p.abort(i, ins.aborts[i])
    p.open_schedule()
    for i in range(w.K):
        p.schedule(i)
    for i in range(w.K):
        p.execute(i, ins.stops[i])
    return p.state(), p.trace()


class Pass:
    """One step in progress: the state's fields as z3 terms plus the schedule's
    working values (token budget, stage, batch, skipped requests) and the
    choices made so far with their facts. Each method is one phase for one
    request; proofs/drain.py proves the pool accounting phase by phase on
    records of unknowns (`Pass.unknown`)."""

    def __init__(self, w: SymWorkload, c: SymConfig, fields: dict[str, list[z3.ArithRef]],
                 free: z3.ArithRef, cached: z3.ArithRef, in_batch: list[z3.BoolRef], prefix: str) -> None:
        self.w, self.c, self.prefix = w, c, prefix
        self.st, self.f, self.ce = fields["status"], fields["frontier"], fields["chunk_end"]
        self.cd, self.g, self.byp = fields["chunk_depth"], fields["generated"], fields["bypasses"]
        self.pv, self.sh, self.gd = fields["private"], fields["shared"], fields["guarded"]
        self.free, self.cached = free, cached
        self.in_batch = in_batch
        self.wm: z3.ArithRef = z3.IntVal(0)
        self.budget: z3.ArithRef = c.max_num_batched_tokens
        self.stage: z3.ArithRef = z3.IntVal(0)                   # 0 unset, 1 prefill, 2 decode
        self.skipped: list[z3.BoolRef] = [z3.BoolVal(False)] * w.K
        self.admitted: list[z3.BoolRef] = [z3.BoolVal(False)] * w.K
        self.wanted: list[z3.BoolRef] = [z3.BoolVal(False)] * w.K
        self.preemptions: list[tuple[z3.BoolRef, int, int]] = []
        self.facts: list[z3.BoolRef] = []
        self.choices = 0

    @staticmethod
    def start(s: SymState, w: SymWorkload, c: SymConfig, prefix: str = "") -> Pass:
        return Pass(w, c, {name: list(getattr(s, name)) for name in SymState.FIELDS}, s.free, s.cached,
                    [z3.BoolVal(False)] * w.K, prefix)

    @staticmethod
    def unknown(prefix: str, w: SymWorkload, c: SymConfig) -> Pass:
        """A record of unknowns: every field, the batch and the working values."""
        s = SymState.unknown(prefix, w.K)
        p = Pass.start(s, w, c, prefix)
        p.in_batch = [z3.Bool(f"{prefix}in_batch{i}") for i in range(w.K)]
        p.skipped = [z3.Bool(f"{prefix}skipped{i}") for i in range(w.K)]
        p.wm, p.budget, p.stage = z3.Int(f"{prefix}wm"), z3.Int(f"{prefix}budget"), z3.Int(f"{prefix}stage")
        return p

    def state(self) -> SymState:
        return SymState(tuple(self.st), tuple(self.f), tuple(self.ce), tuple(self.cd), tuple(self.g),
                        tuple(self.byp), tuple(self.pv), tuple(self.sh), tuple(self.gd), self.free, self.cached)

    def trace(self) -> StepTrace:
        return StepTrace(tuple(self.admitted), tuple(self.wanted), tuple(self.preemptions), tuple(self.facts))

    # ----- choices ------------------------------------------------------------------
    def choose(self, name: str, sort: Callable[[str], z3.ExprRef] = z3.Int) -> Any:
        """A fresh unknown (an integer, or of `sort`) for a value the encoding
        leaves open (its facts are added with `fact`)."""
        self.choices += 1
        return sort(f"{self.prefix}{name}#{self.choices}")

    def fact(self, *facts: z3.BoolRef) -> None:
        self.facts.extend(facts)

    def page_ceil(self, positions: z3.ArithRef) -> z3.ArithRef:
        """Blocks of the pages that hold `positions` tokens (concrete geometry only)."""
        assert self.c.pages is not None
        bs, planes = self.c.pages
        return planes * ((positions + bs - 1) / bs)

    # ----- pool ---------------------------------------------------------------------
    def release(self, j: int, when: z3.BoolRef) -> None:
        """If `when`, running request j drops every page: its private blocks join
        the free count, and so do the cache pages only it held (they become
        cache-only). Which of its shared pages others still hold is a choice:
        the held cache blocks after it are at most those before, at least those
        before less j's, and, as in every pool, at least any other request's
        shared blocks and at most their sum (only running requests hold any)."""
        kept = self.cached
        if self.c.prefix_caching:
            kept = self.choose("kept")
            others = [k for k in range(self.w.K) if k != j]
            self.fact(z3.Implies(when, z3.And(
                kept <= self.cached, kept >= self.cached - self.sh[j],
                kept <= z3.Sum([self.sh[k] for k in others] + [z3.IntVal(0)]),
                *[kept >= self.sh[k] for k in others])))
            kept = z3.If(when, kept, self.cached)
        self.free = self.free + z3.If(when, self.pv[j] + self.cached - kept, 0)
        self.cached = kept
        self.pv[j] = z3.If(when, 0, self.pv[j])
        self.sh[j] = z3.If(when, 0, self.sh[j])

    def preempt(self, j: int, when: z3.BoolRef) -> None:
        """If `when`, running request j is preempted: pages released, an in-flight
        chunk rewound, and without snapshots its progress dropped."""
        c, f, g, ce, cd = self.c, self.f, self.g, self.ce, self.cd
        self.release(j, when)
        ce[j] = z3.If(when, f[j] if c.snapshots else 0, ce[j])
        cd[j] = z3.If(when, 0, cd[j])
        if not c.snapshots:
            f[j] = z3.If(when, 0, f[j])
            g[j] = z3.If(when, 0, g[j])
        self.st[j] = z3.If(when, PREEMPTED, self.st[j])

    # ----- phases -------------------------------------------------------------------
    def arrive(self, i: int, t: z3.ArithRef | int) -> None:
        """A pending request arrives at its step; one that can never fit is rejected."""
        arrive = z3.And(self.st[i] == PENDING, self.w.arrival[i] <= t)
        self.st[i] = z3.If(arrive, z3.If(self.w.need[i] > self.c.num_blocks, FINISHED, WAITING), self.st[i])

    def abort(self, i: int, aborted: z3.BoolRef) -> None:
        """An aborted request releases its pages and drops an unfinished chunk."""
        st = self.st[i]
        abort = z3.And(aborted, st != PENDING, st != FINISHED)
        self.release(i, z3.And(abort, st == RUNNING))
        self.ce[i] = z3.If(abort, self.f[i], self.ce[i])
        self.cd[i] = z3.If(abort, 0, self.cd[i])
        self.st[i] = z3.If(abort, FINISHED, st)

    def open_schedule(self) -> None:
        """The watermark applies while something runs after aborts."""
        self.wm = z3.If(z3.Or([x == RUNNING for x in self.st]), self.c.watermark, 0)

    def stage_ok(self, kind: z3.ArithRef) -> z3.BoolRef:
        return z3.BoolVal(True) if self.c.execution == "mixed" else z3.Or(self.stage == 0, self.stage == kind)

    def running_now(self) -> z3.ArithRef:
        return z3.Sum([z3.If(x == RUNNING, 1, 0) for x in self.st])

    def schedule(self, i: int) -> None:
        """Request i's turn in priority order: a running one continues, after
        growing (preempting less urgent running requests, or itself); a waiting
        or preempted one is admitted if it fits, maybe after preempting a less
        urgent running request not yet in the batch."""
        w, f, ce = self.w, self.f, self.ce
        P, f0, ce0, st0, budget = w.prompt[i], f[i], ce[i], self.st[i], self.budget
        inflight = ce0 > f0
        r_prefill = z3.Or(inflight, f0 < P)
        r_cost = z3.If(inflight, ce0 - f0, z3.If(f0 < P, self.chunk(i, f0), 1))
        r_kind = z3.If(r_prefill, 1, 2)
        r_ok = z3.And(st0 == RUNNING, r_cost >= 1, r_cost <= budget, self.stage_ok(r_kind))
        r_end = z3.If(r_prefill, f0 + r_cost, P + self.g[i])
        runs = self.grow(i, r_ok, r_end)
        admit, fresh, a_kind, a_cost, a_frontier = self.admit_waiting(i, z3.Or(st0 == WAITING, st0 == PREEMPTED))
        ce[i] = z3.If(z3.And(admit, a_kind == 1), a_frontier + a_cost,
                      z3.If(z3.And(runs, r_kind == 1), f0 + r_cost, z3.If(admit, a_frontier, ce[i])))
        f[i] = z3.If(admit, a_frontier, f[i])
        self.in_batch[i] = z3.Or(runs, admit)
        kind = z3.If(runs, r_kind, a_kind)
        self.budget = budget - z3.If(runs, r_cost, z3.If(admit, a_cost, 0))
        self.stage = z3.If(z3.And(self.stage == 0, self.in_batch[i]), kind, self.stage)

    def grow(self, i: int, r_ok: z3.BoolRef, end: z3.ArithRef) -> z3.BoolRef:
        """Incremental allocation: running request i, whose work item fits the
        budget and stage (`r_ok`), grows to hold `end` positions, preempting the
        least urgent running requests after it until the free count covers the
        growth, or itself when none is left. Whether it runs."""
        if self.c.upfront:
            return r_ok
        held = self.pv[i] + self.sh[i]
        growth = self.choose("growth")
        self.fact(z3.Implies(r_ok, z3.And(growth >= 0, held + growth <= self.w.need[i])))
        if self.c.pages is not None:
            self.fact(z3.Implies(r_ok, growth == _max(0, self.page_ceil(end) - held)))
        for j in reversed(range(i + 1, self.w.K)):
            short = z3.And(r_ok, self.free < growth, self.st[j] == RUNNING)
            self.preempt(j, short)
        itself = z3.And(r_ok, self.free < growth)
        self.preempt(i, itself)
        runs = z3.And(r_ok, z3.Not(itself))
        self.free = self.free - z3.If(runs, growth, 0)
        self.pv[i] = self.pv[i] + z3.If(runs, growth, 0)
        return runs

    def chunk(self, i: int, frontier: z3.ArithRef) -> z3.ArithRef:
        """Tokens of request i's next prefill chunk from `frontier` (within the
        chunk size, the prompt and the budget left)."""
        return _min(_min(self.c.prefill_chunk_size, self.w.prompt[i] - frontier), self.budget)

    def hits(self, i: int, waiting: z3.BoolRef) -> tuple[z3.ArithRef, z3.ArithRef]:
        """Request i's prefix hits, if `waiting`: the positions they cover and the
        blocks of the hit pages (none without prefix caching)."""
        w, c = self.w, self.c
        if not c.prefix_caching:
            return z3.IntVal(0), z3.IntVal(0)
        hit_end, hit = self.choose("hit_end"), self.choose("hit")
        self.fact(z3.Implies(waiting, z3.And(hit_end >= 0, hit_end <= w.prompt[i] - 1, hit >= 0, hit <= w.need[i])))
        if c.pages is not None:
            bs, planes = c.pages
            self.fact(z3.Implies(waiting, hit * bs == hit_end * planes))
        return hit_end, hit

    def take(self, i: int, waiting: z3.BoolRef, hit: z3.ArithRef, end: z3.ArithRef) -> z3.ArithRef:
        """The private blocks request i takes on admission, if `waiting`: with
        upfront allocation its need less the hits; incremental, the rest of the
        pages that hold `end` positions (its first work item's end)."""
        need = self.w.need[i]
        if self.c.upfront:
            return need - hit
        take = self.choose("take")
        self.fact(z3.Implies(waiting, z3.And(take >= 0, hit + take <= need)))
        if self.c.pages is not None:
            self.fact(z3.Implies(waiting, hit + take == self.page_ceil(end)))
        return take

    def revived(self, waiting: z3.BoolRef, hit: z3.ArithRef, before: z3.ArithRef | None = None,
                released: z3.ArithRef | None = None) -> z3.ArithRef:
        """Blocks of the hit pages that are cache-only now (admission takes them
        back from the free count): at most the hits, at most the free count, and
        the hit pages still held are among the held cache pages. After a
        preemption (`before`: the value before it) at most the cache blocks the
        victim's release made cache-only (`released`) more."""
        if not self.c.prefix_caching:
            return z3.IntVal(0)
        revived = self.choose("revived")
        self.fact(z3.Implies(waiting, z3.And(revived >= 0, revived <= hit, revived <= self.free,
                                             hit - revived <= self.cached)))
        if before is not None and released is not None:
            self.fact(z3.Implies(waiting, z3.And(revived >= before, revived <= before + released)))
        return revived

    def preflight(self, i: int, j: int, take: z3.ArithRef, revived: z3.ArithRef) -> z3.BoolRef:
        """The guarded check that waiting request i would fit once j is preempted.
        Without prefix caching it is exact (j's private blocks return); with it,
        pages pending publication count as hits, a choice."""
        if self.c.prefix_caching:
            return self.choose(f"preflight{i}_{j}", z3.Bool)
        return z3.And(self.running_now() - 1 < self.c.max_num_seqs,
                      self.free + self.pv[j] - self.wm_for(i) - revived >= take)

    def wm_for(self, i: int) -> z3.ArithRef:
        """The watermark binding request i's admission: always for a fresh one,
        for a resumption only with resume_watermark."""
        return z3.If(z3.Or(self.st[i] == WAITING, self.c.resume_watermark), self.wm, 0)

    def in_guard(self, i: int) -> z3.BoolRef:
        """Whether the futility guard holds (i, the free count): a choice, false
        while it holds nothing for i and true once it holds every free count."""
        if not self.c.prefix_caching:
            return z3.BoolVal(False)
        held = self.choose(f"in_guard{i}", z3.Bool)
        self.fact(z3.Implies(self.gd[i] == 0, z3.Not(held)), z3.Implies(self.gd[i] > self.c.num_blocks, held))
        return held

    def admit_waiting(self, i: int, waiting: z3.BoolRef) -> tuple[z3.BoolRef, z3.BoolRef, z3.ArithRef,
                                                                   z3.ArithRef, z3.ArithRef]:
        """Waiting or preempted request i's turn: admit it if it fits, maybe after
        one priority preemption. Returns (admitted, fresh, kind and cost of its
        first work item, its frontier after the hits)."""
        w, c, st, byp = self.w, self.c, self.st, self.byp
        P, budget, K = w.prompt[i], self.budget, w.K
        running_now = self.running_now()
        fresh = st[i] == WAITING
        hit_end, hit = self.hits(i, waiting)
        a_frontier = _max(self.f[i], hit_end)
        a_kind = z3.If(a_frontier < P, 1, 2)
        a_cost = z3.If(a_frontier < P, self.chunk(i, a_frontier), 1)
        take = self.take(i, waiting, hit, z3.If(a_frontier < P, a_frontier + a_cost, P + self.g[i]))
        blocked = z3.And(fresh, z3.Or([z3.And(self.skipped[j], byp[j] >= c.max_bypasses)
                                       for j in range(i)] + [z3.BoolVal(False)]))
        eligible = z3.And(waiting, a_cost >= 1, a_cost <= budget, self.stage_ok(a_kind), z3.Not(blocked))
        wm = self.wm_for(i)
        revived = self.revived(waiting, hit)
        fits_now = z3.And(running_now < c.max_num_seqs, self.free - revived - wm >= take)
        self.wanted[i] = z3.And(eligible, z3.Not(fits_now))
        guarded = c.preemption_policy == "guarded"
        victim: z3.ArithRef = z3.IntVal(-1)
        for j in range(i + 1, K):   # least urgent (largest index) last, so it wins
            cand = z3.And(st[j] == RUNNING, w.priority[j] > w.priority[i])
            if guarded:
                cand = z3.And(cand, self.preflight(i, j, take, revived))
            victim = z3.If(cand, j, victim)
        preempts = z3.And(eligible, z3.Not(fits_now), victim >= 0) if c.priority_preemption \
            else z3.BoolVal(False)
        if guarded and c.priority_preemption:
            preempts = z3.And(preempts, z3.Not(self.in_guard(i)))
        cached_before = self.cached
        for j in range(i + 1, K):
            hit_j = z3.And(preempts, victim == j)
            self.preemptions.append((hit_j, i, j))
            self.preempt(j, hit_j)
        if c.prefix_caching:
            revived = z3.If(preempts, self.revived(waiting, hit, revived, cached_before - self.cached), revived)
        fits_after = z3.And(running_now - z3.If(preempts, 1, 0) < c.max_num_seqs, self.free - revived - wm >= take)
        admit = z3.And(eligible, fits_after)
        self.admitted[i] = z3.Or(self.admitted[i], admit)
        futile = z3.And(preempts, z3.Not(admit)) if guarded else z3.BoolVal(False)
        for j in range(i):
            byp[j] = z3.If(z3.And(admit, fresh, self.skipped[j]), byp[j] + 1, byp[j])
        self.skipped[i] = z3.And(waiting, z3.Not(admit))
        st[i] = z3.If(admit, RUNNING, st[i])
        self.free = self.free - z3.If(admit, revived + take, 0)
        self.cached = self.cached + z3.If(admit, revived, 0)
        self.pv[i] = z3.If(admit, take, self.pv[i])
        self.sh[i] = z3.If(admit, hit, self.sh[i])
        self.gd[i] = z3.If(admit, 0, self.gd[i] + z3.If(futile, 1, 0))
        byp[i] = z3.If(admit, 0, byp[i])
        self.cd[i] = z3.If(admit, 0, self.cd[i])
        return admit, fresh, a_kind, a_cost, a_frontier

    def execute(self, i: int, stop: z3.BoolRef) -> None:
        """Request i's batch item runs: one depth (WCPB) or every depth of a
        chunk, or one token; full prompt pages below the frontier are
        published; a token at max_tokens or a stop token finishes it, and a
        prompt-only request (max_tokens 0) finishes with its prompt."""
        w, c, f, ce, cd, g = self.w, self.c, self.f, self.ce, self.cd, self.g
        P, L, m = w.prompt[i], c.num_loops, w.max_tokens[i]
        prefill = z3.And(self.in_batch[i], ce[i] > f[i])
        depth = cd[i] + 1 if c.wcpb else L
        done = z3.And(prefill, depth == L)
        prompt_done = z3.And(done, ce[i] == P, g[i] == 0)
        token = z3.Or(z3.And(self.in_batch[i], z3.Not(prefill)), z3.And(prompt_done, m >= 1))
        cd[i] = z3.If(prefill, z3.If(depth == L, 0, depth), cd[i])
        f[i] = z3.If(done, ce[i], f[i])
        g[i] = z3.If(token, g[i] + 1, g[i])
        self.publish(i)
        finish = z3.Or(z3.And(token, z3.Or(stop, g[i] >= m)), z3.And(prompt_done, m == 0))
        self.release(i, finish)
        self.st[i] = z3.If(finish, FINISHED, self.st[i])

    def publish(self, i: int) -> None:
        """Request i, in the batch, publishes some private pages (those full
        prompt pages below its frontier no other request published first): a
        choice; where the geometry is known, its shared pages stay within its
        computed prompt."""
        if not self.c.prefix_caching:
            return
        published = self.choose("published")
        self.fact(published >= 0, published <= self.pv[i])
        published = z3.If(self.in_batch[i], published, 0)
        self.pv[i] = self.pv[i] - published
        self.sh[i] = self.sh[i] + published
        self.cached = self.cached + published
        if self.c.pages is not None:
            bs, planes = self.c.pages
            self.fact(z3.Implies(self.in_batch[i], self.sh[i] * bs <= planes * _min(self.f[i], self.w.prompt[i])))
