"""Exhaustive exploration of the reference scheduler for small configurations.

The graph's nodes are numbered states of variants: a variant fixes each
request's arrival (the family enumerates arrival offsets); a state is the
model's state with the step counter capped once every request has arrived, so
steps that change nothing (stuttering) become self-loops. Edges are steps; the
environment's only scheduling-relevant choice, whether a decoded token is the
request's stop token, is enumerated (exit depths never influence scheduling, so
they are not). States are explored as nodes of the family's `FutureGraph`: a
node is a state but its step counter, with what is still to come (pending
arrivals and aborts, relative to the step), and its successors are computed
once for all states of all variants that share it. Nodes are told apart by a
stable 64-bit fingerprint, as TLC tells states apart: two different nodes
merge only on a fingerprint collision (of the states or of their futures), with
probability at most about n^2 / 2^64 for n nodes
(`Exploration.collision_probability`); within a variant, a state is exactly its
step and node.

Reduction (`reduce`; keeps every verdict and figure, tested): finished
requests are abstracted to a bare FINISHED record, since they can never
influence scheduling again; so a request's last token is no stop choice
(either way it finishes, into the same record), which saves model steps, not
states. Optional (`merge`): states of any variants and steps with the same
futures are one node (see `Exploration`); the verdict, worst cases and lasso
length stay (tested), the counts shrink. Capping bypass counts at max_bypasses
would be sound but merges nothing: the rules never let a count pass the limit.
Permuting requests with identical specs is NOT a symmetry here: the priority
key breaks ties by id, so ids order the scheduling pass.
"""

from __future__ import annotations

import bisect
import functools
import gc
import itertools
import resource
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from loopcheck.model.events import Event, TokenOutcome
from loopcheck.model.reference import step
from loopcheck.model.state import FINISHED, ReqState, SchedState, initial_state
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.runctl.stop import Deadline

CAPS_CHECK_EVERY = 256   # states between checks of the memory and time caps
PROGRESS_EVERY = 64   # states between calls of the progress callback (which decides by the clock whether to print)
YOUNG_COLLECTION_EVERY = 100_000   # allocations between the cyclic collector's young passes while exploring


@contextmanager
def fewer_collections() -> Iterator[None]:
    """The cyclic garbage collector's youngest generation collected every
    YOUNG_COLLECTION_EVERY allocations (Python's default: 700) until the block
    ends, then as before. Exploring allocates states, tuples and lists by the
    million and keeps few of them, none in cycles: with the default, the
    collector's passes over them take about 5% of a small family's time and
    free nothing. Memory is unaffected but for cycles freed later."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


class _ChoiceEnv:
    """Environment with scripted stop choices; records the tokens it was asked for."""

    def __init__(self, workload: Workload, stops: dict[tuple[str, int], bool]) -> None:
        self.workload = workload
        self.stops = stops
        self.asked: list[tuple[str, int]] = []

    def aborts(self, t: int) -> frozenset[str]:
        return self.workload.aborts_by_step.get(t, frozenset())

    def outcome(self, rid: str, index: int) -> TokenOutcome:
        self.asked.append((rid, index))
        spec = self.workload.by_id(rid)
        stop = spec.stop_token is not None and self.stops.get((rid, index), False)
        token = spec.stop_token if stop else (spec.stop_token or 0) + 1
        return TokenOutcome(token % self.workload.config.vocab_size, self.workload.config.num_loops)


def family_size(workload: Workload, spread: int) -> int:
    """How many variants the family has: every request's arrival shifted by
    0..spread, independently."""
    return (spread + 1) ** len(workload.requests)


def shifts_of(v: int, requests: int, spread: int) -> list[int]:
    """Each request's shift in variant v: the digits of v in base spread + 1,
    the first request's the most significant."""
    digits = []
    for _ in range(requests):
        v, digit = divmod(v, spread + 1)
        digits.append(digit)
    return digits[::-1]


def variant(workload: Workload, spread: int, v: int) -> Workload:
    """Variant v of the family: request k's arrival (and abort) shifted by
    `shifts_of(v, ...)[k]`."""
    if spread == 0:
        return workload
    shifts = shifts_of(v, len(workload.requests), spread)
    return Workload(workload.config, tuple(shifted(r, s) for r, s in zip(workload.requests, shifts, strict=True)))


@functools.lru_cache(maxsize=4096)
def shifted(r: RequestSpec, s: int) -> RequestSpec:
    """r with its arrival and abort s steps later (the variants of a family
    share these)."""
    return replace(r, arrival=r.arrival + s, abort_at=None if r.abort_at is None else r.abort_at + s)


FINISHED_RECORD = ReqState(status=FINISHED)   # a finished request, abstracted (`canonical`)


def canonical(state: SchedState, horizon: int, reduce: bool) -> SchedState:
    """The node of a state: step capped at the horizon; with `reduce`, finished
    requests (and their futility-guard entries) abstracted away."""
    reqs, guard = state.reqs, state.guard
    if reduce and any(r.status == FINISHED and r is not FINISHED_RECORD for r in reqs):
        reqs = tuple(FINISHED_RECORD if r.status == FINISHED else r for r in reqs)
    if reduce and guard:
        guard = frozenset(g for g in guard if reqs[g[0]].status != FINISHED)
    if state.step <= horizon and reqs is state.reqs and guard is state.guard:
        return state   # (already canonical: states are immutable)
    return SchedState(min(state.step, horizon), reqs, state.free, state.cache, guard)


Stops = Mapping[tuple[str, int], bool]   # a step's stop choices: (request, token index) -> stop
NO_STOPS: Stops = MappingProxyType({})    # (shared by every step without a choice)


def successors(state: SchedState, w: Workload, reduce: bool) -> list[tuple[SchedState, list[Event], Stops]]:
    """Every next state with its events and the stop choices that led there. With
    `reduce`, a request's last token is no choice: stop or not, it finishes the
    request, and `canonical` makes the two finished records one."""
    probe = _ChoiceEnv(w, {})
    nxt, events = step(state, probe)
    choosable = [(rid, index) for rid, index in probe.asked if w.by_id(rid).stop_token is not None
                 and not (reduce and index == w.by_id(rid).max_tokens - 1)]
    if not choosable:
        return [(nxt, events, NO_STOPS)]
    out = [(nxt, events, dict.fromkeys(choosable, False))]   # the probe made no token a stop token
    for bits in itertools.product((False, True), repeat=len(choosable)):
        if any(bits):
            stops = dict(zip(choosable, bits, strict=True))
            nxt, events = step(state, _ChoiceEnv(w, stops))
            out.append((nxt, events, stops))
    return out


Edge = tuple[int, int, int, int]   # a successor node, its index in `successors`, preemptions, stop choices' id


class FutureGraph:
    """The family's states up to their futures, numbered as found, each node's
    successors computed once (shared by the variants of a family, and by states
    of one variant at different steps).

    A step depends on the state without its step counter t, on the config, on
    the requests with arrivals and aborts reduced to the orders the arrivals
    give (`kind`), and on what is still to come: each pending request's
    arrival and each abort not yet due, relative to t (`Timing.to_come`). A node is
    all of that: the states of a node have the same successors (up to the step
    counter, t + 1 capped at the asking variant's horizon), events and stop
    choices. Past the horizon nothing is to come. Nodes are told apart by a
    stable 64-bit fingerprint over the kind, what is to come and the state's
    own 64-bit fingerprint (`SchedState.content_fingerprint`), so two
    different futures merge only when one of the two fingerprints collides
    (`pairs`: the pairs of nodes in the table now). `restart` forgets every
    node; callers restart between variants once it is `full`, which changes no
    result.

    Of what is to come, the step itself reads only what is due now (arrivals
    and aborts at t); the rest only shifts by one into the successors' futures.
    So model steps are computed once per kind, state (told apart by its
    fingerprint: a collision there is one of a node's) and what is due now, and
    shared by nodes that differ in later arrivals or aborts (`stepped`, `steps`).
    Each distinct set of stop choices of a step is kept once (`stop_table`,
    which a restart keeps: explorations refer to it by id). The nodes past the
    horizon (timeless: nothing is to come) also keep
    figures that `model.head_tail` works out once for all variants of a kind
    (`drains`, `tails`); a restart forgets them with the nodes.
    """

    LIMIT = 200_000

    def __init__(self) -> None:
        self.kinds: dict[tuple, int] = {}
        self.timeless: dict[RequestSpec, int] = {}        # a request -> `_timeless`
        self.timeless_ids: dict[RequestSpec, int] = {}    # a request at 0 without abort -> its number
        self.stop_table: list[Stops] = [NO_STOPS]         # each distinct stop choices once, by id (kept by restarts)
        self._stop_ids: dict[frozenset, int] = {frozenset(): 0}
        self.restarts = 0
        self._empty()

    def restart(self) -> None:
        """Forget every node."""
        self.restarts += 1
        self._empty()

    def _empty(self) -> None:
        self.ids: dict[int, int] = {}                   # fingerprint of a future -> node
        self.unexpanded: dict[int, tuple[SchedState, int]] = {}   # node -> one of its states, its fingerprint
        self.adjacent: list[tuple[Edge, ...] | None] = []   # node -> its successors, once known
        self.drained = bytearray()                      # node -> 1: every request finished
        self.stepped: dict[tuple, list[tuple[SchedState, int, int, int, int]]] = {}   # see the class doc
        self.drains: dict[int, tuple[int, int, int] | None] = {}   # timeless node -> `model.head_tail.drains`
        self.tails: dict[frozenset[int], object] = {}   # set of timeless nodes -> `model.head_tail.tail_of`

    @property
    def nodes(self) -> int:
        return len(self.adjacent)

    def full(self) -> bool:
        """Past LIMIT nodes, or LIMIT sets of entries in `tails` (so that memory
        does not grow with a family's size)."""
        return max(self.nodes, len(self.tails)) > self.LIMIT

    def pairs(self) -> int:
        """Pairs of nodes in the fingerprint table now."""
        return self.nodes * (self.nodes - 1) // 2

    def timing(self, w: Workload, reduce: bool) -> Timing:
        """What w's nodes are keyed by besides their states: a number for what
        decides w's steps besides the state and what is to come (its kind:
        config, requests but their arrivals and aborts, and the orders the
        arrivals give: priority order; with aborts, arrival order, which orders
        the aborts of a step), and w's arrivals and aborts."""
        indices = range(len(w.requests))
        order = tuple(sorted(indices, key=lambda i: w.requests[i].key))
        aborts = any(r.abort_at is not None for r in w.requests)
        arrivals = tuple(sorted(indices, key=lambda i: (w.requests[i].arrival, i))) if aborts else ()
        specs = tuple(self._timeless(r) for r in w.requests)
        return Timing(w, self.kinds.setdefault((w.config, specs, order, arrivals, reduce), len(self.kinds)))

    def _timeless(self, r: RequestSpec) -> int:
        """A number for r but its arrival and abort."""
        found = self.timeless.get(r)
        if found is None:
            found = self.timeless[r] = self.timeless_ids.setdefault(replace(r, arrival=0, abort_at=None),
                                                                     len(self.timeless_ids))
        return found

    def node(self, state: SchedState, t: int, timing: Timing, content: int | None = None) -> int:
        """The node of a (`canonical`) state of `timing`'s workload at step t (the
        state's own step counter is not read); `content`: the state's
        `content_fingerprint` when known."""
        if content is None:
            content = state.content_fingerprint()
        future = hash((timing.kind, timing.coming(t), content))
        n = self.ids.get(future)
        if n is None:
            n = self.ids[future] = len(self.adjacent)
            self.adjacent.append(None)
            self.unexpanded[n] = (state, content)
            self.drained.append(all(r.status == FINISHED for r in state.reqs))
        return n

    def successors(self, n: int, t: int, timing: Timing, reduce: bool) -> tuple[Edge, ...]:
        """Node n's successor nodes for a state of it at step t of `timing`'s
        workload, each once, in `successors` order of first appearance, with the
        index of the last stop choice leading there, the preemptions of that
        step and the id of its stop choices (in `stop_table`)."""
        found = self.adjacent[n]
        if found is None:
            some, fingerprint = self.unexpanded.pop(n)
            after = min(t + 1, timing.horizon)
            out: dict[int, tuple[int, int, int]] = {}
            for nxt, content, c, preempted, stop_id in self.steps(some, fingerprint, t, timing, reduce):
                out[self.node(nxt, after, timing, content)] = (c, preempted, stop_id)
            found = self.adjacent[n] = tuple((m, c, p, stop_id) for m, (c, p, stop_id) in out.items())
        return found

    def steps(self, state: SchedState, content: int, t: int, timing: Timing,
              reduce: bool) -> list[tuple[SchedState, int, int, int, int]]:
        """The `canonical_successors` of `state` (fingerprint `content`; its own
        step counter is not read) at step t of `timing`'s workload: each next
        state with its fingerprint, its index in `successors`, the step's
        preemptions and the id of its stop choices; computed once per kind,
        state and what is due now."""
        key = (timing.kind, timing.due(t), content)
        found = self.stepped.get(key)
        if found is None:
            state = SchedState(t, state.reqs, state.free, state.cache, state.guard)
            found = self.stepped[key] = [
                (nxt, nxt.content_fingerprint(), c, sum(e.kind == "preempt" for e in events), self._stop_id(stops))
                for c, (nxt, events, stops) in enumerate(canonical_successors(state, timing.workload, timing.horizon,
                                                                              reduce))]
        return found

    def _stop_id(self, stops: Stops) -> int:
        """The id of these stop choices in `stop_table` (added if new)."""
        key = frozenset(stops.items())
        found = self._stop_ids.get(key)
        if found is None:
            found = self._stop_ids[key] = len(self.stop_table)
            self.stop_table.append(stops)
        return found


class Timing:
    """A variant as its nodes are keyed (`FutureGraph.timing`): its kind, and
    what is to come at each step. In a state the variant reaches at step t the
    pending requests are exactly those that arrive at t or later (a request
    arrives in the step of its arrival), so what is to come is a function of t
    alone (`coming`, worked out once per step), and so is what is due now
    (`due`: all the step itself reads of it)."""

    def __init__(self, workload: Workload, kind: int) -> None:
        self.workload = workload
        self.kind = kind
        self.horizon = horizon_of(workload)
        self._coming: dict[int, tuple[int, ...]] = {}
        n, due = len(workload.requests), [[] for _ in range(self.horizon)]
        for i, r in enumerate(workload.requests):
            due[r.arrival].append(i)
            if r.abort_at is not None:
                due[r.abort_at].append(n + i)
        self._due = [tuple(sorted(d)) for d in due]

    def to_come(self, t: int) -> tuple[int, ...]:
        """Per request, steps from t until its arrival if it is still to come, and
        until its abort if not yet due (-1: nothing to come); nothing past the
        horizon."""
        if t >= self.horizon:
            return ()
        requests = self.workload.requests
        return tuple(r.arrival - t if r.arrival >= t else -1 for r in requests) \
            + tuple(-1 if r.abort_at is None or r.abort_at < t else r.abort_at - t for r in requests)

    def coming(self, t: int) -> tuple[int, ...]:
        """`to_come(t)`, worked out once."""
        found = self._coming.get(t)
        if found is None:
            found = self._coming[t] = self.to_come(t)
        return found

    def due(self, t: int) -> tuple[int, ...]:
        """What of `to_come(t)` is due now (its positions that are 0): request i
        arriving at t is i, its abort at t is n + i (n requests)."""
        return self._due[t] if t < self.horizon else ()


def canonical_successors(state: SchedState, w: Workload, horizon: int,
                         reduce: bool) -> list[tuple[SchedState, list[Event], Stops]]:
    """`successors`, each next state made `canonical`."""
    return [(canonical(nxt, horizon, reduce), events, stops) for nxt, events, stops in successors(state, w, reduce)]


def horizon_of(w: Workload) -> int:
    """The step after which time no longer matters (arrivals and aborts are done)."""
    times = [r.arrival for r in w.requests] + [r.abort_at for r in w.requests if r.abort_at is not None]
    return max(times, default=0) + 1


def root_of(w: Workload, reduce: bool) -> SchedState:
    """The initial state of variant w, made `canonical`."""
    return canonical(initial_state(w.config.num_blocks, len(w.requests)), horizon_of(w), reduce)


@dataclass(frozen=True)
class Caps:
    """Where exploration stops with an INCOMPLETE verdict: states in all, the
    process's peak memory (MiB) and a deadline (a survey's worker processes
    share it); None: no limit."""

    max_states: int = 200_000
    max_memory_mb: float | None = None
    deadline: Deadline | None = None

    def passed(self) -> bool:
        """Whether the memory or the time cap has been passed."""
        return ((self.max_memory_mb is not None and peak_memory_mb() > self.max_memory_mb)
                or (self.deadline is not None and self.deadline.over()))


def peak_memory_mb(children: bool = False) -> float:
    """Peak resident memory of this process, MiB; with `children`, of this
    process or any of its ended child processes (a survey's workers, once their
    pool is closed)."""
    who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) if children else (resource.RUSAGE_SELF,)
    return max(resource.getrusage(w).ru_maxrss for w in who) / 1024


@dataclass
class Exploration:
    """An explored family as a compact graph over state numbers.

    States are numbered as they are found: breadth-first within a variant,
    variants in order, so a variant's states are a contiguous range starting at
    its root, and states are expanded in number order. Of a visited state only
    its step and node are kept while its variant is explored (and nothing once
    it is done); a state, and a step's events, are recomputed when needed by
    replaying the breadth-first tree from the root (`Replay`). Each pair of
    states has at most one edge: several stop choices leading to the same state
    give one edge, with the last choice's index and its stop choices (an id in
    the graph of futures' `stop_table`: what `model.liveness` reads to tell a
    realisable cycle without replaying it).

    With `merge`, a state is one node with every state of the family (of any
    variant, at any step) that agrees with it on everything but the step counter
    and on what is still to come (`Timing.to_come`), i.e. has the same futures; a state
    keeps the number its first finder gave it, so an edge may lead into an
    earlier variant's range.
    """

    workloads: list[Workload]           # the explored variants
    variant_ids: list[int]              # each one's index in the family
    roots: list[int]                    # each one's first state
    reduce: bool
    parent: array = field(default_factory=lambda: array("i"))       # breadth-first parent; -1 at a root
    depth: array = field(default_factory=lambda: array("i"))        # steps from the root
    drained: bytearray = field(default_factory=bytearray)            # 1: every request finished
    edge_start: array = field(default_factory=lambda: array("q", [0]))   # state i's edges: [start[i], start[i+1])
    target: array = field(default_factory=lambda: array("i"))
    preemptions: array = field(default_factory=lambda: array("B"))  # preempt events of the step
    choice: array = field(default_factory=lambda: array("H"))       # index in `successors` of the step
    stop_ids: array = field(default_factory=lambda: array("I"))     # the step's stop choices, in `stop_table`
    stop_table: list[Stops] = field(default_factory=list)           # the graph of futures' (`FutureGraph`)
    complete: bool = True
    merge: bool = False
    merged: dict[int, int] = field(default_factory=dict)   # with merge: the family's nodes seen so far
    fingerprint_pairs: int = 0    # at least the pairs of nodes that could have collided while exploring

    @property
    def states(self) -> int:
        return len(self.parent)

    @property
    def transitions(self) -> int:
        return len(self.target)

    def edges(self, i: int) -> range:
        """Positions of state i's outgoing edges in `target`, `preemptions`, `choice`, `stop_ids`."""
        return range(self.edge_start[i], self.edge_start[i + 1])

    def stops(self, e: int) -> Stops:
        """The stop choices of edge e's step."""
        return self.stop_table[self.stop_ids[e]]

    def variant_of(self, i: int) -> int:
        """Position (in `workloads`) of the variant state i belongs to."""
        return bisect.bisect_right(self.roots, i) - 1

    def _explore_variant(self, v: int, w: Workload, caps: Caps, graph: FutureGraph,
                         progress: Callable[[int, int], None] | None) -> None:
        """Breadth-first exploration of one variant, appended; clears `complete`
        and stops at the caps. `progress(states, queue)` every PROGRESS_EVERY
        states. A state is a step and a node of `graph` (with `merge`, the node);
        without `merge`, a `full` graph is restarted first."""
        if not self.merge and graph.full():
            graph.restart()
        timing = graph.timing(w, self.reduce)
        horizon = timing.horizon
        pairs = graph.pairs()   # (with merge the graph never restarts: the pairs this variant adds are exact)
        looked = 1     # the root and every successor looked up: at least the nodes this variant made
        root_state = root_of(w, self.reduce)
        root_node = graph.node(root_state, root_state.step, timing)
        parent, depth, drained = self.parent, self.depth, self.drained
        target, choice, preemptions, edge_start = self.target, self.choice, self.preemptions, self.edge_start
        stop_ids, self.stop_table = self.stop_ids, graph.stop_table
        adjacent, drained_node = graph.adjacent, graph.drained     # (a restart replaces them, never mid-variant)
        root = states = len(parent)
        parent.append(-1)
        depth.append(0)
        drained.append(drained_node[root_node])
        states += 1
        self.workloads.append(w)
        self.variant_ids.append(v)
        self.roots.append(root)
        span = horizon + 1     # per variant, (step, node) is the number node * span + step
        seen = self.merged if self.merge else {}
        seen.setdefault(root_node if self.merge else root_node * span + root_state.step, root)
        queue: deque[tuple[int, int]] = deque([(root_state.step, root_node)])
        while queue:
            i = len(edge_start) - 1     # states are expanded in number order
            t, n = queue.popleft()
            step = min(t + 1, horizon)
            below = depth[i] + 1
            following = adjacent[n]
            if following is None:
                following = graph.successors(n, t, timing, self.reduce)
            looked += len(following)
            for m, c, preempted, stop_id in following:
                key = m if self.merge else m * span + step
                j = seen.get(key)
                if j is None:
                    if states >= caps.max_states:
                        self.complete = False
                        continue
                    j = seen[key] = states
                    states += 1
                    parent.append(i)
                    depth.append(below)
                    drained.append(drained_node[m])
                    queue.append((step, m))
                    if states % CAPS_CHECK_EVERY == 0 and caps.passed():
                        self.complete = False
                        break
                    if progress and states % PROGRESS_EVERY == 0:
                        progress(states, len(queue))
                target.append(j)
                choice.append(c)
                preemptions.append(preempted)
                stop_ids.append(stop_id)
            edge_start.append(len(target))
            if not self.complete:
                break
        edge_start.extend([len(target)] * (states + 1 - len(edge_start)))   # never expanded
        # merged: every pair of the one graph; else `variant_pairs`
        self.fingerprint_pairs += graph.pairs() - pairs if self.merge else variant_pairs(looked)

    @property
    def collision_probability(self) -> float:
        """An upper estimate of the chance that two different futures got the
        same fingerprint while this graph was explored (the same however the
        family's variants were spread over processes)."""
        return collision_chance(self.fingerprint_pairs)


def variant_pairs(looked: int) -> int:
    """At least the pairs of nodes that could have collided while one variant
    looked up `looked` nodes (its root and every successor) in a `FutureGraph`,
    not merged: at most `looked` new nodes, each beside at most LIMIT + looked
    others (a bound that does not depend on what other variants left in the
    graph)."""
    return looked * (FutureGraph.LIMIT + looked)


def collision_chance(pairs: int) -> float:
    """An upper estimate of the chance that two of `pairs` pairs of nodes got
    the same fingerprint: per pair, 2^-64 that their states' fingerprints
    collide plus 2^-64 that the fingerprints of their futures do."""
    return min(1.0, pairs / 2.0**63)


def explore_variant(v: int, w: Workload, reduce: bool, caps: Caps, graph: FutureGraph,
                    progress: Callable[[int, int], None] | None = None) -> Exploration:
    """Variant `v` (workload `w`) of a family explored on its own, up to
    `caps.max_states` states or the memory or time cap (then complete=False); `graph`
    may hold nodes of other variants of the family."""
    ex = Exploration([], [], [], reduce)
    ex._explore_variant(v, w, caps, graph, progress)
    return ex


def explore(workload: Workload, max_states: int = 200_000, spread: int = 0, reduce: bool = True,
            max_memory_mb: float | None = None, progress: Callable[[int, int], None] | None = None,
            merge: bool = False, deadline: Deadline | None = None) -> Exploration:
    """Every reachable state of every variant, each variant explored
    breadth-first in turn. Stops with complete=False past `max_states` states in
    all, the memory cap or `deadline` (`Caps`); `progress(states, queue)` is
    called now and then.
    (`model.survey` gives the verdict and figures of a family on several
    processes, variant by variant, deriving translated variants' figures.)
    `merge`: see `Exploration`."""
    caps = Caps(max_states, max_memory_mb, deadline)
    ex = Exploration([], [], [], reduce, merge=merge)
    graph = FutureGraph()
    with fewer_collections():
        for v in range(family_size(workload, spread)):
            ex._explore_variant(v, variant(workload, spread, v), caps, graph, progress)
            if not ex.complete:
                break
    return ex


class Replay:
    """States and steps of an exploration recomputed from the variant's root
    along the breadth-first tree (each state's successors computed at most once
    per Replay)."""

    def __init__(self, ex: Exploration) -> None:
        self.ex = ex
        self.known: dict[int, SchedState] = {}
        self.expanded: dict[int, list[tuple[SchedState, list[Event], Stops]]] = {}

    def state(self, i: int) -> SchedState:
        """State number i."""
        path = [i]
        while path[-1] not in self.known and self.ex.parent[path[-1]] >= 0:
            path.append(self.ex.parent[path[-1]])
        if path[-1] not in self.known:
            self.known[path[-1]] = root_of(self.ex.workloads[self.ex.variant_of(i)], self.ex.reduce)
        chain = path[::-1]
        for a, b in zip(chain, chain[1:], strict=False):
            self.known[b] = self._successor(a, b)[0]
        return self.known[i]

    def step(self, a: int, b: int) -> tuple[list[Event], Stops]:
        """The events and stop choices of the edge from state a to state b."""
        _, events, stops = self._successor(a, b)
        return events, stops

    def _successor(self, a: int, b: int) -> tuple[SchedState, list[Event], Stops]:
        ex = self.ex
        c = next(ex.choice[e] for e in ex.edges(a) if ex.target[e] == b)
        w = ex.workloads[ex.variant_of(a)]
        if a not in self.expanded:
            self.expanded[a] = canonical_successors(self.state(a), w, horizon_of(w), ex.reduce)
        return self.expanded[a][c]
