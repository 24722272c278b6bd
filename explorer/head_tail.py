"""A variant's survey figures from its head and its kind's tail, without
building its graph (`model.explore.Exploration`), when it drains from every
state.

A variant's states before its horizon H (the head) are at step t exactly t
steps from the root, and the head is acyclic; from step H on (the tail) time no
longer matters, so a tail state is a timeless node of the `FutureGraph`, shared
by every variant of the kind. What a variant's tail is follows from the nodes
its head enters at step H (its entries), so the tail's figures are worked out
once per set of entries (`tail_of`) and the drain figures of each timeless node
once (`drains`); the head is explored breadth-first over its states' own
fingerprints (at a step, a state's future is fixed by the step). Where the
tail has a cycle (a livelock to report as a lasso) or a cap is passed, the
variant is explored as a graph instead (`survey_of_variant` returns None).
Tested equal, figure for figure, to exploring and analysing every variant.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from loopcheck.explorer.explore import (
    CAPS_CHECK_EVERY,
    PROGRESS_EVERY,
    Caps,
    FutureGraph,
    Timing,
    collision_chance,
    root_of,
    variant_pairs,
)
from loopcheck.explorer.figures import Survey
from loopcheck.explorer.liveness import Liveness
from loopcheck.model.state import FINISHED
from loopcheck.model.workload import Workload

Drain = tuple[int, int, int]   # can drain (0 or 1), most steps, most preemptions from a state till drained


@dataclass(frozen=True)
class Tail:
    """The figures of the timeless nodes reachable from a set of entries."""

    states: int
    transitions: int
    drained: int
    can_drain: int
    eccentricity: int   # the most steps from the nearest entry to a node of the tail


def survey_of_variant(w: Workload, reduce: bool, caps: Caps, graph: FutureGraph,
                      progress: Callable[[int, int], None] | None = None) -> Survey | None:
    """Variant `w`'s survey, the same as exploring and analysing its graph; None
    when its tail has a cycle, or its states pass `caps.max_states`, or the
    process the memory cap (explore it then). `progress(states, queue)` every
    PROGRESS_EVERY states of the head, and for each node of the tail it expands
    (with queue 0; the callback decides by the clock whether to print). A `full`
    graph is restarted first, as exploring does."""
    if graph.full():
        graph.restart()
    timing = graph.timing(w, reduce)
    head = _Head(graph, timing, reduce)
    if not head.explore(caps, progress):
        return None
    tail_nodes = itertools.count(1)
    expanded = None if progress is None else lambda: progress(head.states + next(tail_nodes), 0)
    tail = tail_of(graph, frozenset(head.entries), timing, reduce, expanded, caps)
    if tail is None or head.states + tail.states > caps.max_states or caps.passed():
        return None
    can_drain, steps, preemptions = head.drain_figures()
    states, transitions = head.states + tail.states, head.transitions + tail.transitions
    return Survey(states, transitions, timing.horizon + tail.eccentricity, sum(head.drained) + tail.drained, True,
                  Liveness(False, None, 0, 0, can_drain + tail.can_drain, steps, preemptions),
                  collision_chance(variant_pairs(1 + transitions)), states)


class _Head:
    """A variant's states before its horizon, numbered breadth-first (so by
    step: a head state at step t is t steps from the root), with their edges;
    an edge's target is a head state's number, or ~node for an entry."""

    def __init__(self, graph: FutureGraph, timing: Timing, reduce: bool) -> None:
        self.graph, self.timing, self.reduce = graph, timing, reduce
        self.drained = bytearray()
        self.edge_start = [0]
        self.target: list[int] = []
        self.preemptions: list[int] = []
        self.entries: set[int] = set()   # the nodes of the states at the horizon

    @property
    def states(self) -> int:
        return len(self.drained)

    @property
    def transitions(self) -> int:
        return len(self.target)

    def explore(self, caps: Caps, progress: Callable[[int, int], None] | None) -> bool:
        """Every head state and edge; False past `caps.max_states` head states or
        the memory cap."""
        graph, timing, reduce, horizon = self.graph, self.timing, self.reduce, self.timing.horizon
        root = root_of(timing.workload, reduce)
        level = [(root, root.content_fingerprint())]   # the states at step t, in number order
        target, preemptions, edge_start, drained = self.target, self.preemptions, self.edge_start, self.drained
        for t in range(horizon):
            following: dict[int, int] = {}   # fingerprint of a state at t + 1 -> its number (or ~node)
            found = []
            first = self.states + len(level)   # the number of the first state at t + 1
            for state, content in level:
                drained.append(all(r.status == FINISHED for r in state.reqs))
                out: dict[int, int] = {}   # target -> the preemptions of the last step leading there
                for nxt, next_content, _, preempted, _ in graph.steps(state, content, t, timing, reduce):
                    j = following.get(next_content)
                    if j is None:
                        if t + 1 == horizon:
                            self.entries.add(entry := graph.node(nxt, horizon, timing, next_content))
                            j = ~entry
                        else:
                            j = first + len(found)
                            found.append((nxt, next_content))
                        following[next_content] = j
                    out[j] = preempted
                target.extend(out)
                preemptions.extend(out.values())
                edge_start.append(len(target))
            if self.states + len(found) > caps.max_states:
                return False
            if self.states // CAPS_CHECK_EVERY != (self.states + len(found)) // CAPS_CHECK_EVERY and \
                    caps.passed():
                return False
            if progress and self.states // PROGRESS_EVERY != (self.states + len(found)) // PROGRESS_EVERY:
                progress(self.states + len(found), len(found))
            level = found
        return True

    def drain_figures(self) -> tuple[int, int, int]:
        """Head states that can drain, and the most steps and preemptions to a
        drained state from the root (which reaches every state, so these are
        the most from any), entries' figures from `drains`."""
        graph, start, target, preemptions = self.graph, self.edge_start, self.target, self.preemptions
        figures: list[Drain] = [(0, 0, 0)] * self.states
        for i in range(self.states - 1, -1, -1):   # edges lead to later states
            can, steps, most = self.drained[i], 0, 0
            for e in range(start[i], start[i + 1]):
                j = target[e]
                can_j, steps_j, most_j = figures[j] if j >= 0 else graph.drains[~j]
                can, steps, most = can | can_j, max(steps, 1 + steps_j), max(most, preemptions[e] + most_j)
            figures[i] = (can, steps, most)
        return sum(can for can, _, _ in figures), figures[0][1], figures[0][2]


def tail_of(graph: FutureGraph, entries: frozenset[int], timing: Timing, reduce: bool,
            expanded: Callable[[], None] | None = None, caps: Caps | None = None) -> Tail | None:
    """The figures of the nodes reachable from `entries` (timeless nodes of
    `timing`'s kind); None when one of them reaches a cycle (other than a
    drained node's self-loop), or when `caps`' memory or time cap passed while
    it expanded nodes. Worked out once per set of entries (per graph).
    `expanded()` after each node it expands."""
    if entries in graph.tails:
        return graph.tails[entries]
    try:
        cyclic = any(drains(graph, n, timing, reduce, expanded, caps) is None for n in sorted(entries))
    except CapsPassed:
        return None   # (nothing kept for `entries`; the nodes `drains` finished keep their sound figures)
    if cyclic:
        found = None
    else:
        distance = dict.fromkeys(sorted(entries), 0)
        order = list(distance)
        transitions = 0
        for n in order:   # breadth-first from every entry at once
            out = graph.adjacent[n]   # (`drains` expanded every node reachable)
            transitions += len(out)
            for m, _, _, _ in out:
                if m not in distance:
                    distance[m] = distance[n] + 1
                    order.append(m)
        found = Tail(len(order), transitions, sum(graph.drained[n] for n in order),
                     sum(graph.drains[n][0] for n in order), distance[order[-1]])
    graph.tails[entries] = found
    return found


class CapsPassed(Exception):
    """`drains` stopped: the memory or time cap passed (`Caps.passed`)."""


def drains(graph: FutureGraph, node: int, timing: Timing, reduce: bool,
           expanded: Callable[[], None] | None = None, caps: Caps | None = None) -> Drain | None:
    """Whether timeless node `node` can reach a drained node, and the most steps
    and preemptions of a path from it to one (a drained node's self-loop is no
    step); None when it reaches a cycle other than such a self-loop. Worked out
    once per node (per graph), by a depth-first search that expands the nodes
    it reaches; `expanded()` after each node it expands (each costs model
    steps, so the call is nothing beside it). Raises CapsPassed once `caps`'
    memory or time cap has passed (looked at every CAPS_CHECK_EVERY nodes
    expanded); only nodes whose search ended keep figures."""
    memo, adjacent, drained = graph.drains, graph.adjacent, graph.drained
    if node in memo:
        return memo[node]
    expansions = itertools.count(1)

    def frame(n: int) -> list:   # node, its edges, next edge, can drain, most steps, most preemptions, cyclic
        out = adjacent[n]
        if out is None:
            out = graph.successors(n, timing.horizon, timing, reduce)
            if expanded is not None:
                expanded()
            if caps is not None and next(expansions) % CAPS_CHECK_EVERY == 0 and caps.passed():
                raise CapsPassed
        return [n, out, 0, drained[n], 0, 0, False]

    def add(into: list, found: Drain | None, preempted: int) -> None:
        if found is None:
            into[6] = True
        else:
            into[3] |= found[0]
            into[4] = max(into[4], 1 + found[1])
            into[5] = max(into[5], preempted + found[2])
    path, stack = {node}, [frame(node)]
    while stack:
        top = stack[-1]
        n, out, k = top[0], top[1], top[2]
        if k < len(out):
            top[2] = k + 1
            m, _, preempted, _ = out[k]
            if m == n:
                top[6] = top[6] or not drained[n]
            elif m in path:
                top[6] = True
            elif m in memo:
                add(top, memo[m], preempted)
            else:
                path.add(m)
                stack.append(frame(m))
            continue
        stack.pop()
        path.discard(n)
        memo[n] = found = None if top[6] else (top[3], top[4], top[5])
        if stack:
            below = stack[-1]
            add(below, found, below[1][below[2] - 1][2])
    return memo[node]
