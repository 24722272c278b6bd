"""A family's liveness verdict and worst-case figures, its variants explored and
analysed on several processes.

The variants of a family (arrival offsets) never share a state, so each is
surveyed on its own and the results combine exactly: counts add up, the
verdict is any variant's livelock, worst cases are the largest, and the lasso
is the shortest (ties: the smallest variant number). A variant that drains
from every state is surveyed from its head and its kind's shared tail
(`model.head_tail`); any other is explored as a graph and analysed
(`model.explore.explore_variant`, `model.liveness.analyse`). They do share the graph
of futures (`FutureGraph`), most of all variants with similar arrivals, so the
family is cut into fixed blocks of variants (`plan`) whose variants lie near
each other, and a worker explores neighbouring blocks (`Claims`): work shared
between variants is repeated only where two workers' blocks meet.

Blocks are folded in block order, whatever worker explored them and whenever,
and a block, like the family, stops at its first incomplete variant or past
the state cap; so the survey is the same for any number of workers, cut short
or not (but by the memory cap, which depends on each process's memory).
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.context import ForkContext
from typing import Any

from loopcheck.explorer.explore import (
    Caps,
    Exploration,
    FutureGraph,
    explore,
    explore_variant,
    family_size,
    fewer_collections,
    shifts_of,
    variant,
)
from loopcheck.explorer.figures import Survey
from loopcheck.explorer.head_tail import survey_of_variant
from loopcheck.explorer.liveness import Lasso, Liveness, analyse
from loopcheck.model.workload import Workload
from loopcheck.runctl.stop import Deadline

BLOCKS = 1024   # a family is folded in at most this many blocks
FORK_AFTER = 0.01   # seconds a survey runs on its own process before it starts workers ...
FORK_WORTH = 0.05   # ... if what is left is expected to take longer than this (seconds)
SEND_EVERY = 0.05   # seconds between a worker's messages (blocks are often tiny: the parent folds lists)
SHIELDED = {signal.SIGINT, signal.SIGTERM}   # signals a worker leaves to the parent
now = time.perf_counter   # the clock FORK_AFTER is read on (tests set their own)


Family = tuple[Workload, int, bool, Caps]   # workload, spread, reduce, caps


def plan(workload: Workload, spread: int) -> list[range]:
    """The family's blocks: consecutive ranges of bases (see `block_variants`),
    as many as BLOCKS allows, fixed by the family alone."""
    total = family_size(workload, spread)
    count = min(total, BLOCKS)
    return [range(b * total // count, (b + 1) * total // count) for b in range(count)]


def block_variants(workload: Workload, spread: int, bases: range) -> Iterator[tuple[int, int]]:
    """The variants of a block of bases, neighbours next to each other, each with
    its m: each base (a variant in which some request is not shifted; m = 0)
    followed by its translations (every request shifted m more, while the
    family has them), which reach the same futures. Every variant is one
    base's translation."""
    n = len(workload.requests)
    later = sum((spread + 1) ** k for k in range(n))   # shifts every request one step later
    for v in bases:
        shifts = shifts_of(v, n, spread)
        if min(shifts, default=0) == 0:
            for m in range(spread - max(shifts, default=spread) + 1):
                yield v + m * later, m


def translated(base: Survey, m: int, caps: Caps) -> Survey | None:
    """The survey of the variant whose requests all come m steps later than in
    `base`'s (m > 0), when base is complete and every state of it can drain (no
    non-progress cycle); else None (explore that variant). Its first m steps
    wait in the initial state (nothing is due before the first arrival); from
    step m on its states are base's, m steps later, with the same futures. So
    it has m more states, transitions, depth, states that can drain, and drain
    steps, and the same drained states and preemptions."""
    live = base.liveness
    if not base.complete or live.non_progress_sccs or base.states + m > caps.max_states:
        return None
    steps = None if live.worst_drain_steps is None else live.worst_drain_steps + m
    return Survey(base.states + m, base.transitions + m, base.depth + m, base.drained, True,
                  Liveness(False, None, 0, 0, live.can_drain + m, steps, live.worst_preemptions), 0.0, 0)


def _survey_of(ex: Exploration) -> Survey:
    return Survey(ex.states, ex.transitions, max(ex.depth, default=0), sum(ex.drained), ex.complete, analyse(ex),
                  ex.collision_probability, ex.states)


def survey_block(bases: range, family: Family, graph: FutureGraph,
                 progress: Callable[[int, int], None] | None = None, until: float | None = None) -> Fold | None:
    """A block's variants explored in `block_variants` order and folded; the block
    stops (`Fold.stopped`) at its first incomplete variant, or once its states
    pass the state cap or the process the memory cap. `progress(states,
    variants)` now and then, with the block's states so far (within a variant
    too) and its variants done. None: `now()` passed `until` between two
    variants (the block is left unfinished)."""
    workload, spread, reduce, caps = family
    fold = Fold()

    def within(n: int, _queue: int) -> None:
        if progress:
            progress(fold.states + n, fold.taken)
    base = None
    for v, m in block_variants(workload, spread, bases):
        part = translated(base, m, caps) if m else None
        if part is None:
            w = variant(workload, spread, v)
            part = survey_of_variant(w, reduce, caps, graph, within) or _survey_of(
                explore_variant(v, w, reduce, caps, graph, within))
        if not m:
            base = part
        fold.merge(Fold.of(part))
        within(0, 0)
        if until is not None and now() > until:
            return None
        if not part.complete or fold.states > caps.max_states or caps.passed():
            fold.stopped = True
            break
    return fold


def survey(workload: Workload, spread: int = 0, reduce: bool = True, max_states: int = 200_000,
           max_memory_mb: float | None = None, workers: int = 1,
           progress: Callable[[int, int], None] | None = None, merge: bool = False,
           deadline: Deadline | None = None) -> Survey:
    """Explore and analyse every variant (on `workers` fork processes when more
    than one), folded block by block in block order; cut short at the first
    block that stops (`survey_block`), past `max_states` states in all, or past
    the memory cap or `deadline` (`Caps`). `progress(states, variants left)` now and then (states so
    far, those of blocks under way included). Variants are built
    where they are explored, and their figures folded as they come, so memory
    does not grow with the family's size. With `merge` the family is one graph
    (`Exploration.merge`), explored and analysed on this process."""
    if merge:
        ex = explore(workload, max_states, spread, reduce, max_memory_mb, progress, merge=True, deadline=deadline)
        return _survey_of(ex)
    caps = Caps(max_states, max_memory_mb, deadline)
    family = (workload, spread, reduce, caps)
    blocks = plan(workload, spread)
    total = family_size(workload, spread)
    folded = Fold()
    found = _surveyed(family, blocks, workers, folded, total, progress)
    try:
        with fewer_collections():   # (in the workers too: they are forked inside)
            _fold_in_order(found, caps, folded)
    finally:
        found.close()   # ends any workers
    return folded.result(total, caps)


def _surveyed(family: Family, blocks: list[range], workers: int, folded: Fold, total: int,
              progress: Callable[[int, int], None] | None) -> Iterator[tuple[int, Fold]]:
    """Every block's fold, numbered, for `_fold_in_order` to fold into `folded`:
    explored on this process in block order and, once that has taken
    FORK_AFTER seconds with blocks left that are expected (from the variants
    done so far) to take longer than FORK_WORTH, the rest (the unfinished block
    again) on `workers` processes if more than one, which start from this
    process's graph (so a small family never waits for processes to start).
    `progress(states, variants left)` now and then."""
    def within(n: int, taken: int) -> None:
        if progress:
            progress(folded.states + n, total - folded.taken - taken)
    graph = FutureGraph()
    start = now()
    until = start + FORK_AFTER if workers > 1 and len(blocks) > 1 else None
    b = 0
    while b < len(blocks):
        found = survey_block(blocks[b], family, graph, within, until if len(blocks) - b > 1 else None)
        if found is None:
            spent = now() - start
            if folded.taken and spent * (total - folded.taken) / folded.taken < FORK_WORTH:
                until = None   # what is left is expected to take less than starting workers saves: finish here
                continue
            break
        yield b, found
        b += 1
    else:
        return
    states, taken = folded.states, folded.taken   # of the blocks before b, all folded by now

    def report(n: int, more: int) -> None:
        if progress:
            progress(states + n, total - taken - more)
    yield from _surveyed_in_parallel(family, blocks, b, min(workers, len(blocks) - b), graph, report)


def _fold_in_order(blocks: Iterable[tuple[int, Fold]], caps: Caps, folded: Fold) -> None:
    """Blocks, as they come (numbered, in any order), folded into `folded` in
    block order until one stops or the caps are passed."""
    waiting: dict[int, Fold] = {}
    following = 0   # the next block to fold
    for b, block in blocks:
        waiting[b] = block
        while following in waiting:
            block = waiting.pop(following)
            following += 1
            folded.merge(block)
            if block.stopped or folded.states > caps.max_states or caps.passed():
                return


class Claims:
    """Blocks handed out to workers so that each explores neighbouring blocks:
    workers pair up on equal ranges of blocks, one walking forward from the
    range's start, the other backward from its end, so the two meet once; a
    worker whose next block is taken moves to the middle of the longest run of
    untaken blocks and walks forward. Shared by fork processes."""

    def __init__(self, count: int, ctx: ForkContext) -> None:
        self.count = count
        self.taken = ctx.RawArray("b", count)
        self.lock = ctx.Lock()

    def start(self, k: int, workers: int) -> tuple[int, int]:
        """Worker k's first block and direction (+1 forward, -1 backward)."""
        pairs = (workers + 1) // 2
        lo, hi = k // 2 * self.count // pairs, (k // 2 + 1) * self.count // pairs
        return (lo, 1) if k % 2 == 0 else (hi - 1, -1)

    def next(self, position: int, direction: int) -> tuple[int | None, int, int]:
        """Take the block at `position` or, if it is taken, one elsewhere (None:
        all are taken); with the position and direction to go on from."""
        with self.lock:
            taken = self.taken
            if not (0 <= position < self.count) or taken[position]:
                run = self._longest_untaken()
                if not run:
                    return None, position, direction
                position, direction = run.start + len(run) // 2, 1
            taken[position] = 1
            return position, position + direction, direction

    def _longest_untaken(self) -> range:
        best, start = range(0), None
        for b in range(self.count + 1):
            free = b < self.count and not self.taken[b]
            if free and start is None:
                start = b
            elif not free and start is not None:
                if b - start > len(best):
                    best = range(start, b)
                start = None
        return best


def _surveyed_in_parallel(family: Family, blocks: list[range], first: int, workers: int, graph: FutureGraph,
                          report: Callable[[int, int], None]) -> Iterator[tuple[int, Fold]]:
    """The folds of blocks `first`.. on, numbered, as the worker processes
    finish them (until the consumer stops asking: then the workers are
    ended). Each worker starts from a copy of `graph`. `report(states,
    variants)` of these blocks, those under way included, after each message
    and every second. A worker's failure is raised here (RuntimeError)."""
    ctx = multiprocessing.get_context("fork")   # the workers inherit the family: only folds cross the pipes
    claims, results = Claims(len(blocks) - first, ctx), ctx.Queue()
    under_way = ctx.RawArray("q", 2 * workers)   # per worker: states and variants of its current block so far
    processes = [ctx.Process(target=_work, args=(k, workers, family, blocks[first:], first, graph, claims, results,
                                                 under_way), daemon=True) for k in range(workers)]
    came_states = came_variants = ended = 0
    try:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, SHIELDED)   # until a worker has its own handlers
        try:
            for p in processes:
                p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        while ended < workers:
            try:
                what, found = results.get(timeout=1.0)
            except queue.Empty:
                dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"a survey worker ended with exit code {dead[0]}") from None
            else:
                if what == "failed":
                    raise RuntimeError(f"a survey worker failed:\n{found}")
                ended += what == "ended"
                for b, block in found:
                    came_states, came_variants = came_states + block.states, came_variants + block.taken
                    yield b, block
            report(came_states + sum(under_way[0::2]), came_variants + sum(under_way[1::2]))
    finally:
        started = [p for p in processes if p.pid is not None]
        for p in started:
            p.terminate()
        for p in started:
            p.join()


def _work(k: int, workers: int, family: Family, blocks: list[range], first: int, graph: FutureGraph,
          claims: Claims, results: multiprocessing.Queue, under_way: Any) -> None:
    """Worker k: claims blocks and sends back their folds, numbered from
    `first`: ("blocks", a list of them) every SEND_EVERY seconds, ("ended",
    the last ones) when no block is left, or ("failed", the traceback); keeps
    its block's progress in `under_way`. Ctrl-C is left to the parent, which ends
    the workers; SIGTERM ends a worker quietly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SHIELDED)

    def within(states: int, variants: int) -> None:
        under_way[2 * k], under_way[2 * k + 1] = states, variants
    try:
        position, direction = claims.start(k, workers)
        done: list[tuple[int, Fold]] = []
        sent = time.perf_counter()
        while True:
            b, position, direction = claims.next(position, direction)
            if b is None:
                break
            done.append((first + b, survey_block(blocks[b], family, graph, within)))
            within(0, 0)
            if time.perf_counter() - sent > SEND_EVERY:
                results.put(("blocks", done))
                done, sent = [], time.perf_counter()
        results.put(("ended", done))
    except Exception:
        results.put(("failed", traceback.format_exc()))


class Fold:
    """Figures folded from variants' (`of`, `merge`), the same in any order:
    counts add up, the verdict is any variant's livelock, worst cases are the
    largest (known only when every variant's is), the lasso is the shortest
    (ties: the smallest variant number)."""

    def __init__(self) -> None:
        self.taken = self.states = self.explored = self.transitions = self.depth = self.drained = 0
        self.all_complete, self.worst_known = True, True
        self.stopped = False   # a block cut short (`survey_block`)
        self.lasso: Lasso | None = None
        self.sccs = self.unrealisable = self.can_drain = self.worst_steps = self.worst_preemptions = 0
        self.collision = 0.0

    @staticmethod
    def of(part: Survey) -> Fold:
        """One variant's figures."""
        fold, live = Fold(), part.liveness
        fold.taken, fold.states, fold.explored, fold.transitions, fold.depth, fold.drained = (
            1, part.states, part.explored, part.transitions, part.depth, part.drained)
        fold.all_complete, fold.lasso, fold.collision = part.complete, live.lasso, part.collision_probability
        fold.sccs, fold.unrealisable, fold.can_drain = live.non_progress_sccs, live.unrealisable_cycles, live.can_drain
        fold.worst_known = live.worst_drain_steps is not None and live.worst_preemptions is not None
        fold.worst_steps, fold.worst_preemptions = live.worst_drain_steps or 0, live.worst_preemptions or 0
        return fold

    def merge(self, other: Fold) -> None:
        """Fold `other`'s figures into these."""
        self.taken += other.taken
        self.states += other.states
        self.explored += other.explored
        self.transitions += other.transitions
        self.depth = max(self.depth, other.depth)
        self.drained += other.drained
        self.all_complete = self.all_complete and other.all_complete
        if other.lasso is not None and (self.lasso is None or (len(other.lasso.nodes), other.lasso.variant)
                                        < (len(self.lasso.nodes), self.lasso.variant)):
            self.lasso = other.lasso
        self.sccs += other.sccs
        self.unrealisable += other.unrealisable
        self.can_drain += other.can_drain
        self.worst_known = self.worst_known and other.worst_known
        self.worst_steps = max(self.worst_steps, other.worst_steps)
        self.worst_preemptions = max(self.worst_preemptions, other.worst_preemptions)
        self.collision += other.collision

    def result(self, total: int, caps: Caps) -> Survey:
        """The family's survey, `total` variants in all."""
        complete = self.taken == total and self.all_complete and self.states <= caps.max_states
        known = complete and self.sccs == 0 and self.worst_known
        liveness = Liveness(self.lasso is not None, self.lasso, self.sccs, self.unrealisable, self.can_drain,
                            self.worst_steps if known else None, self.worst_preemptions if known else None)
        return Survey(self.states, self.transitions, self.depth, self.drained, complete, liveness,
                      min(1.0, self.collision), self.explored)
