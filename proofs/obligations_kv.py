"""Obligations over the KV accounting and the admission decision."""

from __future__ import annotations

import z3

from loopcheck.proofs.admission import GUARD_RULES, Ctx, GuardRules, after_preemption, fits, hits, preflight
from loopcheck.proofs.kv import (
    RULES,
    KVState,
    Rules,
    b2i,
    conservation,
    fresh_kv,
    publish,
    release,
    share,
    take_private,
)
from loopcheck.proofs.result import COUNTEREXAMPLE, PROVED, ProofResult, check_claim

PLANES, BLOCKS = z3.Int("planes"), z3.Int("num_blocks")
BASICS = [PLANES >= 1, BLOCKS >= PLANES]


def _waiting_ctx(K: int, H: int, w: int) -> tuple[Ctx, list[z3.BoolRef]]:
    ctx = Ctx(planes=PLANES, num_blocks=BLOCKS, slots=z3.Int("slots"), watermark=z3.Int("watermark"),
              active=z3.Bool("active"), running=tuple(z3.Bool(f"running{i}") for i in range(K)),
              pages=z3.Int("pages_w"), hit_limit=H,
              pend=tuple(z3.Bool(f"pend{k}") for k in range(H)))
    facts = [ctx.slots >= 1, ctx.watermark >= 0, ctx.pages >= 1, ctx.pages > H,
             z3.Not(ctx.running[w])]
    facts.append(z3.Implies(z3.Or(list(ctx.running)), ctx.active))
    return ctx, facts


def _holds_nothing(s: KVState, i: int) -> list[z3.BoolRef]:
    return [s.priv[i] == 0] + [z3.Not(h) for h in s.hold[i]]


def _not_running_holds_nothing(s: KVState, ctx: Ctx) -> list[z3.BoolRef]:
    return [z3.Implies(z3.Not(ctx.running[i]), z3.And(_holds_nothing(s, i))) for i in range(s.K)]


def kv_conservation(K: int, C: int, rules: Rules = RULES) -> ProofResult:
    """Conservation is inductive over release, admission (share + take private
    pages with eviction), growth and publication, for every request."""
    s = fresh_kv("s_", K, C)
    inv = conservation(s, PLANES, BLOCKS)
    n = z3.Int("n")
    evict = tuple(z3.Bool(f"evict{c}") for c in range(C))
    hitmask = tuple(z3.Bool(f"hit{c}") for c in range(C))
    cases = []
    for i in range(K):
        cases.append((z3.BoolVal(True), release(s, i, PLANES, rules)))
        shared = share(s, i, hitmask)
        admitted, pre = take_private(shared, i, n, evict, PLANES)
        cases.append((pre, admitted))
        for c in range(C):
            published, pre = publish(s, i, c)
            cases.append((pre, published))
    claim = z3.And([z3.Implies(pre, conservation(after, PLANES, BLOCKS)) for pre, after in cases])
    result, model = check_claim("kv-conservation", "both", PROVED, BASICS + [inv], claim)
    if model is not None:
        result.detail = "a transition breaks conservation"
    return result


def admission_atomic(K: int, C: int) -> ProofResult:
    """A request that passes the admission check gets every page it needs in one
    go (no partial allocation), and conservation holds after it."""
    w, H = 0, min(C, 2)
    s = fresh_kv("s_", K, C)
    ctx, facts = _waiting_ctx(K, H, w)
    h = hits(s, ctx, count_pending=False)
    hitmask = tuple(z3.And(k < h) if k < H else z3.BoolVal(False) for k in range(C))
    shared = share(s, w, hitmask)
    n = ctx.pages - h
    # evict cache-only, non-hit entries in order until the free queue covers n pages
    evict: list[z3.BoolRef] = []
    covered = shared.free
    for c in range(C):
        e = z3.And(shared.present[c], shared.holders[c] == 0, covered < PLANES * n)
        evict.append(e)
        covered = covered + PLANES * b2i(e)
    after, pre = take_private(shared, w, n, tuple(evict), PLANES)
    assumptions = BASICS + facts + [conservation(s, PLANES, BLOCKS), fits(s, ctx)]
    assumptions += _holds_nothing(s, w) + _not_running_holds_nothing(s, ctx)
    claim = z3.And(pre, conservation(after, PLANES, BLOCKS))
    result, _ = check_claim("admission-atomic", "both", PROVED, assumptions, claim)
    return result


def preflight_soundness(K: int, C: int, pending: bool, rules: GuardRules = GUARD_RULES) -> ProofResult:
    """Guarded: a passing preflight for victim v means w fits right after v is
    preempted. Proved with no prefix publication pending; with pending pages the
    claim is false and the solver must produce a counterexample."""
    w, v, H = 0, 1, min(C, 2)
    s = fresh_kv("s_", K, C)
    ctx, facts = _waiting_ctx(K, H, w)
    assumptions = BASICS + facts + [conservation(s, PLANES, BLOCKS), ctx.running[v]]
    assumptions += _holds_nothing(s, w) + _not_running_holds_nothing(s, ctx)
    if not pending:
        assumptions += [z3.Not(p) for p in ctx.pend]
    assumptions.append(preflight(s, ctx, v, rules))
    s1, ctx1 = after_preemption(s, ctx, v)
    name = "preflight-soundness" + ("-pending" if pending else "")
    expected = COUNTEREXAMPLE if pending else PROVED
    result, model = check_claim(name, "guarded", expected, assumptions, fits(s1, ctx1))
    if model is not None:
        result.detail = (f"free={model.eval(s.free)} pages_w={model.eval(ctx.pages)} "
                         f"watermark={model.eval(ctx.watermark)} active={model.eval(ctx.active)} "
                         f"pend={[model.eval(p) for p in ctx.pend]}")
    return result


def futility(policy: str, record_guard: bool = True) -> ProofResult:
    """No two futile preemptions for w at the same free-block budget between two
    of its admissions, unbounded in steps. For an arbitrary budget value b, `g`
    says the guard holds (w, b) and `h` that w made a futile preemption at b since
    its last admission; the invariant h -> g is inductive over any visit of w
    (preempt or not, admitted or not, at any budget), and under it a preemption at
    b cannot be a second futile one."""
    b, budget = z3.Int("b"), z3.Int("budget")
    g, h = z3.Bools("guard_holds_b futile_at_b")
    pre, adm = z3.Bools("preempt admit")
    facts = [z3.Implies(h, g)]
    if policy == "guarded":
        facts.append(z3.Implies(pre, z3.Not(z3.And(budget == b, g))))
    futile_here = z3.And(pre, z3.Not(adm), budget == b)
    g1 = z3.If(adm, False, z3.Or(g, futile_here)) if record_guard else z3.If(adm, False, g)
    h1 = z3.If(adm, False, z3.Or(h, futile_here))
    claim = z3.And(z3.Implies(h1, g1), z3.Implies(futile_here, z3.Not(h)))
    expected = PROVED if policy == "guarded" else COUNTEREXAMPLE
    result, _ = check_claim("futility", policy, expected, facts, claim)
    return result
