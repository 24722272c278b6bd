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
from collections import deque
from dataclasses import dataclass, field, replace

import networkx as nx

from model.events import Event, TokenOutcome
from model.reference import step
from model.state import FINISHED, ReqState, SchedState, initial_state
from model.workload import Workload

Node = tuple[int, SchedState]


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
    return replace(state, step=min(state.step, horizon), reqs=reqs, guard=guard)


def successors(state: SchedState, w: Workload) -> list[tuple[SchedState, list[Event], dict]]:
    """Every next state with its events and the stop choices that led there."""
    probe = _ChoiceEnv(w, {})
    nxt, events = step(state, probe)
    choosable = [key for key in probe.asked if w.by_id(key[0]).stop_token is not None]
    if not choosable:
        return [(nxt, events, {})]
    out = []
    for bits in itertools.product((False, True), repeat=len(choosable)):
        stops = dict(zip(choosable, bits, strict=True))
        nxt, events = step(state, _ChoiceEnv(w, stops))
        out.append((nxt, events, stops))
    return out


def horizon_of(w: Workload) -> int:
    """The step after which time no longer matters (arrivals and aborts are done)."""
    times = [r.arrival for r in w.requests] + [r.abort_at for r in w.requests if r.abort_at is not None]
    return max(times, default=0) + 1


def explore(workload: Workload, max_states: int = 200_000, spread: int = 0,
            reduce: bool = True) -> Exploration:
    """Breadth-first exploration of every reachable (variant, state)."""
    family = variants(workload, spread)
    graph = nx.DiGraph()
    initial: list[Node] = []
    queue: deque[Node] = deque()
    for v, w in enumerate(family):
        node = (v, canonical(initial_state(w.config.num_blocks, len(w.requests)), horizon_of(w), reduce))
        initial.append(node)
        graph.add_node(node, depth=0)
        queue.append(node)
    complete = True
    while queue:
        node = queue.popleft()
        v, state = node
        w = family[v]
        for nxt, events, stops in successors(state, w):
            target = (v, canonical(nxt, horizon_of(w), reduce))
            if target not in graph:
                if graph.number_of_nodes() >= max_states:
                    complete = False
                    continue
                graph.add_node(target, depth=graph.nodes[node]["depth"] + 1)
                queue.append(target)
            graph.add_edge(node, target, events=events, stops=stops,
                           preemptions=sum(e.kind == "preempt" for e in events))
    drained = {n for n in graph if all(r.status == FINISHED for r in n[1].reqs)}
    return Exploration(graph, initial, complete, drained)
