"""Proved bounds for a finite workload. Only what `loopcheck prove` establishes
is returned; None where no bound is proved.

Preemptions (guarded policy, upfront allocation, no prefix caching): the
obligation `preemption-pairs` proves, over the whole symbolic step from any
state of the drain invariant, that each preemption is made by a strictly more
urgent request admitted in the same step, one victim per requester's turn.
Pairing preemptions with those admissions level by level gives the bound below
(docs/bounds.md). Drain itself is proved with no step bound (`drain`); no
closed-form bound on drain steps is claimed.
"""

from __future__ import annotations

from itertools import groupby

from loopcheck.model.workload import Workload


def preemption_bound(workload: Workload) -> int | None:
    """Most preemptions in any run of the workload, or None outside the class where it is proved.

    With N_k the requests at the k most urgent priority levels (L levels): the
    preemptions of requests at the k most urgent levels pair one to one with
    admissions at the k-1 most urgent, each of which is a fresh admission or
    follows a preemption there, so they number at most N_1 + ... + N_(k-1); for
    k = L that is the bound (docs/bounds.md)."""
    cfg = workload.config
    if cfg.allocation != "upfront":
        return None                      # growth preemptions: no bound proved
    if not cfg.priority_preemption:
        return 0
    if cfg.preemption_policy != "guarded" or cfg.prefix_caching:
        return None
    levels = [len(list(g)) for _, g in groupby(sorted(r.priority for r in workload.requests))]
    bound = more_urgent = 0
    for n in levels[:-1]:
        more_urgent += n
        bound += more_urgent
    return bound


def work_units(workload: Workload) -> list[int]:
    """Per request, steps of work it needs at most without interruption: one per
    prompt token and depth (a chunk has at least one token), plus one per token.
    A sizing figure for step caps, not a bound on anything."""
    L = workload.config.num_loops if workload.config.wcpb else 1
    return [len(r.prompt) * L + r.max_tokens for r in workload.requests]
