"""Drain with no step bound, over the whole symbolic step (proofs/bmc.py), for
every config switch: allocation, prefix caching, execution, WCPB, snapshots
and policy (resume_watermark is an unknown).

An inductive invariant (it holds initially and one step keeps it) and a
lexicographic ranking function that strictly decreases on every step from the
last arrival on while a request is unfinished. The rank lists, request by
request in priority order (most urgent first), four numbers:

  a = 2 pending, 1 waiting or preempted, 0 running or finished;
  G = free counts the futility guard may still record for it (num_blocks + 1
      less its entries; 0 once finished);
  V = prompt tokens not yet past every depth plus tokens not yet generated
      (0 once finished);
  D = depths not yet done of its in-flight chunk (0 once finished).

Why it falls: in every step the most urgent request whose numbers change has
them fall (it arrives, is admitted, preempts futilely and the guard records
it, progresses in the batch, or finishes), and some request changes. A request
is preempted only for a more urgent one that is admitted, records a futile
preemption, or grows and runs; a running request preempts itself only when a
more urgent request holds the pool. All numbers are non-negative under the
invariant, so every workload drains. The sizes of the config, prompt lengths,
max_tokens, priorities, arrivals and block needs are unknowns; stop tokens and
aborts are arbitrary per-step inputs; the step's choices (prefix hits,
releases, publication, growth, the guarded preflight under pending pages) are
arbitrary within their facts. Under the unguarded policy the rank claim
fails; proofs/lasso.py then finds the lasso.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import z3

from loopcheck.proofs.bmc import (
    FINISHED,
    PENDING,
    PREEMPTED,
    RUNNING,
    WAITING,
    Pass,
    StepInputs,
    SymConfig,
    SymState,
    SymWorkload,
    deterministic,
    initial,
    sym_step_traced,
)
from loopcheck.proofs.result import COUNTEREXAMPLE, PROVED, ProofResult, check_claim


def symbolic_workload(K: int, prefix: str = "") -> SymWorkload:
    def ints(name: str) -> tuple[z3.ArithRef, ...]:
        return tuple(z3.Int(f"{prefix}{name}{i}") for i in range(K))
    return SymWorkload(ints("prompt"), ints("max_tokens"), ints("priority"), ints("arrival"), ints("need"))


def invariant(s: SymState, w: SymWorkload, c: SymConfig) -> z3.BoolRef:
    """What every reachable state satisfies (the drain proof's inductive invariant)."""
    return z3.And(*local_facts(s, w, c), accounting(s, c))


def accounting(s: SymState, c: SymConfig) -> z3.BoolRef:
    """The free count is the pool less the private blocks and the held cache
    blocks."""
    return s.free == c.num_blocks - z3.Sum(list(s.private)) - s.cached


def local_facts(s: SymState, w: SymWorkload, c: SymConfig) -> list[z3.BoolRef]:
    """The invariant's conjuncts other than the pool accounting."""
    facts = []
    for i in range(w.K):
        st, f, ce, cd, g = s.status[i], s.frontier[i], s.chunk_end[i], s.chunk_depth[i], s.generated[i]
        pv, sh, gd = s.private[i], s.shared[i], s.guarded[i]
        facts += [st >= PENDING, st <= FINISHED,
                  f >= 0, f <= ce, ce <= w.prompt[i],
                  ce - f <= c.prefill_chunk_size, ce - f <= c.max_num_batched_tokens,
                  cd >= 0, cd < c.num_loops, z3.Implies(ce == f, cd == 0), z3.Implies(ce > f, cd >= 1),
                  z3.BoolVal(True) if c.wcpb else ce == f,
                  z3.Implies(st != RUNNING, z3.And(ce == f, cd == 0)),
                  z3.Implies(z3.Or(st == PENDING, st == WAITING), z3.And(f == 0, g == 0)),
                  g >= 0, z3.Implies(st != FINISHED, z3.Or(g < w.max_tokens[i],
                                                            z3.And(w.max_tokens[i] == 0, f < w.prompt[i]))),
                  z3.Implies(f < w.prompt[i], g == 0),
                  s.bypasses[i] >= 0,
                  z3.Implies(z3.And(st != PENDING, st != FINISHED), w.need[i] <= c.num_blocks),
                  pv >= 0, sh >= 0, z3.Implies(st != RUNNING, z3.And(pv == 0, sh == 0)),
                  z3.Implies(st == RUNNING, pv + sh == w.need[i] if c.upfront else pv + sh <= w.need[i]),
                  s.cached >= sh,
                  gd >= 0, gd <= c.num_blocks + 1, z3.Implies(st == RUNNING, gd == 0)]
        if not c.prefix_caching:
            facts += [sh == 0, gd == 0]
    facts += [z3.Sum([z3.If(x == RUNNING, 1, 0) for x in s.status]) <= c.max_num_seqs, s.free >= 0,
              s.cached <= z3.Sum(list(s.shared))]
    return facts


def rank(s: SymState, w: SymWorkload, c: SymConfig) -> tuple[z3.ArithRef, ...]:
    """(a, G, V, D) per request, most urgent first (see the module docstring)."""
    out: list[z3.ArithRef] = []
    for i in range(w.K):
        st, done = s.status[i], s.status[i] == FINISHED
        out += [z3.If(st == PENDING, 2, z3.If(z3.Or(st == WAITING, st == PREEMPTED), 1, 0)),
                z3.If(done, 0, c.num_blocks + 1 - s.guarded[i]),
                z3.If(done, 0, w.prompt[i] - s.frontier[i] + w.max_tokens[i] - s.generated[i]),
                z3.If(done, 0, c.num_loops - 1 - s.chunk_depth[i])]
    return tuple(out)


def lex_less(a: tuple[z3.ArithRef, ...], b: tuple[z3.ArithRef, ...]) -> z3.BoolRef:
    if not a:
        return z3.BoolVal(False)
    return z3.Or(a[0] < b[0], z3.And(a[0] == b[0], lex_less(a[1:], b[1:])))


def drain_query(K: int, modes: dict[str, object]) -> tuple[list[z3.BoolRef], SymState, SymState, SymWorkload,
                                                          SymConfig, z3.ArithRef]:
    """Assumptions and the pre/post states of one arbitrary step from a state
    satisfying the invariant."""
    c, facts = SymConfig.unknown(modes)
    w = symbolic_workload(K)
    s = SymState.unknown("s_", K)
    t = z3.Int("t")
    s1, trace = sym_step_traced(s, t, w, c, StepInputs.unknown("in_", K))
    return facts + w.facts() + [t >= 0, invariant(s, w, c), *trace.facts], s, s1, w, c, t


def expected_status(policy: str, K: int) -> str:
    """What drain and preemption-pairs should give: unguarded priority preemption
    preempts for requests it does not admit, and need not drain, as soon as two
    requests meet; one request alone, and the other policies, drain."""
    return COUNTEREXAMPLE if policy == "unguarded" and K >= 2 else PROVED


def drain(K: int, modes: dict[str, object], timeout_ms: int = 120_000) -> ProofResult:
    """Invariant (initiation, consecution) and rank decrease after the last
    arrival, for K requests and one combination of modes."""
    policy = str(modes["preemption_policy"]) if modes["priority_preemption"] else "no preemption"
    expected = expected_status(policy, K)
    name = f"drain K={K} " + mode_label(modes)
    facts, s, s1, w, c, t = drain_query(K, modes)
    start = time.perf_counter()
    steps = [("initiation", facts, invariant(initial(K, c), w, c)),
             ("consecution", facts, z3.And(local_facts(s1, w, c)))]
    steps += accounting_lemmas(K, modes)
    after = [a <= t for a in w.arrival]
    unfinished = z3.Or([x != FINISHED for x in s.status])
    steps.append(("rank", facts + after + [unfinished], lex_less(rank(s1, w, c), rank(s, w, c))))
    for label, assumptions, claim in steps:
        result, model = check_claim(name, policy, expected, assumptions, claim, timeout_ms)
        result.seconds = time.perf_counter() - start
        if result.status != PROVED:
            why = ("a step after the last arrival that does not lower the rank (not by itself a livelock: the "
                   "lasso searches show one)") if model is not None and label == "rank" else result.detail
            result.detail = f"{label}: {result.status} {why}".strip()
            return result
    result.detail = (f"invariant inductive (consecution + {len(steps) - 3} accounting lemmas); rank "
                     f"(a, G, V, D) per request, lexicographic, decreases every step after the last arrival")
    return result


def accounting_lemmas(K: int, modes: dict[str, object]) -> list[tuple[str, list[z3.BoolRef], z3.BoolRef]]:
    """The pool accounting is kept by the step, phase by phase (bmc.Pass), on
    records of unknowns: each phase of each request keeps `accounting` and that
    requests not running hold no private blocks, whatever its choices (within
    their facts). The step composes exactly these phases, so the accounting of
    the state after a step follows from the lemmas."""
    c, facts = SymConfig.unknown(modes)
    w = symbolic_workload(K, "acct_")
    facts = facts + w.facts()
    lemmas = []

    def kept(p: Pass) -> z3.BoolRef:
        return z3.And(accounting(p.state(), c), *[z3.Implies(p.st[k] != RUNNING, p.pv[k] == 0) for k in range(K)])

    for i in range(K):
        for phase in ("arrive", "abort", "schedule", "execute"):
            p = Pass.unknown(f"{phase}{i}_", w, c)
            pre = kept(p)
            if phase == "arrive":
                p.arrive(i, z3.Int("t"))
            elif phase == "abort":
                p.abort(i, z3.Bool(f"abort{i}"))
            elif phase == "schedule":
                p.schedule(i)
            else:
                p.execute(i, z3.Bool(f"stop{i}"))
            lemmas.append((f"accounting, {phase} {i}", facts + [pre, *p.facts], kept(p)))
    return lemmas


def mode_label(modes: dict[str, object]) -> str:
    return (f"{modes['allocation']}, prefix caching={'on' if modes['prefix_caching'] else 'off'}, "
            f"{modes['execution']}, wcpb={'on' if modes['wcpb'] else 'off'}, "
            f"snapshots={'on' if modes['snapshots'] else 'off'}")


def mode_axes(modes: list[dict[str, object]]) -> str:
    """The mode switches that vary across `modes`, as 'a x b x c'."""
    return " x ".join(k for k in modes[0] if len({str(m[k]) for m in modes}) > 1)


def preemption_pairs(K: int, modes: dict[str, object], timeout_ms: int = 120_000) -> ProofResult:
    """Every preemption in a step is made by a strictly more urgent request that
    the same step admits (one victim per waiting request's turn). With the
    counting in docs/bounds.md this bounds preemptions (model/bounds.py)."""
    policy = str(modes["preemption_policy"])
    expected = expected_status(policy, K)
    c, facts = SymConfig.unknown(modes)
    w = symbolic_workload(K)
    s = SymState.unknown("s_", K)
    _, trace = sym_step_traced(s, z3.Int("t"), w, c, StepInputs.unknown("in_", K))
    claim = z3.And([z3.Implies(h, z3.And(trace.admitted[i], w.priority[i] < w.priority[j]))
                    for h, i, j in trace.preemptions])
    result, model = check_claim(f"preemption-pairs K={K} " + mode_label(modes), policy, expected,
                                facts + w.facts() + [z3.Int("t") >= 0, invariant(s, w, c)], claim, timeout_ms)
    if model is not None:
        result.detail = "a preemption whose requester is not admitted in the same step"
    return result


MODES = [dict(allocation=a, prefix_caching=pc, execution=e, wcpb=wcpb, snapshots=snap)
         for a in ("upfront", "incremental") for pc in (False, True)
         for e in ("mixed", "refill") for wcpb in (True, False) for snap in (True, False)]
DETERMINISTIC_MODES = [m for m in MODES if deterministic(m) is None]   # preemption-pairs holds there


def across_modes(name: str, policy: str, obligation: Callable[[int, dict[str, object]], ProofResult],
                 K: int, modes: list[dict[str, object]]) -> ProofResult:
    """One obligation for every combination in `modes` under `policy`
    ("guarded", "unguarded" or "no preemption"); as expected only if every
    combination is."""
    preempt = policy != "no preemption"
    start = time.perf_counter()
    results = [obligation(K, {**m, "priority_preemption": preempt,
                              "preemption_policy": policy if preempt else "guarded"}) for m in modes]
    seconds = time.perf_counter() - start
    expected = results[0].expected
    off = [r for r in results if r.status != expected]
    if off:
        first = off[0]
        return ProofResult(name, policy, first.status, seconds, expected,
                           detail=f"{first.name}: {first.detail} ({len(off)} of {len(results)} modes)",
                           counterexample=first.counterexample)
    detail = f"K={K}, all {len(results)} modes ({mode_axes(modes)})"
    return ProofResult(name, policy, expected, seconds, expected,
                       detail=f"{detail}; {results[0].detail}" if results[0].detail else detail)
