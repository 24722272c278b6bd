"""Reach: the system's own code that scoped exploration runs, against a fuzz
campaign of the same wall time on as many worker processes (each campaign with
its own seed, guided by the system's coverage, keep-going, the property
checks). Both measure with the same tracer (driver/coverage.py) on the same files
(the modules `Capabilities.code` names): code edges (a line to the next line
run, a function's entry and exit), branch edges (those leaving a line that has
more than one next line among all the edges either side took), functions; then
the functions only one side ran, the rare paths one of them misses.

Explore runs the whole scope with --keep-going (every workload, past findings);
the fuzz campaigns get the seconds the exploration took. A second table gives,
per deployment feature, the code of its paths each side ran: the lines of the
system's files that name it (`FEATURE_LINES`: "lora"; "structured_output" or
"grammar"; a KV connector, a remote KV load or its failure; speculative decoding's
draft or spec tokens), how many of them
each side ran, and the edges from or to them.

Usage: python -m benchmarks.reach [--systems vllm,sglang,lmdeploy,minisched] [--scope small] [--workers 2]
                                  [--seed 1] [--list 10] [--save JSON]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from loopcheck.adapters.loader import capabilities_of, load_factory
from loopcheck.checks.suite import CheckSet, default_mode
from loopcheck.driver.coverage import Edge, EdgeCoverage
from loopcheck.explorer.scope import load_scope
from loopcheck.explorer.scoped import Limits, explore_units, make_plan
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.seeds import derived_seed
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.report import table
from loopcheck.sut.code import code_paths, function_at

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = {"minisched": str(ROOT / "examples/adapter/minisched_adapter.py:MiniSchedSUT")}   # (others by name)


class Reached(EdgeCoverage):
    """Edge coverage that keeps the edges of every run since it was made
    (`reached`), where a run resets what `edges` holds."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        super().__init__(paths)
        self.kept: set[Edge] = set()

    def reset(self) -> None:
        self.kept |= self.edges
        super().reset()

    @property
    def reached(self) -> set[Edge]:
        return self.kept | self.edges


def explore_part(job: tuple[str, str, int, int]) -> tuple[set[Edge], float, int]:
    """Part k of n of the scope on the system, every workload: the edges its
    runs took, its seconds, its transitions."""
    adapter, scope, k, n = job
    factory = load_factory(adapter)
    caps = capabilities_of(factory)
    plan = make_plan(factory, load_scope(scope), caps)
    coverage = Reached(code_paths(caps.code))
    result = explore_units(factory, plan, plan.part(k, n), CheckSet(default_mode(caps.semantics)),
                           Limits(max_states=10**8), keep_going=True, coverage=coverage)
    return coverage.reached, result.seconds, result.tally.transitions


def fuzz_worker(job: tuple[str, float, int, str]) -> tuple[set[Edge], int]:
    """One campaign of `budget` seconds: the edges its runs took, its examples."""
    adapter, budget, seed, out = job
    factory = load_factory(adapter)
    caps = capabilities_of(factory)
    result = run_campaign(CampaignSettings("guarded", budget, seed, Path(out), "random", None, factory,
                          CheckSet(default_mode(caps.semantics)), keep_going=True, guidance="system"))
    return set(result.stats.edges), result.stats.examples


def unpacked(arc: object) -> tuple[int, int]:
    """The two lines of an arc as coverage.py's C tracer packs them
    (coverage/collector.py `flush_data`); negative: a code object's entry or exit."""
    assert isinstance(arc, int)
    first, second = arc & 0xFFFFFFF, (arc >> 28) & 0xFFFFFFF
    return -first if arc & (1 << 56) else first, -second if arc & (1 << 57) else second


def function_of(edge: Edge) -> str:
    """'file:function' holding the edge's first line (`<module>` outside any)."""
    path, arc = edge
    return f"{Path(path).name}:{function_at(path, abs(unpacked(arc)[0])) or '<module>'}"


def branch_edges(edges: set[Edge], every: set[Edge]) -> set[Edge]:
    """The edges that leave a line with more than one next line among `every`."""
    targets: dict[tuple[str, int], set[int]] = {}
    for path, arc in every:
        first, second = unpacked(arc)
        targets.setdefault((path, first), set()).add(second)
    return {(path, arc) for path, arc in edges if len(targets[(path, unpacked(arc)[0])]) > 1}


FEATURE_LINES = {"lora": re.compile("lora", re.IGNORECASE),
                 "grammar": re.compile("structured_output|grammar", re.IGNORECASE),
                 "kv_transfer": re.compile(r"(?<!ec_)connector|remote_kv|recving|kv_load|invalid_block|kv_xfer",
                                           re.IGNORECASE),
                 "spec": re.compile(r"spec_token|spec_decode|num_spec|draft|speculative", re.IGNORECASE),
                 "pause": re.compile(r"pause", re.IGNORECASE),
                 "async_scheduling": re.compile(r"placeholder|stale|in_flight|deferred_free|step_seq|async_sched",
                                                re.IGNORECASE)}


def naming_lines(paths: set[str], pattern: re.Pattern[str]) -> set[tuple[str, int]]:
    """(file, line) of every line of the files that matches `pattern`."""
    return {(path, n) for path in paths for n, text in enumerate(Path(path).read_text().splitlines(), 1)
            if pattern.search(text)}


def touching(edges: set[Edge], lines: set[tuple[str, int]]) -> set[Edge]:
    """The edges from or to one of `lines`."""
    return {(path, arc) for path, arc in edges if any((path, abs(line)) in lines for line in unpacked(arc))}


def lines_run(edges: set[Edge]) -> set[tuple[str, int]]:
    return {(path, abs(line)) for path, arc in edges for line in unpacked(arc) if line}


def feature_rows(name: str, explored: set[Edge], fuzzed: set[Edge]) -> list[list[object]]:
    """Per deployment feature: the lines naming it, those each side ran, and the
    edges from or to them each side took."""
    rows = []
    paths = {path for path, _ in explored | fuzzed}
    for feature, pattern in FEATURE_LINES.items():
        lines = naming_lines(paths, pattern)
        e, f = touching(explored, lines), touching(fuzzed, lines)
        rows.append([name, feature, len(lines), len(lines & lines_run(explored)), len(lines & lines_run(fuzzed)),
                     len(e), len(f), len(e & f)])
    return rows


def reach(adapter: str, scope: str, workers: int, seed: int) -> tuple[dict[str, object], set[Edge], set[Edge]]:
    """Explore the scope, then fuzz as long: figures and both sides' edges."""
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        parts = list(pool.map(explore_part, [(adapter, scope, k, workers) for k in range(1, workers + 1)]))
    explore_wall = time.perf_counter() - start
    explored: set[Edge] = set().union(*(edges for edges, _, _ in parts))
    budget = max(seconds for _, seconds, _ in parts)
    with tempfile.TemporaryDirectory(prefix="loopcheck-reach-") as tmp, ProcessPoolExecutor(workers) as pool:
        start = time.perf_counter()
        campaigns = list(pool.map(fuzz_worker, [(adapter, budget, derived_seed(seed, "worker", w), f"{tmp}/w{w}")
                                                for w in range(workers)]))
        fuzz_wall = time.perf_counter() - start
    fuzzed: set[Edge] = set().union(*(edges for edges, _ in campaigns))
    figures = {"transitions": sum(t for _, _, t in parts), "explore s": explore_wall,
               "examples": sum(e for _, e in campaigns), "fuzz s": fuzz_wall}
    return figures, explored, fuzzed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--systems", default="vllm,sglang,lmdeploy,minisched",
                        help="comma-separated adapters (vllm, sglang, lmdeploy, minisched, MODULE:FACTORY)")
    parser.add_argument("--scope", default="small", help="the explored scope (default small)")
    parser.add_argument("--workers", type=int, default=2, help="processes on each side (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="the fuzz campaigns' seed (each worker's derived)")
    parser.add_argument("--list", type=int, default=10, help="functions listed that only one side ran")
    parser.add_argument("--save", type=Path, metavar="JSON",
                        help="write, per system, the functions each side ran (file:function -> edges taken)")
    args = parser.parse_args()
    rows, only, saved, features = [], [], {}, []
    for name in args.systems.split(","):
        figures, explored, fuzzed = reach(SYSTEMS.get(name, name), args.scope, args.workers, args.seed)
        every = explored | fuzzed
        branches_e, branches_f = branch_edges(explored, every), branch_edges(fuzzed, every)
        function = {edge: function_of(edge) for edge in every}   # (each edge's function, looked up once)
        funcs_e, funcs_f = {function[e] for e in explored}, {function[e] for e in fuzzed}
        rows.append([name, args.scope, f"{figures['transitions']:,}", f"{figures['explore s']:.0f}",
                     f"{figures['examples']:,}", f"{figures['fuzz s']:.0f}", len(explored), len(fuzzed),
                     len(explored & fuzzed), len(explored - fuzzed), len(fuzzed - explored),
                     f"{len(branches_e)}/{len(branches_f)}", f"{len(funcs_e)}/{len(funcs_f)}"])
        only.append(f"{name}: run by explore only: {', '.join(sorted(funcs_e - funcs_f)[:args.list]) or 'none'}; "
                    f"by fuzz only: {', '.join(sorted(funcs_f - funcs_e)[:args.list]) or 'none'}")
        features += feature_rows(name, explored, fuzzed)
        saved[name] = {side: dict(sorted(Counter(function[edge] for edge in edges).items()))
                       for side, edges in (("explore", explored), ("fuzz", fuzzed))}
        print(f"  {name}: done", flush=True)
    if args.save:
        args.save.write_text(json.dumps(saved, indent=1))
    print(table(["system", "scope", "explore: transitions", "wall s", "fuzz: examples", "wall s", "edges explore",
                 "edges fuzz", "both", "explore only", "fuzz only", "branch edges e/f", "functions e/f"], rows))
    print("\n".join(only))
    print(table(["system", "feature", "lines naming it", "run by explore", "run by fuzz", "edges explore",
                 "edges fuzz", "both"], features))
    print(f"(fuzz: {args.workers} campaigns of the exploration's seconds, seed {args.seed}, random configs, guidance "
          "from the system, keep-going)")


if __name__ == "__main__":
    main()
