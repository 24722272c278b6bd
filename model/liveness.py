"""Liveness on an explored graph: non-progress cycles, the shortest realisable
lasso, how many states can still drain, and worst-case drain figures."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import networkx as nx

from model.explore import Exploration, Node


@dataclass
class Lasso:
    stem: list[Node]     # initial node .. cycle entry (inclusive)
    cycle: list[Node]    # entry .. back to entry (entry repeated at the end)

    @property
    def nodes(self) -> list[Node]:
        return self.stem + self.cycle[1:]


@dataclass
class Liveness:
    livelock: bool
    lasso: Lasso | None
    non_progress_sccs: int
    unrealisable_cycles: int
    can_drain: int
    worst_drain_steps: int | None
    worst_preemptions: int | None


def _path(parents: dict[Node, Node | None], end: Node) -> list[Node]:
    out = [end]
    parent = parents[end]
    while parent is not None:
        out.append(parent)
        parent = parents[parent]
    return out[::-1]


def _bfs(graph: nx.DiGraph, sources: list[Node], allowed: set[Node] | None = None) -> dict[Node, Node | None]:
    parents: dict[Node, Node | None] = {s: None for s in sources}
    queue = deque(sources)
    while queue:
        node = queue.popleft()
        for nxt in graph.successors(node):
            if nxt not in parents and (allowed is None or nxt in allowed):
                parents[nxt] = node
                queue.append(nxt)
    return parents


def _shortest_cycle(graph: nx.DiGraph, entry: Node, scc: set[Node]) -> list[Node]:
    if graph.has_edge(entry, entry):
        return [entry, entry]
    parents = _bfs(graph, [entry], scc)
    best = min((p for p in graph.predecessors(entry) if p in parents), key=lambda p: len(_path(parents, p)))
    return _path(parents, best) + [entry]


def _consistent(graph: nx.DiGraph, nodes: list[Node]) -> bool:
    """Stop choices along the path (the cycle repeating forever) agree per token:
    greedy decoding makes the same token the same each time it is produced."""
    seen: dict[tuple[str, int], bool] = {}
    for a, b in zip(nodes, nodes[1:], strict=False):
        for key, value in graph.edges[a, b]["stops"].items():
            if seen.setdefault(key, value) != value:
                return False
    return True


def analyse(ex: Exploration) -> Liveness:
    graph = ex.graph
    stem_parents = _bfs(graph, ex.initial)
    lasso, sccs, unrealisable = None, 0, 0
    for scc in nx.strongly_connected_components(graph):
        node = next(iter(scc))
        if (len(scc) == 1 and not graph.has_edge(node, node)) or scc <= ex.drained:
            continue
        sccs += 1
        for entry in sorted(scc, key=lambda n: len(_path(stem_parents, n)))[:50]:
            candidate = Lasso(_path(stem_parents, entry), _shortest_cycle(graph, entry, scc))
            if _consistent(graph, candidate.nodes):
                if lasso is None or len(candidate.nodes) < len(lasso.nodes):
                    lasso = candidate
                break
        else:
            unrealisable += 1
    can_drain = len(ex.drained | set().union(*(nx.ancestors(graph, d) for d in ex.drained))) if ex.drained else 0
    worst_steps = worst_pre = None
    if sccs == 0 and ex.complete:
        dag = graph.copy()
        dag.remove_edges_from([(n, n) for n in ex.drained if dag.has_edge(n, n)])
        if nx.is_directed_acyclic_graph(dag):
            worst_steps = nx.dag_longest_path_length(dag, weight=None)
            worst_pre = nx.dag_longest_path_length(dag, weight="preemptions", default_weight=0)
    return Liveness(lasso is not None, lasso, sccs, unrealisable, can_drain, worst_steps, worst_pre)
