"""The whole scheduler step as z3 terms, for a class of workloads: upfront
allocation, no prefix caching. Requests are numbered in priority-key order (the
solver must keep priorities sorted). Everything numeric may be an unknown: the
config's sizes (`SymConfig`), prompt lengths, max_tokens, priorities, arrivals
and each request's block need; stop tokens and aborts are per-step inputs.
The boolean modes (execution, WCPB, preemption, policy, snapshots) stay Python
values: each combination is its own encoding.

`sym_step` is the z3 rendition of docs/semantics.md for that class;
proofs/binding.py evaluates it on concrete states against model/ (and
`loopcheck prove` refuses to report proofs when they disagree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import z3

from loopcheck.model.config import Config

PENDING, WAITING, RUNNING, PREEMPTED, FINISHED = range(5)
STATUS_CODES = {"pending": PENDING, "waiting": WAITING, "running": RUNNING,
                "preempted": PREEMPTED, "finished": FINISHED}


@dataclass(frozen=True)
class SymConfig:
    """The config as the step sees it: sizes as z3 terms, modes as Python values.
    KV layout and block size enter only through each request's need."""

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

    SIZES = ("num_blocks", "max_num_seqs", "max_num_batched_tokens", "prefill_chunk_size", "num_loops",
             "max_bypasses")

    @staticmethod
    def of(cfg: Config, watermark: z3.ArithRef | None = None) -> SymConfig:
        """A concrete config; `watermark` replaces the config's when given."""
        sizes = {name: z3.IntVal(getattr(cfg, name)) for name in SymConfig.SIZES}
        return SymConfig(**sizes, watermark=z3.IntVal(cfg.watermark_blocks) if watermark is None else watermark,
                         resume_watermark=z3.BoolVal(cfg.resume_watermark), **modes_of(cfg))

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


def modes_of(cfg: Config) -> dict[str, object]:
    return dict(execution=cfg.execution, wcpb=cfg.wcpb, priority_preemption=cfg.priority_preemption,
                preemption_policy=cfg.preemption_policy, snapshots=cfg.snapshots)


@dataclass(frozen=True)
class SymWorkload:
    """Per request: prompt length, max_tokens, priority, arrival, and the blocks
    it holds while running (need; derived from the others by `needs_of`, or an
    unknown >= 1 where the proof covers every block size and layout)."""

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
    status: tuple[z3.ArithRef, ...]
    frontier: tuple[z3.ArithRef, ...]
    chunk_end: tuple[z3.ArithRef, ...]
    chunk_depth: tuple[z3.ArithRef, ...]
    generated: tuple[z3.ArithRef, ...]
    bypasses: tuple[z3.ArithRef, ...]
    free: z3.ArithRef

    FIELDS = ("status", "frontier", "chunk_end", "chunk_depth", "generated", "bypasses")

    @property
    def K(self) -> int:
        return len(self.status)

    def fields(self) -> list[z3.ArithRef]:
        return [*self.status, *self.frontier, *self.chunk_end, *self.chunk_depth,
                *self.generated, *self.bypasses, self.free]

    def named(self) -> list[tuple[str, z3.ArithRef]]:
        """(field[i], term) for every field, for naming a disagreement."""
        out = [(f"{name}[{i}]", getattr(self, name)[i]) for name in self.FIELDS for i in range(self.K)]
        return out + [("free", self.free)]

    @staticmethod
    def unknown(prefix: str, K: int) -> SymState:
        def ints(name: str) -> tuple[z3.ArithRef, ...]:
            return tuple(z3.Int(f"{prefix}{name}{i}") for i in range(K))
        return SymState(*(ints(name) for name in SymState.FIELDS), z3.Int(f"{prefix}free"))


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
    return SymState(tuple(z3.IntVal(PENDING) for _ in range(K)), zeros, zeros, zeros, zeros, zeros, c.num_blocks)


def supported(cfg: Config) -> str | None:
    """Why a config is outside the class, or None."""
    if cfg.allocation != "upfront":
        return "allocation must be upfront"
    if cfg.prefix_caching:
        return "prefix caching must be off"
    return None


def held_blocks(status: Sequence[z3.ArithRef], need: Sequence[z3.ArithRef]) -> z3.ArithRef:
    """Blocks held by running requests."""
    return z3.Sum([z3.If(x == RUNNING, n, 0) for x, n in zip(status, need, strict=True)])


def _min(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a < b, a, b)


@dataclass(frozen=True)
class StepTrace:
    """What one symbolic step did besides the next state: per request whether it
    was admitted (fresh or resumed) and whether it wanted a preemption (eligible
    but not fitting), and each possible preemption (happens, waiting request i,
    victim j)."""

    admitted: tuple[z3.BoolRef, ...]
    wanted: tuple[z3.BoolRef, ...]
    preemptions: tuple[tuple[z3.BoolRef, int, int], ...]

    def preempted(self, j: int) -> z3.BoolRef:
        return z3.Or([h for h, _, v in self.preemptions if v == j] + [z3.BoolVal(False)])


def sym_step(s: SymState, t: z3.ArithRef | int, w: SymWorkload, c: SymConfig,
             inputs: StepInputs | None = None) -> SymState:
    """One step (arrivals, aborts, schedule, execute) as z3 terms."""
    return sym_step_traced(s, t, w, c, inputs)[0]


def sym_step_traced(s: SymState, t: z3.ArithRef | int, w: SymWorkload, c: SymConfig,
                    inputs: StepInputs | None = None) -> tuple[SymState, StepTrace]:
    """`sym_step`, also returning what the step did (`StepTrace`). The step is
    the composition of `Pass`'s phases, in this order."""
    ins = inputs or StepInputs.none(w.K)
    p = Pass.start(s, w, c)
    for i in range(w.K):
        p.arrive(i, t)
    for i in range(w.K):
        p.abort(i, ins.aborts[i])
    p.open_schedule()
    for i in range(w.K):
        p.schedule(i)
    for i in range(w.K):
        p.execute(i, ins.stops[i])
    return p.state(), StepTrace(tuple(p.admitted), tuple(p.wanted), tuple(p.preemptions))


class Pass:
    """One step in progress: the state's fields as z3 terms plus the schedule's
    working values (token budget, stage, batch, skipped requests). Each method is
    one phase for one request; proofs/drain.py proves the block accounting phase
    by phase on records of unknowns (`Pass.unknown`)."""

    def __init__(self, w: SymWorkload, c: SymConfig, fields: dict[str, list[z3.ArithRef]],
                 free: z3.ArithRef, in_batch: list[z3.BoolRef]) -> None:
        self.w, self.c = w, c
        self.st, self.f, self.ce = fields["status"], fields["frontier"], fields["chunk_end"]
        self.cd, self.g, self.byp = fields["chunk_depth"], fields["generated"], fields["bypasses"]
        self.free = free
        self.in_batch = in_batch
        self.wm: z3.ArithRef = z3.IntVal(0)
        self.budget: z3.ArithRef = c.max_num_batched_tokens
        self.stage: z3.ArithRef = z3.IntVal(0)                   # 0 unset, 1 prefill, 2 decode
        self.skipped: list[z3.BoolRef] = [z3.BoolVal(False)] * w.K
        self.admitted: list[z3.BoolRef] = [z3.BoolVal(False)] * w.K
        self.wanted: list[z3.BoolRef] = [z3.BoolVal(False)] * w.K
        self.preemptions: list[tuple[z3.BoolRef, int, int]] = []

    @staticmethod
    def start(s: SymState, w: SymWorkload, c: SymConfig) -> Pass:
        return Pass(w, c, {name: list(getattr(s, name)) for name in SymState.FIELDS}, s.free,
                    [z3.BoolVal(False)] * w.K)

    @staticmethod
    def unknown(prefix: str, w: SymWorkload, c: SymConfig) -> Pass:
        """A record of unknowns: every field, the batch and the working values."""
        s = SymState.unknown(prefix, w.K)
        p = Pass.start(s, w, c)
        p.in_batch = [z3.Bool(f"{prefix}in_batch{i}") for i in range(w.K)]
        p.skipped = [z3.Bool(f"{prefix}skipped{i}") for i in range(w.K)]
        p.wm, p.budget, p.stage = z3.Int(f"{prefix}wm"), z3.Int(f"{prefix}budget"), z3.Int(f"{prefix}stage")
        return p

    def state(self) -> SymState:
        return SymState(tuple(self.st), tuple(self.f), tuple(self.ce), tuple(self.cd), tuple(self.g),
                        tuple(self.byp), self.free)

    def held(self) -> z3.ArithRef:
        return held_blocks(self.st, self.w.need)

    def arrive(self, i: int, t: z3.ArithRef | int) -> None:
        """A pending request arrives at its step; one that can never fit is rejected."""
        arrive = z3.And(self.st[i] == PENDING, self.w.arrival[i] <= t)
        self.st[i] = z3.If(arrive, z3.If(self.w.need[i] > self.c.num_blocks, FINISHED, WAITING), self.st[i])

    def abort(self, i: int, aborted: z3.BoolRef) -> None:
        """An aborted request releases its blocks and drops an unfinished chunk."""
        st = self.st[i]
        abort = z3.And(aborted, st != PENDING, st != FINISHED)
        self.free = self.free + z3.If(z3.And(abort, st == RUNNING), self.w.need[i], 0)
        self.ce[i] = z3.If(abort, self.f[i], self.ce[i])
        self.cd[i] = z3.If(abort, 0, self.cd[i])
        self.st[i] = z3.If(abort, FINISHED, st)

    def open_schedule(self) -> None:
        """The watermark applies while something runs after aborts."""
        self.wm = z3.If(z3.Or([x == RUNNING for x in self.st]), self.c.watermark, 0)

    def stage_ok(self, kind: z3.ArithRef) -> z3.BoolRef:
        return z3.BoolVal(True) if self.c.execution == "mixed" else z3.Or(self.stage == 0, self.stage == kind)

    def schedule(self, i: int) -> None:
        """Request i's turn in priority order: a running one continues; a waiting
        or preempted one is admitted if it fits, maybe after preempting a less
        urgent running request not yet in the batch."""
        w, c, st, f, ce, cd, g, byp = self.w, self.c, self.st, self.f, self.ce, self.cd, self.g, self.byp
        P, needs, budget = w.prompt[i], w.need, self.budget
        running_now = z3.Sum([z3.If(x == RUNNING, 1, 0) for x in st])
        inflight = ce[i] > f[i]
        r_prefill = z3.Or(inflight, f[i] < P)
        r_cost = z3.If(inflight, ce[i] - f[i],
                       z3.If(f[i] < P, _min(_min(c.prefill_chunk_size, P - f[i]), budget), 1))
        r_kind = z3.If(r_prefill, 1, 2)
        r_ok = z3.And(st[i] == RUNNING, r_cost >= 1, r_cost <= budget, self.stage_ok(r_kind))
        waiting = z3.Or(st[i] == WAITING, st[i] == PREEMPTED)
        fresh = st[i] == WAITING
        a_kind = z3.If(f[i] < P, 1, 2)
        a_cost = z3.If(f[i] < P, _min(_min(c.prefill_chunk_size, P - f[i]), budget), 1)
        blocked = z3.And(fresh, z3.Or([z3.And(self.skipped[j], byp[j] >= c.max_bypasses)
                                       for j in range(i)] + [z3.BoolVal(False)]))
        eligible = z3.And(waiting, a_cost >= 1, a_cost <= budget, self.stage_ok(a_kind), z3.Not(blocked))
        wm = z3.If(z3.Or(fresh, c.resume_watermark), self.wm, 0)   # a resumption may be let into the watermark
        fits_now = z3.And(running_now < c.max_num_seqs, self.free - wm >= needs[i])
        self.wanted[i] = z3.And(eligible, z3.Not(fits_now))
        victim: z3.ArithRef = z3.IntVal(-1)
        for j in range(i + 1, w.K):   # least urgent (largest index) last, so it wins
            cand = z3.And(st[j] == RUNNING, w.priority[j] > w.priority[i])
            if c.preemption_policy == "guarded":
                cand = z3.And(cand, running_now - 1 < c.max_num_seqs, self.free + needs[j] - wm >= needs[i])
            victim = z3.If(cand, j, victim)
        preempts = z3.And(eligible, z3.Not(fits_now), victim >= 0) if c.priority_preemption \
            else z3.BoolVal(False)
        for j in range(i + 1, w.K):
            hit = z3.And(preempts, victim == j)
            self.preemptions.append((hit, i, j))
            self.free = self.free + z3.If(hit, needs[j], 0)
            ce[j] = z3.If(hit, f[j] if c.snapshots else 0, ce[j])
            cd[j] = z3.If(hit, 0, cd[j])
            if not c.snapshots:
                f[j] = z3.If(hit, 0, f[j])
                g[j] = z3.If(hit, 0, g[j])
            st[j] = z3.If(hit, PREEMPTED, st[j])
        fits_after = z3.And(running_now - z3.If(preempts, 1, 0) < c.max_num_seqs, self.free - wm >= needs[i])
        admit = z3.And(eligible, fits_after)
        self.admitted[i] = z3.Or(self.admitted[i], admit)
        for j in range(i):
            byp[j] = z3.If(z3.And(admit, fresh, self.skipped[j]), byp[j] + 1, byp[j])
        self.skipped[i] = z3.And(waiting, z3.Not(admit))
        st[i] = z3.If(admit, RUNNING, st[i])
        self.free = self.free - z3.If(admit, needs[i], 0)
        byp[i] = z3.If(admit, 0, byp[i])
        cd[i] = z3.If(admit, 0, cd[i])
        ce[i] = z3.If(z3.And(admit, a_kind == 1), f[i] + a_cost,
                      z3.If(z3.And(r_ok, r_kind == 1), f[i] + r_cost, z3.If(admit, f[i], ce[i])))
        self.in_batch[i] = z3.Or(r_ok, admit)
        kind = z3.If(r_ok, r_kind, a_kind)
        self.budget = budget - z3.If(r_ok, r_cost, z3.If(admit, a_cost, 0))
        self.stage = z3.If(z3.And(self.stage == 0, self.in_batch[i]), kind, self.stage)

    def execute(self, i: int, stop: z3.BoolRef) -> None:
        """Request i's batch item runs: one depth (WCPB) or every depth of a
        chunk, or one token; a token at max_tokens or a stop token finishes it,
        and a prompt-only request (max_tokens 0) finishes with its prompt."""
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
        finish = z3.Or(z3.And(token, z3.Or(stop, g[i] >= m)), z3.And(prompt_done, m == 0))
        self.free = self.free + z3.If(finish, w.need[i], 0)
        self.st[i] = z3.If(finish, FINISHED, self.st[i])
