"""z3 encodings of the admission/preemption rules and the obligations over them.

Every obligation returns a ProofResult: `proved` only for an unsat of the negated
claim, `counterexample` with a model, `unknown` for anything else (never a pass).
"""
