"""Turning an explored lasso into files: a replayable counterexample workload,
and GraphML / DOT drawings of the lasso."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import networkx as nx

from loopcheck.explorer.explore import variant
from loopcheck.explorer.liveness import Lasso
from loopcheck.model.state import SchedState
from loopcheck.model.workload import Workload


def lasso_workload(workload: Workload, spread: int, lasso: Lasso) -> Workload:
    """The variant the lasso lives in, with token scripts that make the lasso's
    stop choices happen on the reference model, plus property, trace and cycle."""
    looping = variant(workload, spread, lasso.variant)
    choices: dict[tuple[str, int], bool] = {}
    for _, stops in lasso.steps:
        choices.update(stops)
    vocab = workload.config.vocab_size
    reqs = []
    for r in looping.requests:
        if r.stop_token is None:
            reqs.append(r)
            continue
        script = tuple(r.stop_token if choices.get((r.rid, i), False) else (r.stop_token + 1) % vocab
                       for i in range(r.max_tokens))
        reqs.append(replace(r, script_tokens=script))
    extra = {"property": "livelock", "source": "loopcheck explore",
             "cycle": {"start": len(lasso.stem) - 1, "length": len(lasso.cycle) - 1},
             "trace": [[e.to_json() for e in events] for events, _ in lasso.steps]}
    return Workload(looping.config, tuple(reqs), extra)


_MARK = {"pending": ".", "waiting": "w", "running": "R", "preempted": "P", "finished": "F"}


def _label(state: SchedState) -> str:
    parts = [f"{_MARK[r.status]}{r.frontier}/{r.generated}" for r in state.reqs]
    return f"t{state.step} free {state.free} | " + " ".join(parts)


def lasso_graph(lasso: Lasso) -> nx.DiGraph:
    """The lasso as a small graph with readable node and edge labels."""
    out = nx.DiGraph()
    index = {node: i for i, node in enumerate(dict.fromkeys(lasso.nodes))}
    for node, state in zip(lasso.nodes, lasso.states, strict=True):
        out.add_node(index[node], label=_label(state), cycle=node in lasso.cycle)
    for a, b, (events, _) in zip(lasso.nodes, lasso.nodes[1:], lasso.steps, strict=False):
        out.add_edge(index[a], index[b], label=" ".join(map(str, events)))
    return out


def write_dot(small: nx.DiGraph, path: Path) -> None:
    """Nodes and edges with their labels; an edge label puts each event on a line of
    its own, whole (never cut mid-event)."""
    def q(text: str) -> str:
        parts = re.split(r"(?<=\)) ", text)   # events are "kind(args)", joined by spaces
        return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in parts) + '"'

    lines = ["digraph lasso {", "  node [shape=box, fontname=monospace];"]
    for n, data in small.nodes(data=True):
        style = ", color=red" if data["cycle"] else ""
        lines.append(f"  {n} [label={q(data['label'])}{style}];")
    for a, b, data in small.edges(data=True):
        lines.append(f"  {a} -> {b} [label={q(data['label'])}];")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")
