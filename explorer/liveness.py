"""Liveness on an explored graph: non-progress cycles, the shortest realisable
lasso, how many states can still drain, and worst-case drain figures.

Works on the compact graph of `model.explore.Exploration` (state numbers,
edges in arrays, each with its stop choices); the states and events of a lasso
are recomputed, on first use, from its root and the choices along it."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from loopcheck.explorer.explore import Exploration, Stops, canonical_successors, horizon_of, root_of
from loopcheck.model.events import Event
from loopcheck.model.state import SchedState
from loopcheck.model.workload import Workload

ENTRIES_TRIED = 50   # cycle entries of one component tried for a realisable lasso


@dataclass
class Lasso:
    """A path from a variant's root into a cycle; its states and steps are
    recomputed on first use (`replayed`) from the root and the choices along it."""

    variant: int         # the family's variant it lives in
    stem: list[int]      # root .. cycle entry (inclusive), state numbers
    cycle: list[int]     # entry .. back to entry (entry repeated at the end)
    stepped_with: list[Workload]   # per step along `nodes`, the variant it steps in (the first: the root's)
    choices: list[int]   # per step, the index of the state it leads to in `canonical_successors`
    reduce: bool

    @property
    def nodes(self) -> list[int]:
        return self.stem + self.cycle[1:]

    @cached_property
    def replayed(self) -> tuple[list[SchedState], list[tuple[list[Event], Stops]]]:
        """The states of `nodes`, and the events and stop choices of each step."""
        state = root_of(self.stepped_with[0], self.reduce)
        states, steps = [state], []
        for w, c in zip(self.stepped_with, self.choices, strict=True):
            state, events, stops = canonical_successors(state, w, horizon_of(w), self.reduce)[c]
            states.append(state)
            steps.append((events, stops))
        return states, steps

    @property
    def states(self) -> list[SchedState]:
        return self.replayed[0]

    @property
    def steps(self) -> list[tuple[list[Event], Stops]]:
        return self.replayed[1]


@dataclass
class Liveness:
    livelock: bool
    lasso: Lasso | None
    non_progress_sccs: int
    unrealisable_cycles: int
    can_drain: int
    worst_drain_steps: int | None
    worst_preemptions: int | None


def components(ex: Exploration) -> list[list[int]]:
    """Strongly connected components (Tarjan, iterative), each emitted after
    every component it reaches (reverse topological order)."""
    start, target, size = ex.edge_start, ex.target, ex.states
    index = [-1] * size
    low = [0] * size
    on_stack = bytearray(size)
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(size):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = 1
        work = [[root, start[root]]]
        while work:
            frame = work[-1]
            v, e = frame
            if e < start[v + 1]:
                frame[1] = e + 1
                w = target[e]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = 1
                    work.append([w, start[w]])
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work and low[v] < low[work[-1][0]]:
                low[work[-1][0]] = low[v]
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = 0
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def _stem(ex: Exploration, entry: int) -> list[int]:
    out = [entry]
    while ex.parent[out[-1]] >= 0:
        out.append(ex.parent[out[-1]])
    return out[::-1]


def _shortest_cycle(ex: Exploration, entry: int, members: set[int]) -> list[int]:
    """A shortest cycle through `entry` within its component (breadth-first)."""
    parents: dict[int, int] = {entry: -1}
    queue = deque([entry])
    while queue:
        node = queue.popleft()
        for e in ex.edges(node):
            nxt = ex.target[e]
            if nxt == entry:
                path = [node]
                while parents[path[-1]] >= 0:
                    path.append(parents[path[-1]])
                return path[::-1] + [entry]
            if nxt in members and nxt not in parents:
                parents[nxt] = node
                queue.append(nxt)
    raise AssertionError("a non-trivial component has a cycle through each member")


def _consistent(path: list[Stops]) -> bool:
    """Stop choices along the path (the cycle repeating forever) agree per token:
    greedy decoding makes the same token the same each time it is produced."""
    seen: dict[tuple[str, int], bool] = {}
    for stops in path:
        for key, value in stops.items():
            if seen.setdefault(key, value) != value:
                return False
    return True


def analyse(ex: Exploration) -> Liveness:
    """Non-progress components (a cycle not all drained), the shortest lasso whose
    stop choices are consistent, states that can reach a drained one, and, when
    the graph is complete and acyclic but for drained self-loops, the longest
    drain in steps and in preemptions."""
    forward = _forward_figures(ex)
    return forward if forward is not None else _component_figures(ex)


def _component_figures(ex: Exploration) -> Liveness:
    """`analyse` on any graph, over its strongly connected components."""
    lasso, sccs, unrealisable = None, 0, 0
    comps = components(ex)
    can_drain = bytearray(ex.states)
    acyclic = True
    start, target, drained = ex.edge_start, ex.target, ex.drained
    for comp in comps:
        # every component this one reaches was emitted before it: its can_drain is known
        reaches = any(drained[n] or any(map(can_drain.__getitem__, target[start[n]:start[n + 1]])) for n in comp)
        for n in comp:
            can_drain[n] = reaches
        looped = len(comp) > 1 or comp[0] in target[start[comp[0]]:start[comp[0] + 1]]
        if looped and not all(drained[n] for n in comp):
            sccs += 1
            found = _realisable_lasso(ex, comp)
            if found is None:
                unrealisable += 1
            elif lasso is None or len(found.nodes) < len(lasso.nodes):
                lasso = found
        acyclic = acyclic and len(comp) == 1
    worst_steps = worst_pre = None
    if sccs == 0 and ex.complete and acyclic:
        worst_steps, worst_pre = _longest_drains(ex, (n for (n,) in comps))
    return Liveness(lasso is not None, lasso, sccs, unrealisable, sum(can_drain), worst_steps, worst_pre)


def _forward_figures(ex: Exploration) -> Liveness | None:
    """`analyse`'s figures without components when every edge leads to a
    later-numbered state or is a drained state's self-loop (most explored
    graphs: numbering is then a topological order, every component is a single
    state and no cycle is a non-progress one); None when some edge does not."""
    start, target, drained = ex.edge_start, ex.target, ex.drained
    can_drain = bytearray(ex.states)
    for n in range(ex.states - 1, -1, -1):
        reaches = drained[n]
        for m in target[start[n]:start[n + 1]]:
            if m < n or (m == n and not drained[n]):
                return None
            reaches = reaches or can_drain[m]
        can_drain[n] = reaches
    worst_steps, worst_pre = _longest_drains(ex, range(ex.states - 1, -1, -1)) if ex.complete else (None, None)
    return Liveness(False, None, 0, 0, sum(can_drain), worst_steps, worst_pre)


def _realisable_lasso(ex: Exploration, comp: list[int]) -> Lasso | None:
    """The first of the component's nearest entries (by depth, then number)
    whose stem and shortest cycle have consistent stop choices."""
    members = set(comp)
    for entry in sorted(comp, key=lambda n: (ex.depth[n], n))[:ENTRIES_TRIED]:
        stem, cycle = _stem(ex, entry), _shortest_cycle(ex, entry, members)
        nodes = stem + cycle[1:]
        edges = [next(e for e in ex.edges(a) if ex.target[e] == b) for a, b in zip(nodes, nodes[1:], strict=False)]
        if _consistent([ex.stops(e) for e in edges]):
            return Lasso(ex.variant_ids[ex.variant_of(entry)], stem, cycle,
                         [ex.workloads[ex.variant_of(a)] for a in nodes[:-1]], [ex.choice[e] for e in edges],
                         ex.reduce)
    return None


def _longest_drains(ex: Exploration, order: Iterable[int]) -> tuple[int, int]:
    """Longest path in steps and in preemptions of the graph (acyclic but for
    drained self-loops), its states taken in `order`, a reverse topological
    order."""
    steps = [0] * ex.states
    pre = [0] * ex.states
    start, target, preemptions = ex.edge_start, ex.target, ex.preemptions
    for n in order:
        most_steps = most_pre = 0
        for e in range(start[n], start[n + 1]):
            m = target[e]
            if m != n:
                most_steps = max(most_steps, 1 + steps[m])
                most_pre = max(most_pre, preemptions[e] + pre[m])
        steps[n], pre[n] = most_steps, most_pre
    return max(steps, default=0), max(pre, default=0)
