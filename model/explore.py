"""Exhaustive exploration of the reference scheduler for small configurations.

The graph's nodes are (variant, state): a variant fixes each request's arrival
(the family enumerates arrival offsets); a state is the model's state with the
step counter capped once every request has arrived, so steps that change
nothing (stuttering) become self-loops. Edges are steps; the environment's only
scheduling-relevant choice, whether a decoded token is the request's stop token,
is enumerated (exit depths never influence scheduling, so they are not).

Reduction: finished requests are abstracted to a bare FINISHED record, since
they can never influence scheduling again. Permuting requests with identical
specs is NOT a symmetry here: the priority key breaks ties by id, so ids order
the scheduling pass.
"""

from __future__ import annotations

import itertools
import resource
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import networkx as nx

from model.events import Event, TokenOutcome
from model.reference import step
from model.state import FINISHED, ReqState, SchedState, initial_state
from model.workload import Workload

Node = tuple[int, SchedState]
PROGRESS_EVERY = 5000   # states between progress reports and memory checks


class _ChoiceEnv:
    """Environment with scripted stop choices; records the tokens it was asked for."""

    def __init__(self, workload: Workload, stops: dict[tuple[str, int], bool]) -> None:
        self.workload = workload
        self.stops = stops
        self.asked: list[tuple[str, int]] = []

    def aborts(self, t: int) -> frozenset[str]:
        return frozenset(r.rid for r in self.workload.requests if r.abort_at == t)

    def outcome(self, rid: str, index: int) -> TokenOutcome:
        self.asked.append((rid, index))
        spec = self.workload.by_id(rid)
        stop = spec.stop_token is not None and self.stops.get((rid, index), False)
        token = spec.stop_token if stop else (spec.stop_token or 0) + 1
        return TokenOutcome(token % self.workload.config.vocab_size, self.workload.config.num_loops)


@dataclass
class Exploration:
    graph: nx.DiGraph
    initial: list[Node]
    complete: bool
    drained: set[Node] = field(default_factory=set)

    @property
    def states(self) -> int:
        return self.graph.number_of_nodes()

    @property
    def transitions(self) -> int:
        return self.graph.number_of_edges()


def variants(workload: Workload, spread: int) -> list[Workload]:
    """The family: every request's arrival shifted by 0..spread."""
    if spread == 0:
        return [workload]
    out = []
    for shifts in itertools.product(range(spread + 1), repeat=len(workload.requests)):
        reqs = tuple(replace(r, arrival=r.arrival + s,
                             abort_at=None if r.abort_at is None else r.abort_at + s)
                     for r, s in zip(workload.requests, shifts, strict=True))
        out.append(Workload(workload.config, reqs))
    return out


def canonical(state: SchedState, horizon: int, reduce: bool) -> SchedState:
    """The node key of a state: step capped at the horizon; with `reduce`, finished
    requests (and their futility-guard entries) abstracted away."""
    reqs, guard = state.reqs, state.guard
    if reduce:
        reqs = tuple(ReqState(status=FINISHED) if r.status == FINISHED else r for r in reqs)
        guard = frozenset(g for g in guard if reqs[g[0]].status != FINISHED)
    return SchedState(min(state.step, horizon), reqs, state.free, state.cache, guard)


def successors(state: SchedState, w: Workload) -> list[tuple[SchedState, list[Event], dict]]:
    """Every next state with its events and the stop choices that led there."""
    probe = _ChoiceEnv(w, {})
    nxt, events = step(state, probe)
    choosable = [key for key in probe.asked if w.by_id(key[0]).stop_token is not None]
    if not choosable:
        return [(nxt, events, {})]
    out = [(nxt, events, dict.fromkeys(choosable, False))]   # the probe made no token a stop token
    for bits in itertools.product((False, True), repeat=len(choosable)):
        if any(bits):
            stops = dict(zip(choosable, bits, strict=True))
            nxt, events = step(state, _ChoiceEnv(w, stops))
            out.append((nxt, events, stops))
    return out


def horizon_of(w: Workload) -> int:
    """The step after which time no longer matters (arrivals and aborts are done)."""
    times = [r.arrival for r in w.requests] + [r.abort_at for r in w.requests if r.abort_at is not None]
    return max(times, default=0) + 1


@dataclass
class Part:
    """One variant explored: its nodes (with BFS depth), edges (with attributes),
    and whether it finished within the caps."""

    nodes: list[tuple[Node, int]]
    edges: list[tuple[Node, Node, dict]]
    complete: bool


@dataclass(frozen=True)
class Caps:
    """Where exploration stops with an INCOMPLETE verdict: states in all, and the
    process's peak memory (MiB; None: no limit)."""

    max_states: int = 200_000
    max_memory_mb: float | None = None

    def memory_exceeded(self) -> bool:
        return self.max_memory_mb is not None and peak_memory_mb() > self.max_memory_mb


def peak_memory_mb() -> float:
    """Peak resident memory of this process, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def explore_variant(v: int, w: Workload, reduce: bool, caps: Caps,
                    progress: Callable[[int, int], None] | None = None) -> Part:
    """Breadth-first exploration of one variant's reachable states, up to
    `caps.max_states` states or the memory cap; `progress(states, queue)` is
    called every PROGRESS_EVERY states."""
    horizon = horizon_of(w)
    root = (v, canonical(initial_state(w.config.num_blocks, len(w.requests)), horizon, reduce))
    seen: dict[Node, tuple[Node, int]] = {root: (root, 0)}   # the one stored object per state, and its depth
    edges: list[tuple[Node, Node, dict]] = []
    queue: deque[Node] = deque([root])
    complete = True
    while queue:
        node = queue.popleft()
        for nxt, events, stops in successors(node[1], w):
            found = (v, canonical(nxt, horizon, reduce))
            known = seen.get(found)
            if known is not None:
                target = known[0]      # later lookups of the stored object match by identity
            elif len(seen) >= caps.max_states:
                complete = False
                continue
            else:
                target = found
                seen[target] = (target, seen[node][1] + 1)
                queue.append(target)
                if len(seen) % PROGRESS_EVERY == 0:
                    if caps.memory_exceeded():
                        return Part(list(seen.values()), edges, False)
                    if progress:
                        progress(len(seen), len(queue))
            edges.append((node, target, dict(events=events, stops=stops,
                                             preemptions=sum(e.kind == "preempt" for e in events))))
    return Part(list(seen.values()), edges, complete)


def explore(workload: Workload, max_states: int = 200_000, spread: int = 0, reduce: bool = True,
            max_memory_mb: float | None = None, progress: Callable[[int, int], None] | None = None) -> Exploration:
    """The graph of every reachable (variant, state), each variant explored
    breadth-first on its own and added in variant order. Stops with
    complete=False past `max_states` states in all or the memory cap;
    `progress(states, queue)` is called now and then. (`model.survey` gives the
    verdict and figures of a family on several processes without the graph.)"""
    caps = Caps(max_states, max_memory_mb)
    graph = nx.DiGraph()
    initial: list[Node] = []
    complete = True
    inner = (lambda n, q: progress(graph.number_of_nodes() + n, q)) if progress else None
    for v, w in enumerate(variants(workload, spread)):
        part = explore_variant(v, w, reduce, caps, inner)
        if not part.complete or graph.number_of_nodes() + len(part.nodes) > max_states or caps.memory_exceeded():
            complete = False
            break
        add_part(graph, part)
        initial.append(part.nodes[0][0])
    return Exploration(graph, initial, complete, drained_nodes(graph))


def add_part(graph: nx.DiGraph, part: Part) -> None:
    for node, depth in part.nodes:
        graph.add_node(node, depth=depth)
    graph.add_edges_from(part.edges)


def drained_nodes(graph: nx.DiGraph) -> set[Node]:
    return {n for n in graph if all(r.status == FINISHED for r in n[1].reqs)}


def exploration_of(part: Part) -> Exploration:
    """One explored variant as an Exploration of its own."""
    graph = nx.DiGraph()
    add_part(graph, part)
    return Exploration(graph, [part.nodes[0][0]], part.complete, drained_nodes(graph))
