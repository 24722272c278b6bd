"""A family's liveness verdict and worst-case figures, its variants explored and
analysed on several processes.

The variants of a family (arrival offsets) never share a state, so each is
explored and analysed on its own (`model.explore.explore_variant`,
`model.liveness.analyse`) and the results combine exactly: counts add up, the
verdict is any variant's livelock, worst cases are the largest, and the lasso
is the shortest (ties: the first variant). Results come back in variant order,
so the survey is the same for any number of workers.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from dataclasses import dataclass

from model.explore import Caps, SuccessorCache, collision_probability, explore_variant, variants
from model.liveness import Liveness, analyse
from model.workload import Workload


@dataclass
class Survey:
    """What exploring a family established (figures over all its variants)."""

    states: int
    transitions: int
    depth: int
    drained: int
    complete: bool
    liveness: Liveness
    collision_probability: float   # that a fingerprint collision merged two states (upper estimate)


def _survey_variant(job: tuple[int, Workload, bool, Caps], cache: SuccessorCache,
                    progress: Callable[[int, int], None] | None = None) -> Survey:
    ex = explore_variant(*job, cache, progress)
    return Survey(ex.states, ex.transitions, max(ex.depth, default=0), sum(ex.drained), ex.complete, analyse(ex),
                  collision_probability([ex.states]))


_jobs: list[tuple[int, Workload, bool, Caps]] = []   # in a worker process: the survey's jobs
_cache = SuccessorCache()                             # ... and the successors its variants share


def _inherit(jobs: list[tuple[int, Workload, bool, Caps]]) -> None:
    """A worker's start: the jobs, and signals left to the parent (Ctrl-C goes to
    the parent, which ends the pool; the pool's SIGTERM ends a worker quietly)."""
    _jobs[:] = jobs
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _survey_job(v: int) -> Survey:
    return _survey_variant(_jobs[v], _cache)


def survey(workload: Workload, spread: int = 0, reduce: bool = True, max_states: int = 200_000,
           max_memory_mb: float | None = None, workers: int = 1,
           progress: Callable[[int, int], None] | None = None) -> Survey:
    """Explore and analyse every variant (on `workers` fork processes when more
    than one), combined in variant order; incomplete past `max_states` states in
    all or the memory cap. `progress(states, queue)` now and then (with one
    worker also within a variant; the queue is then the variants left)."""
    caps = Caps(max_states, max_memory_mb)
    jobs = [(v, w, reduce, caps) for v, w in enumerate(variants(workload, spread))]
    done: list[Survey] = []
    states = 0
    if workers > 1 and len(jobs) > 1:
        # fork: the workers inherit the jobs, so only variant numbers and figures cross the pipes
        with multiprocessing.get_context("fork").Pool(min(workers, len(jobs)), _inherit, (jobs,)) as pool:
            chunk = max(1, len(jobs) // (8 * workers))    # variants are often tiny: batch them per message
            states = _collect(pool.imap(_survey_job, range(len(jobs)), chunk), done, len(jobs), caps, progress)
    else:
        def inner(n: int, queue: int) -> None:
            if progress:
                progress(sum(p.states for p in done) + n, queue)
        cache = SuccessorCache()
        states = _collect((_survey_variant(job, cache, inner) for job in jobs), done, len(jobs), caps, progress)
    complete = len(done) == len(jobs) and all(p.complete for p in done) and states <= max_states
    return combine(done, complete)


def _collect(results, done: list[Survey], total: int, caps: Caps,
             progress: Callable[[int, int], None] | None) -> int:
    """Take results in order until one is incomplete or the caps are passed."""
    states = 0
    for part in results:
        done.append(part)
        states += part.states
        if progress:
            progress(states, total - len(done))
        if not part.complete or states > caps.max_states or caps.memory_exceeded():
            break
    return states


def combine(parts: list[Survey], complete: bool) -> Survey:
    """The family's figures from its variants' (in variant order)."""
    lives = [p.liveness for p in parts]
    lassos = [live.lasso for live in lives if live.lasso is not None]
    lasso = min(lassos, key=lambda lasso: len(lasso.nodes)) if lassos else None
    sccs = sum(live.non_progress_sccs for live in lives)
    worst = [(live.worst_drain_steps, live.worst_preemptions) for live in lives]
    known = complete and sccs == 0 and all(s is not None and p is not None for s, p in worst)
    liveness = Liveness(lasso is not None, lasso, sccs, sum(live.unrealisable_cycles for live in lives),
                        sum(live.can_drain for live in lives),
                        max((s for s, _ in worst), default=0) if known else None,
                        max((p for _, p in worst), default=0) if known else None)
    return Survey(sum(p.states for p in parts), sum(p.transitions for p in parts),
                  max((p.depth for p in parts), default=0), sum(p.drained for p in parts), complete, liveness,
                  min(1.0, sum(p.collision_probability for p in parts)))
