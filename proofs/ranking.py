"""Bounded preemption: a ranking function that every guarded step with a
preemption strictly decreases and no step increases.

R = sum over requests not running and not finished of B ** (P - priority), with
B = K + 1 and priorities in [0, P]. The step relation assumes what
preflight-soundness proves: each preempted request is paired with a distinct
request of strictly smaller priority value that the same step admits.
"""

from __future__ import annotations

import z3

from proofs.result import PROVED, ProofResult, check_claim

MAX_PRIORITY = 3


def _weight(p: z3.ArithRef, base: int) -> z3.ArithRef:
    w: z3.ArithRef = z3.IntVal(0)
    for level in range(MAX_PRIORITY, -1, -1):
        w = z3.If(p == level, base ** (MAX_PRIORITY - level), w)
    return w


def ranking_decreases(K: int, paired: bool = True) -> ProofResult:
    base = K + 1
    prio = [z3.Int(f"prio{i}") for i in range(K)]
    waiting0 = [z3.Bool(f"waiting_before{i}") for i in range(K)]   # not running, not finished
    waiting1 = [z3.Bool(f"waiting_after{i}") for i in range(K)]
    running0 = [z3.Bool(f"running_before{i}") for i in range(K)]
    pair = [z3.Int(f"pair{i}") for i in range(K)]
    preempted = [z3.And(running0[i], waiting1[i]) for i in range(K)]
    admitted = [z3.And(waiting0[i], z3.Not(waiting1[i])) for i in range(K)]
    facts = []
    for i in range(K):
        facts += [prio[i] >= 0, prio[i] <= MAX_PRIORITY, z3.Not(z3.And(waiting0[i], running0[i]))]
        # finished requests stay finished: a request neither waiting nor running before
        # is finished and cannot wait afterwards
        facts.append(z3.Implies(z3.And(z3.Not(waiting0[i]), z3.Not(running0[i])), z3.Not(waiting1[i])))
        if paired:
            facts.append(z3.Implies(preempted[i], z3.And(
                pair[i] >= 0, pair[i] < K,
                z3.Or([z3.And(pair[i] == j, admitted[j], prio[j] < prio[i]) for j in range(K)]))))
            facts += [z3.Implies(z3.And(preempted[i], preempted[j]), pair[i] != pair[j])
                      for j in range(i + 1, K)]
    rank0 = z3.Sum([z3.If(waiting0[i], _weight(prio[i], base), 0) for i in range(K)])
    rank1 = z3.Sum([z3.If(waiting1[i], _weight(prio[i], base), 0) for i in range(K)])
    claim = z3.And(rank1 <= rank0, z3.Implies(z3.Or(preempted), rank1 < rank0))
    result, model = check_claim("ranking-decreases", "guarded" if paired else "unguarded",
                                PROVED if paired else "counterexample", facts, claim)
    if model is not None:
        result.detail = "a preemption without a paired, more urgent admission raises the rank"
    return result
