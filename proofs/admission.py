"""Symbolic admission check, guarded preflight and preemption for one waiting
request w, over a KVState (upfront allocation).

w's leading prompt pages k < H are cache entries k (if present); pend[k] marks a
page that another running request (not the victim) still holds privately.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from loopcheck.proofs.kv import KVState, b2i, cache_only, free_count, release


@dataclass(frozen=True)
class Ctx:
    """Everything the admission decision reads besides the KV state."""

    planes: z3.ArithRef
    num_blocks: z3.ArithRef
    slots: z3.ArithRef          # max_num_seqs
    watermark: z3.ArithRef
    active: z3.BoolRef          # the watermark binds (something ran at the start of the step; for a
                                # resumption only with resume_watermark)
    running: tuple[z3.BoolRef, ...]
    pages: z3.ArithRef          # pages w must hold (upfront: its lifetime pages)
    hit_limit: int              # H: prompt pages that may hit
    pend: tuple[z3.BoolRef, ...]  # length H


@dataclass(frozen=True)
class GuardRules:
    """Switches that tests flip to break the guarded check on purpose."""

    preflight_watermark: bool = True


GUARD_RULES = GuardRules()


def leading(flags: list[z3.BoolRef]) -> z3.ArithRef:
    """How many of the first flags are all true."""
    total, run = z3.IntVal(0), z3.BoolVal(True)
    for f in flags:
        run = z3.And(run, f)
        total = total + b2i(run)
    return total


def hits(s: KVState, ctx: Ctx, count_pending: bool) -> z3.ArithRef:
    return leading([z3.Or(s.present[k], ctx.pend[k]) if count_pending else s.present[k]
                    for k in range(ctx.hit_limit)])


def room(s: KVState, ctx: Ctx, running: z3.ArithRef, count_pending: bool,
         watermark: bool = True) -> z3.BoolRef:
    """The admission predicate: a free slot, and free blocks (less the cache-only
    pages the hits revive, less the watermark while active) cover the private pages."""
    h = hits(s, ctx, count_pending)
    revived = z3.Sum([b2i(z3.And(k < h, cache_only(s, k))) for k in range(ctx.hit_limit)]
                     + [z3.IntVal(0)])
    spare = free_count(s, ctx.planes) - ctx.planes * revived
    if watermark:
        spare = spare - z3.If(ctx.active, ctx.watermark, 0)
    return z3.And(running < ctx.slots, spare >= ctx.planes * (ctx.pages - h))


def running_count(ctx: Ctx) -> z3.ArithRef:
    return z3.Sum([b2i(r) for r in ctx.running] + [z3.IntVal(0)])


def fits(s: KVState, ctx: Ctx) -> z3.BoolRef:
    return room(s, ctx, running_count(ctx), count_pending=False)


def preflight(s: KVState, ctx: Ctx, v: int, rules: GuardRules = GUARD_RULES) -> z3.BoolRef:
    """Guarded check for victim v: room once v is released, pending pages as hits."""
    return room(release(s, v, ctx.planes), ctx, running_count(ctx) - 1, count_pending=True,
                watermark=rules.preflight_watermark)


def after_preemption(s: KVState, ctx: Ctx, v: int) -> tuple[KVState, Ctx]:
    running = tuple(z3.BoolVal(False) if i == v else r for i, r in enumerate(ctx.running))
    return release(s, v, ctx.planes), Ctx(**{**ctx.__dict__, "running": running})
