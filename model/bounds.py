"""Proved bounds for a finite workload. Only what `loopcheck prove` establishes
is returned; None where no bound is proved.

Preemptions (guarded policy, upfront allocation, no prefix caching): the
obligation `preemption-pairs` proves, over the whole symbolic step from any
state of the drain invariant, that each preemption is made by a strictly more
urgent request admitted in the same step, one victim per requester's turn.
Counting admissions per priority level on that fact gives the bound below
(docs/bounds.md). Drain itself is proved with no step bound (`drain`); no
closed-form bound on drain steps is claimed.
"""

from __future__ import annotations

from itertools import groupby

from model.workload import Workload


def admission_bounds(workload: Workload) -> list[int]:
    """A_l, admissions (fresh or resumed) per priority level, most urgent first:
    A_l <= n_l + sum(A_j for more urgent j)."""
    levels = [len(list(g)) for _, g in groupby(sorted(r.priority for r in workload.requests))]
    bounds: list[int] = []
    for n in levels:
        bounds.append(n + sum(bounds))
    return bounds


def preemption_bound(workload: Workload) -> int | None:
    """Most preemptions in any run of the workload, or None outside the proved class."""
    cfg = workload.config
    if cfg.allocation != "upfront":
        return None                      # growth preemptions: no bound proved
    if not cfg.priority_preemption:
        return 0
    if cfg.preemption_policy != "guarded" or cfg.prefix_caching:
        return None
    return sum(admission_bounds(workload)) - len(workload.requests)


def work_units(workload: Workload) -> list[int]:
    """Per request, steps of work it needs at most without interruption: one per
    prompt token and depth (a chunk has at least one token), plus one per token.
    A sizing figure for step caps, not a bound on anything."""
    L = workload.config.num_loops if workload.config.wcpb else 1
    return [len(r.prompt) * L + r.max_tokens for r in workload.requests]
