"""Bounds on preemptions and drain steps for a finite workload, under the guarded
policy with upfront allocation (derived in docs/bounds.md; the per-step facts they
rest on are proved in proofs/).

Returns None where no bound is claimed (unguarded, incremental allocation).
"""

from __future__ import annotations

from itertools import groupby

from model.workload import Workload


def admission_bounds(workload: Workload) -> list[int]:
    """A_l, admissions (fresh or resumed) per priority level, most urgent first:
    A_l <= n_l + m * sum(A_j for more urgent j), m = 1 without prefix caching
    (every preemption pairs with the admission of a more urgent request), else
    num_blocks + 2 (up to num_blocks + 1 futile preemptions per waiting episode)."""
    cfg = workload.config
    m = 1 if not cfg.prefix_caching else cfg.num_blocks + 2
    levels = [len(list(g)) for _, g in groupby(sorted(r.priority for r in workload.requests))]
    bounds: list[int] = []
    for n in levels:
        bounds.append(n + m * sum(bounds))
    return bounds


def preemption_bound(workload: Workload) -> int | None:
    cfg = workload.config
    if cfg.preemption_policy != "guarded" or cfg.allocation != "upfront":
        return None
    return sum(admission_bounds(workload)) - len(workload.requests)


def work_units(workload: Workload) -> list[int]:
    """Per request, steps of work it needs at most without interruption: one per
    prompt token and depth (a chunk has at least one token), plus one per token."""
    L = workload.config.num_loops if workload.config.wcpb else 1
    return [len(r.prompt) * L + r.max_tokens for r in workload.requests]


def drain_step_bound(workload: Workload) -> int | None:
    """Steps until drained: every step from the last arrival on does one unit of
    work for someone, except after a futile preemption; a preemption loses at most
    one request's units."""
    bound = preemption_bound(workload)
    if bound is None or not workload.requests:
        return bound
    units = work_units(workload)
    last_arrival = max(r.arrival for r in workload.requests)
    return last_arrival + 1 + sum(units) + bound * (max(units) + 1)
