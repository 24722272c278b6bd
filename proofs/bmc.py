"""Bounded model checking of whole scheduler steps, for a class of workloads:
upfront allocation, no prefix caching, no stop tokens, no aborts. Requests are
numbered in priority-key order (the solver must keep (priority, arrival) sorted),
prompt lengths, max_tokens, priorities, arrivals and the watermark are unknowns.

`sym_step` is the z3 rendition of docs/semantics.md for that class;
tests/test_proofs_fidelity.py evaluates it on concrete states against model/.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from model.config import Config

PENDING, WAITING, RUNNING, PREEMPTED, FINISHED = range(5)
STATUS_CODES = {"pending": PENDING, "waiting": WAITING, "running": RUNNING,
                "preempted": PREEMPTED, "finished": FINISHED}


@dataclass(frozen=True)
class SymWorkload:
    prompt: tuple[z3.ArithRef, ...]
    max_tokens: tuple[z3.ArithRef, ...]
    priority: tuple[z3.ArithRef, ...]
    arrival: tuple[z3.ArithRef, ...]
    watermark: z3.ArithRef

    @property
    def K(self) -> int:
        return len(self.prompt)


@dataclass(frozen=True)
class SymState:
    status: tuple[z3.ArithRef, ...]
    frontier: tuple[z3.ArithRef, ...]
    chunk_end: tuple[z3.ArithRef, ...]
    chunk_depth: tuple[z3.ArithRef, ...]
    generated: tuple[z3.ArithRef, ...]
    bypasses: tuple[z3.ArithRef, ...]
    free: z3.ArithRef

    def fields(self) -> list[z3.ArithRef]:
        return [*self.status, *self.frontier, *self.chunk_end, *self.chunk_depth,
                *self.generated, *self.bypasses, self.free]


def initial(K: int, cfg: Config) -> SymState:
    zeros = tuple(z3.IntVal(0) for _ in range(K))
    return SymState(tuple(z3.IntVal(PENDING) for _ in range(K)), zeros, zeros, zeros, zeros, zeros,
                    z3.IntVal(cfg.num_blocks))


def supported(cfg: Config) -> str | None:
    """Why a config is outside the class, or None."""
    if cfg.allocation != "upfront":
        return "allocation must be upfront"
    if cfg.prefix_caching:
        return "prefix caching must be off"
    return None


def need(w: SymWorkload, i: int, cfg: Config) -> z3.ArithRef:
    bs = cfg.block_size
    return cfg.planes * ((w.prompt[i] + w.max_tokens[i] - 1 + bs - 1) / bs)


def _min(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a < b, a, b)


def sym_step(s: SymState, t: int, w: SymWorkload, cfg: Config) -> SymState:
    """One step (arrivals, schedule, execute) as z3 terms."""
    K, L = w.K, cfg.num_loops
    st, f, ce, cd, g, byp = (list(x) for x in (s.status, s.frontier, s.chunk_end, s.chunk_depth,
                                               s.generated, s.bypasses))
    free = s.free
    needs = [need(w, i, cfg) for i in range(K)]
    for i in range(K):
        arrive = z3.And(st[i] == PENDING, w.arrival[i] <= t)
        st[i] = z3.If(arrive, z3.If(needs[i] > cfg.num_blocks, FINISHED, WAITING), st[i])
    active = z3.Or([x == RUNNING for x in st])
    wm = z3.If(active, w.watermark, 0)
    budget: z3.ArithRef = z3.IntVal(cfg.max_num_batched_tokens)
    stage: z3.ArithRef = z3.IntVal(0)                   # 0 unset, 1 prefill, 2 decode
    in_batch: list[z3.BoolRef] = [z3.BoolVal(False)] * K
    skipped: list[z3.BoolRef] = [z3.BoolVal(False)] * K

    def stage_ok(kind: z3.ArithRef) -> z3.BoolRef:
        return z3.BoolVal(True) if cfg.execution == "mixed" else z3.Or(stage == 0, stage == kind)

    for i in range(K):
        P = w.prompt[i]
        running_now = z3.Sum([z3.If(x == RUNNING, 1, 0) for x in st])
        # a running request continues
        inflight = ce[i] > f[i]
        r_prefill = z3.Or(inflight, f[i] < P)
        r_cost = z3.If(inflight, ce[i] - f[i], z3.If(f[i] < P, _min(_min(cfg.prefill_chunk_size, P - f[i]),
                                                                     budget), 1))
        r_kind = z3.If(r_prefill, 1, 2)
        r_ok = z3.And(st[i] == RUNNING, r_cost >= 1, r_cost <= budget, stage_ok(r_kind))
        # a waiting or preempted request tries to get in
        waiting = z3.Or(st[i] == WAITING, st[i] == PREEMPTED)
        fresh = st[i] == WAITING
        a_kind = z3.If(f[i] < P, 1, 2)
        a_cost = z3.If(f[i] < P, _min(_min(cfg.prefill_chunk_size, P - f[i]), budget), 1)
        blocked = z3.And(fresh, z3.Or([z3.And(skipped[j], byp[j] >= cfg.max_bypasses)
                                       for j in range(i)] + [z3.BoolVal(False)]))
        eligible = z3.And(waiting, a_cost >= 1, a_cost <= budget, stage_ok(a_kind), z3.Not(blocked))
        fits_now = z3.And(running_now < cfg.max_num_seqs, free - wm >= needs[i])
        victim: z3.ArithRef = z3.IntVal(-1)
        for j in range(i + 1, K):   # least urgent (largest index) last, so it wins
            cand = z3.And(st[j] == RUNNING, w.priority[j] > w.priority[i])
            if cfg.preemption_policy == "guarded":
                cand = z3.And(cand, running_now - 1 < cfg.max_num_seqs, free + needs[j] - wm >= needs[i])
            victim = z3.If(cand, j, victim)
        preempts = z3.And(eligible, z3.Not(fits_now), victim >= 0) if cfg.priority_preemption \
            else z3.BoolVal(False)
        for j in range(i + 1, K):
            hit = z3.And(preempts, victim == j)
            free = free + z3.If(hit, needs[j], 0)
            ce[j] = z3.If(hit, 0 if not cfg.snapshots else f[j], ce[j])
            cd[j] = z3.If(hit, 0, cd[j])
            if not cfg.snapshots:
                f[j] = z3.If(hit, 0, f[j])
                g[j] = z3.If(hit, 0, g[j])
            st[j] = z3.If(hit, PREEMPTED, st[j])
        fits_after = z3.And(running_now - z3.If(preempts, 1, 0) < cfg.max_num_seqs, free - wm >= needs[i])
        admit = z3.And(eligible, fits_after)
        for j in range(i):
            byp[j] = z3.If(z3.And(admit, fresh, skipped[j]), byp[j] + 1, byp[j])
        skipped[i] = z3.And(waiting, z3.Not(admit))
        st[i] = z3.If(admit, RUNNING, st[i])
        free = free - z3.If(admit, needs[i], 0)
        byp[i] = z3.If(admit, 0, byp[i])
        cd[i] = z3.If(admit, 0, cd[i])
        ce[i] = z3.If(z3.And(admit, a_kind == 1), f[i] + a_cost,
                      z3.If(z3.And(r_ok, r_kind == 1), f[i] + r_cost, z3.If(admit, f[i], ce[i])))
        in_batch[i] = z3.Or(r_ok, admit)
        kind = z3.If(r_ok, r_kind, a_kind)
        budget = budget - z3.If(r_ok, r_cost, z3.If(admit, a_cost, 0))
        stage = z3.If(z3.And(stage == 0, in_batch[i]), kind, stage)
    for i in range(K):
        P = w.prompt[i]
        prefill = z3.And(in_batch[i], ce[i] > f[i])
        depth = cd[i] + 1 if cfg.wcpb else z3.IntVal(L)
        done = z3.And(prefill, depth == L)
        token = z3.Or(z3.And(in_batch[i], z3.Not(prefill)),
                      z3.And(done, ce[i] == P, g[i] == 0))
        cd[i] = z3.If(prefill, z3.If(depth == L, 0, depth), cd[i])
        f[i] = z3.If(done, ce[i], f[i])
        g[i] = z3.If(token, g[i] + 1, g[i])
        finish = z3.And(token, g[i] >= w.max_tokens[i])
        free = free + z3.If(finish, needs[i], 0)
        st[i] = z3.If(finish, FINISHED, st[i])
    return SymState(tuple(st), tuple(f), tuple(ce), tuple(cd), tuple(g), tuple(byp), free)
