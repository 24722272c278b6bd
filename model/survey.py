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
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from model.explore import (
    Caps,
    Exploration,
    FutureGraph,
    explore,
    explore_variant,
    family_size,
    variant,
)
from model.liveness import Lasso, Liveness, analyse
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


Family = tuple[Workload, int, bool, Caps]   # workload, spread, reduce, caps


def _survey_variant(v: int, family: Family, graph: FutureGraph,
                    progress: Callable[[int, int], None] | None = None) -> Survey:
    workload, spread, reduce, caps = family
    return _survey_of(explore_variant(v, variant(workload, spread, v), reduce, caps, graph, progress))


def _survey_of(ex: Exploration) -> Survey:
    return Survey(ex.states, ex.transitions, max(ex.depth, default=0), sum(ex.drained), ex.complete, analyse(ex),
                  ex.collision_probability)


_family: list[Family] = []          # in a worker process: the survey's family
_graph = FutureGraph()              # ... and the nodes its variants share


def _inherit(family: Family) -> None:
    """A worker's start: the family, and signals left to the parent (Ctrl-C goes
    to the parent, which ends the pool; the pool's SIGTERM ends a worker quietly)."""
    _family[:] = [family]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _survey_job(v: int) -> Survey:
    return _survey_variant(v, _family[0], _graph)


def survey(workload: Workload, spread: int = 0, reduce: bool = True, max_states: int = 200_000,
           max_memory_mb: float | None = None, workers: int = 1,
           progress: Callable[[int, int], None] | None = None, merge: bool = False) -> Survey:
    """Explore and analyse every variant (on `workers` fork processes when more
    than one), combined in variant order; incomplete past `max_states` states in
    all or the memory cap. `progress(states, queue)` now and then (with one
    worker also within a variant; the queue is then the variants left).
    Variants are built where they are explored, and their figures folded as
    they come, so memory does not grow with the family's size. With `merge`
    the family is one graph (`Exploration.merge`), explored and analysed on
    this process."""
    if merge:
        ex = explore(workload, max_states, spread, reduce, max_memory_mb, progress, merge=True)
        return _survey_of(ex)
    caps = Caps(max_states, max_memory_mb)
    family = (workload, spread, reduce, caps)
    total = family_size(workload, spread)
    folded = Fold(total, caps, progress)
    if workers > 1 and total > 1:
        # fork: the workers inherit the family, so only variant numbers and figures cross the pipes
        with multiprocessing.get_context("fork").Pool(min(workers, total), _inherit, (family,)) as pool:
            chunk = max(1, min(1024, total // (4 * workers)))   # variants are often tiny: batch them per message
            folded.take(pool.imap(_survey_job, range(total), chunk))
    else:
        def inner(n: int, queue: int) -> None:
            if progress:
                progress(folded.states + n, queue)
        graph = FutureGraph()
        folded.take(_survey_variant(v, family, graph, inner) for v in range(total))
    return folded.result()


class Fold:
    """The family's figures folded from its variants' (taken in variant order):
    counts add up, the verdict is any variant's livelock, worst cases are the
    largest (known only when every variant's is), the lasso is the shortest
    (ties: the first)."""

    def __init__(self, total: int, caps: Caps, progress: Callable[[int, int], None] | None) -> None:
        self.total, self.caps, self.progress = total, caps, progress
        self.taken = self.states = self.transitions = self.depth = self.drained = 0
        self.all_complete, self.worst_known = True, True
        self.lasso: Lasso | None = None
        self.sccs = self.unrealisable = self.can_drain = self.worst_steps = self.worst_preemptions = 0
        self.collision = 0.0

    def take(self, parts: Iterable[Survey]) -> None:
        """Fold parts in until one is incomplete or the caps are passed."""
        for part in parts:
            self.add(part)
            if self.progress:
                self.progress(self.states, self.total - self.taken)
            if not part.complete or self.states > self.caps.max_states or self.caps.memory_exceeded():
                break

    def add(self, part: Survey) -> None:
        live = part.liveness
        self.taken += 1
        self.states += part.states
        self.transitions += part.transitions
        self.depth = max(self.depth, part.depth)
        self.drained += part.drained
        self.all_complete = self.all_complete and part.complete
        if live.lasso is not None and (self.lasso is None or len(live.lasso.nodes) < len(self.lasso.nodes)):
            self.lasso = live.lasso
        self.sccs += live.non_progress_sccs
        self.unrealisable += live.unrealisable_cycles
        self.can_drain += live.can_drain
        if live.worst_drain_steps is None or live.worst_preemptions is None:
            self.worst_known = False
        else:
            self.worst_steps = max(self.worst_steps, live.worst_drain_steps)
            self.worst_preemptions = max(self.worst_preemptions, live.worst_preemptions)
        self.collision += part.collision_probability

    def result(self) -> Survey:
        complete = self.taken == self.total and self.all_complete and self.states <= self.caps.max_states
        known = complete and self.sccs == 0 and self.worst_known
        liveness = Liveness(self.lasso is not None, self.lasso, self.sccs, self.unrealisable, self.can_drain,
                            self.worst_steps if known else None, self.worst_preemptions if known else None)
        return Survey(self.states, self.transitions, self.depth, self.drained, complete, liveness,
                      min(1.0, self.collision))
