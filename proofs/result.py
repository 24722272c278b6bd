"""Outcome of one obligation, and the solver call that produces it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import z3

PROVED, COUNTEREXAMPLE, UNKNOWN = "proved", "counterexample", "unknown"
BOUNDED = "bounded"        # no counterexample within a bound: never shown as proved
AGREES, DISAGREES = "agrees", "disagrees"   # an encoding evaluated against model/


@dataclass
class ProofResult:
    name: str
    policy: str
    status: str
    seconds: float
    expected: str
    detail: str = ""
    counterexample: dict[str, Any] | None = field(default=None, repr=False)
    cached: bool = False   # read from the proof cache (proofs/cache.py), not computed in this run

    @property
    def as_expected(self) -> bool:
        return self.status == self.expected

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "policy": self.policy, "status": self.status,
                "expected": self.expected, "seconds": round(self.seconds, 3),
                "detail": self.detail, "cached": self.cached}


def check_claim(name: str, policy: str, expected: str, assumptions: list[z3.BoolRef],
                claim: z3.BoolRef, timeout_ms: int = 60_000) -> tuple[ProofResult, z3.ModelRef | None]:
    """Prove `assumptions -> claim` by asking for a model of assumptions and not claim.

    unsat -> proved; sat -> counterexample (with the model); else unknown. The
    assumptions alone must be satisfiable, or the result is unknown (vacuous)."""
    start = time.perf_counter()
    if solve(assumptions, timeout_ms)[0] != z3.sat:  # vacuity guard: contradictory assumptions prove anything
        return ProofResult(name, policy, UNKNOWN, time.perf_counter() - start, expected,
                           detail="assumptions are unsatisfiable (vacuous) or undecided"), None
    # a fresh solver for the negated claim: z3 preprocesses only a solver's first check
    answer, solver = solve([*assumptions, z3.Not(claim)], timeout_ms)
    seconds = time.perf_counter() - start
    if answer == z3.unsat:
        return ProofResult(name, policy, PROVED, seconds, expected), None
    if answer == z3.sat:
        return ProofResult(name, policy, COUNTEREXAMPLE, seconds, expected), solver.model()
    return ProofResult(name, policy, UNKNOWN, seconds, expected,
                       detail=f"solver: {solver.reason_unknown()}"), None


def solve(formulas: list[z3.BoolRef], timeout_ms: int) -> tuple[z3.CheckSatResult, z3.Solver]:
    """One fresh solver's answer on `formulas` (fresh: z3 preprocesses only a
    solver's first check, which makes these queries fast)."""
    solver = fresh_solver(timeout_ms)
    solver.add(*formulas)
    return solver.check(), solver


def fresh_solver(timeout_ms: int) -> z3.Solver:
    """z3's SMT solver behind a pipeline that first simplifies, propagates
    values, solves equations for variables and eliminates unconstrained terms.
    It answers what the plain solver answers (each step keeps
    satisfiability, and a model is mapped back to the original variables), in
    a fifth to an eighth of its time on these encodings (docs/bounds.md)."""
    solver = z3.Then("simplify", "propagate-values", "solve-eqs", "elim-uncnstr", "smt").solver()
    solver.set("timeout", timeout_ms)
    return solver
