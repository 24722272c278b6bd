"""A variant's survey from its explored head and its kind's shared tail
(`model.head_tail`) is the survey of its whole explored graph."""

from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import pytest

from loopcheck.explorer.explore import Caps, Exploration, FutureGraph, explore_variant, family_size, variant
from loopcheck.explorer.head_tail import Tail, drains, survey_of_variant, tail_of
from loopcheck.explorer.liveness import components
from loopcheck.explorer.survey import _survey_of
from loopcheck.fuzz.directed import draw_workloads
from loopcheck.fuzz.strategies import workloads
from loopcheck.model.workload import load_workload
from tests.helpers import five_requests
from tests.test_explore import aborted_b, small_b

EXAMPLES = Path(__file__).parent.parent / "examples"


def loops(ex: Exploration) -> bool:
    """Whether the graph has a cycle other than a drained state's self-loop."""
    return any(len(comp) > 1 or (not ex.drained[comp[0]] and comp[0] in ex.target[ex.edges(comp[0]).start:
                                                                                   ex.edges(comp[0]).stop])
               for comp in components(ex))


@pytest.mark.parametrize("limit", [FutureGraph.LIMIT, 5])
def test_head_and_tail_give_the_explored_variants_figures(limit, monkeypatch) -> None:
    """On random small families (every config switch, aborts, stop tokens) and
    pinned ones, every variant surveyed on one graph shared by the family (so
    tails are reused across variants; with a tiny LIMIT the graph starts over
    every variant) has exactly the figures of its own explored and analysed
    graph, or is None exactly when that graph loops or passes the state cap."""
    monkeypatch.setattr(FutureGraph, "LIMIT", limit)
    drawn = draw_workloads(workloads(max_requests=4, max_prompt=4, max_tokens=3, max_arrival=3), seed=13, count=60)
    pinned = [five_requests(), small_b(), small_b("unguarded"), aborted_b(),
              load_workload(EXAMPLES / "livelock_min.json")]
    caps = Caps(max_states=25)
    split = looped = capped = 0
    for w in drawn + pinned:
        shared = FutureGraph()
        for v in range(family_size(w, 2)):
            member = variant(w, 2, v)
            ex = explore_variant(v, member, True, caps, FutureGraph())
            found = survey_of_variant(member, True, caps, shared)
            if found is None:
                assert not ex.complete or loops(ex)
                looped += ex.complete
                capped += not ex.complete
            else:
                assert ex.complete and not loops(ex)
                assert found == _survey_of(ex)
                split += 1
    assert split >= 1000 and looped >= 10 and capped >= 10   # each way exercised (split: 1470 measured)


def test_tail_figures_on_hand_made_graphs() -> None:
    """`drains` and `tail_of` on random graphs of timeless nodes (every node
    expanded beforehand, so no model step is taken), against networkx: a node
    reaching a cycle other than a drained node's self-loop has no drain
    figures (and a set of entries reaching one no tail); otherwise the longest
    path to a drained node in steps and in preemptions, and the reach of a set
    of entries, its edges, drained nodes and farthest distance."""
    rng = random.Random(5)
    cyclic = acyclic = 0
    for _ in range(300):
        size = rng.randint(1, 9)
        graph = FutureGraph()
        drained = [rng.random() < 0.3 for _ in range(size)]
        edges: dict[int, dict[int, int]] = {}
        for n in range(size):
            if drained[n]:
                edges[n] = {n: 0}
            else:   # mostly forward edges, so that many graphs are acyclic; at least one edge
                targets = {rng.randrange(n, size) if rng.random() < 0.9 else rng.randrange(size)
                           for _ in range(rng.randint(1, 3))}
                edges[n] = {m: rng.randint(0, 2) for m in targets}
        graph.adjacent = [tuple((m, 0, p, 0) for m, p in edges[n].items()) for n in range(size)]
        graph.drained = bytearray(drained)
        g = nx.DiGraph([(n, m, {"p": p}) for n in edges for m, p in edges[n].items() if not (m == n and drained[n])])
        g.add_nodes_from(range(size))
        looping = {n for comp in nx.strongly_connected_components(g) for n in comp
                   if len(comp) > 1 or g.has_edge(n, n)}
        for n in range(size):
            reach = nx.descendants(g, n) | {n}
            found = drains(graph, n, None, True)
            if reach & looping:
                assert found is None
                cyclic += 1
                continue
            acyclic += 1
            sub = g.subgraph(reach)
            steps = {m: 0 for m in reach}
            most = {m: 0 for m in reach}
            for m in reversed(list(nx.topological_sort(sub))):
                for k in sub.successors(m):
                    steps[m] = max(steps[m], 1 + steps[k])
                    most[m] = max(most[m], sub[m][k]["p"] + most[k])
            assert found == (int(any(drained[m] for m in reach)), steps[n], most[n])
        entries = frozenset(rng.sample(range(size), rng.randint(1, size)))
        tail = tail_of(graph, entries, None, True)
        reach = set().union(*(nx.descendants(g, e) | {e} for e in entries))
        if reach & looping:
            assert tail is None
            continue
        distance = nx.multi_source_dijkstra_path_length(g, entries, weight=lambda *_: 1)
        assert tail == Tail(len(reach), sum(len(edges[n]) for n in reach), sum(drained[n] for n in reach),
                            sum(any(drained[m] for m in nx.descendants(g, n) | {n}) for n in reach),
                            max(distance.values()))
    assert cyclic >= 100 and acyclic >= 500


def test_a_graph_is_full_past_its_limit_of_nodes_or_of_sets_of_entries(monkeypatch) -> None:
    """So that the tails' figures, kept per set of entries, do not grow with
    the family's size while its nodes stay few."""
    monkeypatch.setattr(FutureGraph, "LIMIT", 3)
    graph = FutureGraph()
    graph.tails = {frozenset({n}): None for n in range(3)}
    assert not graph.full()
    graph.tails[frozenset({3})] = None
    assert graph.full()
    graph.restart()
    assert not graph.full() and not graph.tails
