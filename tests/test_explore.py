"""State-space exploration, liveness, lasso export, and the explore/replay CLIs."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest

from loopcheck.adapters.loader import capabilities_of
from loopcheck.adapters.simulate import simulate_engine, simulate_model
from loopcheck.checks.suite import CheckSet
from loopcheck.cli import main
from loopcheck.explorer import survey as survey_module
from loopcheck.explorer.explore import (
    PROGRESS_EVERY,
    YOUNG_COLLECTION_EVERY,
    Caps,
    Exploration,
    FutureGraph,
    Replay,
    canonical,
    explore,
    explore_variant,
    family_size,
    horizon_of,
    successors,
    variant,
)
from loopcheck.explorer.lasso_export import lasso_workload
from loopcheck.explorer.liveness import _component_figures, _forward_figures, analyse
from loopcheck.explorer.scope import workload_scope
from loopcheck.explorer.scoped import Limits, explore_units, make_plan
from loopcheck.explorer.survey import Claims, Fold, block_variants, plan, survey
from loopcheck.fuzz.directed import draw_workloads
from loopcheck.fuzz.strategies import workloads
from loopcheck.model.bounds import preemption_bound
from loopcheck.model.events import Admit, Arrive, Finish, Preempt, Prefill, Resume, TokenOutcome
from loopcheck.model.reference import step
from loopcheck.model.state import initial_state
from loopcheck.model.workload import Workload, load_workload, save_workload
from loopcheck.sut.model_sut import ModelSUT
from tests.helpers import five_requests, req, workload

EXAMPLES = Path(__file__).parent.parent / "examples"


def small_b(policy: str = "guarded"):
    """Prefix caching, stop tokens, restarts without snapshot, incremental growth."""
    return workload(req("a", 4, 3, priority=2, stop_token=1), req("b", 3, 3, priority=1, arrival=1, stop_token=2),
                    req("c", 5, 2, priority=0, arrival=2), num_blocks=6, block_size=2, num_loops=2,
                    kv_layout="shared", prefix_caching=True, max_num_batched_tokens=4, prefill_chunk_size=2,
                    snapshots=False, allocation="incremental", preemption_policy=policy)


class StopChoices:
    """The environment of the brute-force search below: the requests in `stopping`
    produce their stop token, the others a token that is not; records whose
    tokens the step asked for. Aborts from the requests' abort_at."""

    def __init__(self, w: Workload, stopping: frozenset[str]) -> None:
        self.workload, self.stopping, self.asked = w, stopping, []

    def aborts(self, t: int) -> frozenset[str]:
        return frozenset(r.rid for r in self.workload.requests if r.abort_at == t)

    def outcome(self, rid: str, index: int) -> TokenOutcome:
        self.asked.append(rid)
        stop_token = self.workload.by_id(rid).stop_token
        token = stop_token if rid in self.stopping else (stop_token or 0) + 1
        return TokenOutcome(token % self.workload.config.vocab_size, self.workload.config.num_loops)


def brute_force_counts(w: Workload, spread: int) -> tuple[int, int]:
    """States and transitions of the family without reduction, derived apart from
    the explorer (no future graph, fingerprints or numbering): for each shift of
    the arrivals (and aborts) by 0..spread, a plain search over the model's states
    with the step counter capped after the last arrival or abort, trying every
    subset of the step's token-producing requests with a stop token as stopping;
    the distinct states and (state, next state) pairs, summed over variants."""
    states = transitions = 0
    for shifts in itertools.product(range(spread + 1), repeat=len(w.requests)):
        v = Workload(w.config, tuple(replace(r, arrival=r.arrival + k, abort_at=None if r.abort_at is None
                                             else r.abort_at + k) for r, k in zip(w.requests, shifts, strict=True)))
        horizon = 1 + max([r.arrival for r in v.requests] + [r.abort_at for r in v.requests if r.abort_at is not None])
        root = initial_state(v.config.num_blocks, len(v.requests))
        seen, edges, todo = {root}, set(), [root]
        while todo:
            state = todo.pop()
            probe = StopChoices(v, frozenset())
            step(state, probe)
            choosable = [rid for rid in probe.asked if v.by_id(rid).stop_token is not None]
            for k in range(len(choosable) + 1):
                for stopping in itertools.combinations(choosable, k):
                    nxt = step(state, StopChoices(v, frozenset(stopping)))[0]
                    nxt = replace(nxt, step=min(nxt.step, horizon))
                    edges.add((state, nxt))
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
        states, transitions = states + len(seen), transitions + len(edges)
    return states, transitions


def test_pinned_state_counts() -> None:
    """A change in semantics shows as a changed count here. The unreduced count of
    small_b is derived apart, by brute force; reduction (finished requests
    abstracted) keeps fewer states."""
    a = explore(load_workload(EXAMPLES / "livelock_min.json").with_config(preemption_policy="guarded"), spread=1)
    assert (a.states, a.transitions) == (323, 323)
    b, full = explore(small_b(), spread=1), explore(small_b(), spread=1, reduce=False)
    assert (full.states, full.transitions) == brute_force_counts(small_b(), 1) == (330, 452)
    assert (b.states, b.transitions) == (137, 187) and b.states < full.states


def aborted_b() -> Workload:
    """small_b with two requests aborted in the same step (aborts are taken in
    arrival order; the cache of prefix pages sees the order)."""
    w = small_b()
    return Workload(w.config, (replace(w.requests[0], abort_at=4), replace(w.requests[1], abort_at=4), w.requests[2]))


@pytest.mark.parametrize("make, spread, figures", [
    (small_b, 1, (330, 452)),   # (derived apart, by brute force: test_pinned_state_counts)
    (aborted_b, 2, (351, 378)),
    (lambda: load_workload(EXAMPLES / "livelock_min.json").with_config(preemption_policy="guarded"), 1, (323, 323))])
def test_the_scoped_explorer_on_the_model_covers_the_model_explorers_states(make, spread, figures) -> None:
    """One exploration, two ways: the model as a system through the protocol,
    explored as a workload scope (its variants the units, its stop tokens chosen
    by the explorer: `stop_choices`, every check judging every transition), meets
    exactly the states and edges of the model explorer's family, unreduced: its
    states and drained states are the family's states, its distinct edges and a
    self-loop on each drained state the family's transitions; in either check mode."""
    w = make()
    family = explore(w, spread=spread, reduce=False)
    assert (family.states, family.transitions) == figures
    units = make_plan(ModelSUT, workload_scope(w, "family", spread), capabilities_of(ModelSUT, w.config))
    for mode in ("property", "lockstep"):
        tally = explore_units(ModelSUT, units, list(range(len(units.units))), CheckSet(mode), Limits(),
                              keep_going=True).tally
        assert tally.complete and tally.units == family_size(w, spread)
        assert (tally.states + tally.drained_states, tally.edges + tally.drained_states) == figures
        assert tally.drained_states == sum(family.drained)


@pytest.mark.parametrize("make, spread", [(small_b, 1), (five_requests, 1), (aborted_b, 2),
                                          (lambda: load_workload(EXAMPLES / "livelock_min.json"), 2)])
def test_the_compact_graph_is_the_models_successor_relation(make, spread) -> None:
    """Replayed from the roots, the numbered states are distinct model states
    within each variant, and each state's edges lead to exactly the states the
    model's steps lead to (so successors shared between variants, and the last
    token's stop choice left out, lose nothing), with the stop choices of the
    replayed step; the pending requests of a state before its horizon are those
    yet to arrive."""
    assert_the_models_successor_relation(explore(make(), spread=spread))


def assert_the_models_successor_relation(ex: Exploration) -> None:
    replay = Replay(ex)
    states = [replay.state(i) for i in range(ex.states)]
    keys = [(ex.variant_of(i), state) for i, state in enumerate(states)]
    assert len(set(keys)) == len({(v, s.step, s.content_fingerprint()) for v, s in keys}) == ex.states
    for i, state in enumerate(states):
        w = ex.workloads[ex.variant_of(i)]
        following = {canonical(nxt, horizon_of(w), True) for nxt, _, _ in successors(state, w, False)}
        assert {states[ex.target[e]] for e in ex.edges(i)} == following
        assert all(replay.step(i, ex.target[e])[1] == ex.stops(e) for e in ex.edges(i))
        assert ex.drained[i] == all(r.status == "finished" for r in state.reqs)
        # what `Timing` keys nodes by: before the horizon, the pending requests are those yet to arrive
        if state.step < horizon_of(w):
            assert [r.status == "pending" for r in state.reqs] == [spec.arrival >= state.step for spec in w.requests]


@pytest.mark.parametrize("merge", [False, True])
def test_a_lasso_replays_its_states_and_steps_from_its_choices(merge) -> None:
    """A lasso keeps no states: recomputed from its root and its choices, its
    states and steps are those of its nodes and edges replayed from the roots
    (with merge, the steps; a merged node's state there is its first finder's,
    which may have another step counter)."""
    w = load_workload(EXAMPLES / "livelock_min.json").with_config(preemption_policy="unguarded")
    w = Workload(w.config, tuple(replace(r, stop_token=5) for r in w.requests))
    ex = explore(w, spread=1, merge=merge)
    lasso = analyse(ex).lasso
    assert lasso is not None and len(lasso.cycle) > 1
    replay = Replay(ex)
    nodes = lasso.nodes
    assert lasso.steps == [replay.step(a, b) for a, b in zip(nodes, nodes[1:], strict=False)]
    assert [s.content_fingerprint() for s in lasso.states] == [replay.state(n).content_fingerprint() for n in nodes]
    if not merge:
        assert lasso.states == [replay.state(n) for n in nodes]
    assert len(ex.stop_table) > 1   # (the family has stop choices)


def test_shared_futures_are_sound_on_random_workloads() -> None:
    """On random small workloads (every config switch, aborts, stop tokens,
    shared prefixes), each family's graph is the model's successor relation:
    states that share a node, or only what is due now, really step alike."""
    drawn = draw_workloads(workloads(max_requests=5, max_prompt=4, max_tokens=3, max_arrival=3), seed=7, count=60)
    explored = [explore(w, max_states=4000, spread=1) for w in drawn]
    complete = [ex for ex in explored if ex.complete]
    assert len(complete) >= 50 and sum(ex.states for ex in complete) > 10_000
    assert sum(any(r.abort_at is not None for r in ex.workloads[0].requests) for ex in complete) >= 20
    for ex in complete:
        assert_the_models_successor_relation(ex)


@pytest.mark.parametrize("limit", [FutureGraph.LIMIT, 5])
def test_successors_shared_between_variants_change_nothing(limit, monkeypatch) -> None:
    """Each variant explored on the family's shared graph of futures (also when
    the graph keeps starting over) is exactly the variant explored on its own."""
    monkeypatch.setattr(FutureGraph, "LIMIT", limit)
    shared = FutureGraph()
    for v in range(family_size(five_requests(), 2)):
        member = variant(five_requests(), 2, v)
        alone = explore_variant(v, member, True, Caps(), FutureGraph())
        along = explore_variant(v, member, True, Caps(), shared)
        assert (along.parent, along.target, along.choice, along.preemptions, along.drained) == (
            alone.parent, alone.target, alone.choice, alone.preemptions, alone.drained)
        assert 0 < alone.collision_probability < 1e-12 and 0 <= along.collision_probability < 1e-12
    assert len(shared.kinds) == 2   # two priority orders of the tied requests b and e
    assert (shared.restarts > 0) == (limit == 5)
    if shared.restarts == 0:   # nodes that differ only in later arrivals share their model steps
        assert len(shared.stepped) < shared.nodes


@pytest.mark.parametrize("make, spread", [(small_b, 1), (lambda: small_b("unguarded"), 1), (five_requests, 2),
                                          (lambda: load_workload(EXAMPLES / "livelock_min.json"), 2),
                                          (lambda: load_workload(EXAMPLES / "livelock.json"), 0)])
def test_merging_states_with_the_same_futures_keeps_every_verdict_and_figure(make, spread) -> None:
    """One node per future (state but its step counter, and what is still to
    come) over the whole family: fewer states, the same verdict, worst cases
    and lasso length, and a merged lasso still loops on the model."""
    w = make()
    plain, merged = explore(w, spread=spread), explore(w, spread=spread, merge=True)
    a, b = analyse(plain), analyse(merged)
    assert merged.complete and merged.states <= plain.states
    assert (a.livelock, a.worst_drain_steps, a.worst_preemptions) == (b.livelock, b.worst_drain_steps,
                                                                      b.worst_preemptions)
    assert (a.lasso is None) == (b.lasso is None)
    if b.lasso is not None:
        looping = lasso_workload(w, spread, b.lasso)
        assert not simulate_model(looping, 300).drained


def test_merging_shrinks_a_family_whose_variants_share_futures() -> None:
    w = five_requests()
    plain, merged = explore(w, spread=2).states, explore(w, spread=2, merge=True).states
    assert merged < plain
    assert (plain, merged) == (4510, 1025)   # (a change detector)


FINGERPRINTS = """
from loopcheck.explorer.explore import Replay, explore
from tests.test_explore import small_b
ex = explore(small_b(), spread=1)
print([Replay(ex).state(i).content_fingerprint() for i in range(ex.states)])
"""


def test_fingerprints_are_the_same_in_every_process() -> None:
    """Fingerprints hash integers only, so string hash randomisation does not
    change them (the same counts and figures in every run)."""
    runs = [subprocess.run([sys.executable, "-c", FINGERPRINTS], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1] and len(json.loads(runs[0])) == 137


@pytest.mark.parametrize("make", [lambda: small_b("guarded"), lambda: small_b("unguarded"),
                                  lambda: load_workload(EXAMPLES / "livelock_min.json")])
def test_reduction_keeps_every_verdict_and_figure(make) -> None:
    w = make()
    reduced, full = analyse(explore(w, spread=1)), analyse(explore(w, spread=1, reduce=False))
    assert (reduced.livelock, reduced.worst_drain_steps, reduced.worst_preemptions) == (
        full.livelock, full.worst_drain_steps, full.worst_preemptions)


@pytest.mark.parametrize("name, spread", [("livelock.json", 0), ("livelock_min.json", 2)])
def test_unguarded_example_has_a_lasso_and_guarded_drains_within_the_preemption_bound(name, spread) -> None:
    w = load_workload(EXAMPLES / name)
    bad = analyse(explore(w.with_config(preemption_policy="unguarded"), spread=spread))
    assert bad.livelock and bad.lasso is not None and len(bad.lasso.cycle) >= 2
    good_w = w.with_config(preemption_policy="guarded")
    ex = explore(good_w, spread=spread)
    good = analyse(ex)
    assert ex.complete and not good.livelock and good.can_drain == ex.states
    assert good.worst_preemptions <= preemption_bound(good_w)


def test_figures_without_components_equal_the_figures_over_components() -> None:
    """Where every edge leads to a later state or is a drained self-loop, the
    figures taken in state order give what the analysis over strongly connected
    components gives (complete graphs or not); where some edge does not, they
    are not given. Both kinds of graph occur among random and pinned variants."""
    drawn = draw_workloads(workloads(max_requests=5, max_prompt=4, max_tokens=3, max_arrival=3), seed=5, count=30)
    pinned = [five_requests(), small_b(), small_b("unguarded"), aborted_b(),
              *(load_workload(EXAMPLES / name).with_config(preemption_policy="unguarded")
                for name in ("livelock_min.json", "livelock.json"))]
    forward = other = incomplete = 0
    for w in drawn + pinned:
        graph = FutureGraph()
        for v in range(family_size(w, 1)):
            for cap in (10**5, 12):
                ex = explore_variant(v, variant(w, 1, v), True, Caps(cap), graph)
                in_order = _forward_figures(ex)
                if in_order is None:
                    other += 1
                    assert any(ex.target[e] < i or (ex.target[e] == i and not ex.drained[i])
                               for i in range(ex.states) for e in ex.edges(i))
                else:
                    forward += 1
                    incomplete += not ex.complete
                    assert in_order == _component_figures(ex)
    assert forward >= 1000 and other >= 400 and incomplete >= 500


def test_the_preemption_bound_is_reached() -> None:
    """Three requests at three levels (bound 1 + 2): the explorer's worst run
    preempts exactly that often, so the bound is tight."""
    w = workload(req("a", 5, 1, priority=2), req("b", 6, 2, priority=1, arrival=1),
                 req("c", 1, 1, priority=0, arrival=4), num_blocks=4, block_size=2, num_loops=1,
                 allocation="upfront", max_num_batched_tokens=4, prefill_chunk_size=2, priority_preemption=True,
                 preemption_policy="guarded", watermark_blocks=0)
    assert preemption_bound(w) == 3
    assert analyse(explore(w, spread=0)).worst_preemptions == 3


def figures(found):
    live = found.liveness
    return (found.states, found.transitions, found.drained, found.complete, live.livelock, live.non_progress_sccs,
            live.can_drain, live.worst_drain_steps, live.worst_preemptions)


@pytest.mark.parametrize("make, spread", [(lambda: load_workload(EXAMPLES / "livelock_min.json"), 2),
                                          (lambda: small_b("guarded"), 1), (lambda: small_b("unguarded"), 1)])
def test_the_survey_on_two_processes_equals_the_whole_graph(make, spread, monkeypatch) -> None:
    monkeypatch.setattr(survey_module, "FORK_AFTER", 0.0)   # workers from the first block on
    w = make()
    ex = explore(w, spread=spread)
    whole = analyse(ex)
    one, two = survey(w, spread), survey(w, spread, workers=2)
    assert figures(one) == figures(two) == (ex.states, ex.transitions, sum(ex.drained), ex.complete, whole.livelock,
                                            whole.non_progress_sccs, whole.can_drain, whole.worst_drain_steps,
                                            whole.worst_preemptions)
    assert (one.liveness.lasso is None) == (whole.lasso is None)
    if whole.lasso is not None:
        assert len(one.liveness.lasso.nodes) == len(whole.lasso.nodes) == len(two.liveness.lasso.nodes)


def each_variant_explored(w: Workload, spread: int, max_states: int):
    """The family's survey with every variant explored and analysed (no variant
    derived from another), folded in variant order."""
    folded = Fold()
    for v in range(family_size(w, spread)):
        ex = explore_variant(v, variant(w, spread, v), True, Caps(max_states), FutureGraph())
        folded.merge(Fold.of(survey_module._survey_of(ex)))
    return folded.result(family_size(w, spread), Caps(max_states))


def test_translated_variants_are_their_bases_some_steps_later(monkeypatch) -> None:
    """A variant whose requests all come m steps later than a base's is surveyed
    from the base's figures: on pinned families and random workloads (aborts,
    stop tokens, every config switch), the survey equals exploring every
    variant, and translations were derived (not explored) in most families."""
    derived = []
    original = survey_module.translated

    def counted(base, m, caps):
        found = original(base, m, caps)
        derived.append(found is not None)
        return found
    monkeypatch.setattr(survey_module, "translated", counted)
    drawn = draw_workloads(workloads(max_requests=5, max_prompt=4, max_tokens=3, max_arrival=3), seed=11, count=40)
    pinned = [five_requests(), small_b(), small_b("unguarded"), aborted_b(),
              load_workload(EXAMPLES / "livelock_min.json")]
    cases = [(w, 2) for w in drawn + pinned]
    families_with_translations = complete = 0
    for w, spread in cases:
        derived.clear()
        found = survey(w, spread, max_states=20_000)
        if found.complete:
            complete += 1
            assert figures(found) == figures(each_variant_explored(w, spread, 20_000))
            families_with_translations += any(derived)
    assert complete >= 36 and families_with_translations >= 30


def test_blocks_cover_the_family_once_with_translations_next_to_their_bases() -> None:
    w = five_requests()
    for spread in (0, 1, 3):
        listed = [vm for bases in plan(w, spread) for vm in block_variants(w, spread, bases)]
        assert sorted(v for v, _ in listed) == list(range(family_size(w, spread)))
        for (v, m), (u, k) in zip(listed, listed[1:], strict=False):
            if k:   # a translation follows its base (or the base's previous translation), one step later
                assert k == m + 1
                assert [r.arrival for r in variant(w, spread, u).requests] == [
                    r.arrival + 1 for r in variant(w, spread, v).requests]
            else:   # a base: some request not shifted
                assert min(r.arrival - s.arrival for r, s in zip(variant(w, spread, u).requests, w.requests,
                                                                 strict=True)) == 0


def test_claims_hand_out_every_block_once_in_runs() -> None:
    """Workers pair up, walking towards each other; a worker whose next block is
    taken moves to the middle of the longest untaken run; every block goes
    to exactly one worker, and each worker's blocks form few runs."""
    for count, workers in ((10, 2), (37, 3), (64, 4), (3, 5)):
        claims = Claims(count, multiprocessing.get_context("fork"))
        walkers = [list(claims.start(k, workers)) for k in range(workers)]
        owner: dict[int, int] = {}
        active = set(range(workers))
        turn = 0
        while active:
            k = sorted(active)[turn % len(active)]
            turn += 1 + k   # uneven speeds
            b, walkers[k][0], walkers[k][1] = claims.next(*walkers[k])
            if b is None:
                active.discard(k)
            else:
                assert b not in owner
                owner[b] = k
        assert sorted(owner) == list(range(count))
        runs = sum(b == 0 or owner[b - 1] != owner[b] for b in owner)
        assert runs <= 3 * workers
    first = Claims(10, multiprocessing.get_context("fork"))
    assert (first.start(0, 2), first.start(1, 2)) == ((0, 1), (9, -1))


@pytest.mark.parametrize("max_states", [10**6, 2000, 40])
@pytest.mark.parametrize("fork_after", [0.0, survey_module.FORK_AFTER])
def test_the_survey_is_the_same_on_any_number_of_workers_cut_short_or_not(max_states, fork_after,
                                                                           monkeypatch) -> None:
    """Blocks are folded in block order and cut at the same block, so the
    figures of a capped survey do not depend on the workers either (nor on
    when this process handed the rest of the family to them)."""
    monkeypatch.setattr(survey_module, "FORK_AFTER", fork_after)
    w = five_requests()
    one = survey(w, 2, max_states=max_states)
    assert one.complete == (max_states == 10**6)
    for workers in (2, 3):
        other = survey(w, 2, max_states=max_states, workers=workers)
        assert figures(other) == figures(one)
        assert (other.depth, other.explored, other.collision_probability) == (
            one.depth, one.explored, one.collision_probability)


def test_workers_start_only_when_the_family_is_not_done_soon(monkeypatch) -> None:
    """Not before FORK_AFTER, and then only if the variants done so far say
    that what is left takes longer than FORK_WORTH (on a clock that ticks 1 ms
    per reading, 2.5 ms pass in the second block, which is then done again on
    this process or by the workers)."""
    def no_workers(*args):
        raise AssertionError("workers started")
    monkeypatch.setattr(survey_module, "_surveyed_in_parallel", no_workers)
    for fork_after, fork_worth, forks in ((3600.0, 0.0, False), (0.0025, 3600.0, False), (0.0025, 0.0, True),
                                          (0.0, 3600.0, True)):   # nothing done yet: no estimate, so workers
        clock = itertools.count(0, 0.001)
        monkeypatch.setattr(survey_module, "now", lambda: next(clock))   # noqa: B023 (read in this iteration)
        monkeypatch.setattr(survey_module, "FORK_AFTER", fork_after)
        monkeypatch.setattr(survey_module, "FORK_WORTH", fork_worth)
        if forks:
            with pytest.raises(AssertionError, match="workers started"):
                survey(five_requests(), 1, workers=2)
        else:
            assert survey(five_requests(), 1, workers=2).complete


@pytest.mark.parametrize("how, error", [("raise", "(?s)a survey worker failed.*ValueError: broken block"),
                                         ("exit", "a survey worker ended with exit code 3")])
def test_a_failing_worker_fails_the_survey(how, error, monkeypatch) -> None:
    """A worker's exception comes back with its traceback; a worker that dies
    without a word (killed, out of memory) is noticed by its exit code."""
    parent, original = os.getpid(), survey_module.survey_block

    def broken(bases, *args):
        if os.getpid() != parent and bases.start > 5:
            if how == "exit":
                os._exit(3)
            raise ValueError("broken block")
        return original(bases, *args)
    monkeypatch.setattr(survey_module, "survey_block", broken)
    monkeypatch.setattr(survey_module, "FORK_AFTER", 0.0)
    with pytest.raises(RuntimeError, match=error):
        survey(five_requests(), 2, workers=2)


def test_a_five_request_family_with_spread_3_and_stop_choices_is_explored_completely() -> None:
    """1,024 variants (arrivals shifted by 0..3) with stop tokens branching: every
    state drains under guarded; a change in semantics shows as a changed count."""
    found = survey(five_requests(), spread=3, workers=2)
    assert found.complete and not found.liveness.livelock
    assert (found.states, found.transitions) == (18966, 24873)
    assert found.liveness.can_drain == found.states
    assert found.liveness.worst_preemptions <= preemption_bound(five_requests())


def test_state_cap_is_reported_loudly(capsys, tmp_path) -> None:
    ex = explore(load_workload(EXAMPLES / "livelock.json"), max_states=10)
    assert not ex.complete
    assert main(["explore", str(EXAMPLES / "livelock.json"), "--max-states", "10"]) == 1
    out = capsys.readouterr().out
    assert "INCOMPLETE: the state cap of 10 cut exploration short; no verdict." in out and "LIVELOCK" not in out
    # a lasso among the states explored before the cap is a livelock all the same, and replays as one
    assert main(["explore", str(EXAMPLES / "livelock_min.json"), "--policy", "unguarded", "--spread", "2",
                 "--max-states", "50", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "LIVELOCK: a lasso of" in out and "INCOMPLETE: the state cap of 50 cut exploration short; the " \
        "figures cover the states explored." in out
    assert main(["replay", str(tmp_path / "lasso.json")]) == 1
    assert "REPRODUCED livelock" in capsys.readouterr().out


@pytest.mark.parametrize("workers", [1, 2])
def test_max_seconds_ends_a_huge_exploration_incomplete(workers, capsys, tmp_path) -> None:
    """A workload of 1,500 requests (2^1500 variants with --spread 1) is cut at
    --max-seconds, in the head and tail of a variant as much as between them:
    INCOMPLETE, naming the time cap, exit 1 (wall times: docs/files.md)."""
    w = load_workload(EXAMPLES / "livelock_min.json")
    many = Workload(replace(w.config, num_blocks=4000, max_num_seqs=64),
                    tuple(replace(w.requests[0], rid=f"q{i}", arrival=i % 50) for i in range(1500)))
    save_workload(many, tmp_path / "many.json")
    assert main(["explore", str(tmp_path / "many.json"), "--spread", "1", "--max-states", "10000000",
                 "--max-seconds", "1", "--workers", str(workers)]) == 1
    assert "INCOMPLETE: the time cap of 1 s cut exploration short; no verdict." in capsys.readouterr().out
    assert main(["explore", str(tmp_path / "many.json"), "--max-seconds", "0"]) == 2


def test_explore_cli_writes_a_lasso_that_loops_on_the_engine(tmp_path, capsys) -> None:
    assert main(["explore", str(EXAMPLES / "livelock_min.json"), "--spread", "1", "--json",
                 "--out", str(tmp_path)]) == 1
    data = json.loads(capsys.readouterr().out)
    for key in ("states", "transitions", "drained_states", "livelock", "worst_drain_steps",
                "worst_preemptions", "complete"):
        assert key in data
    assert data["livelock"] and data["complete"]
    lasso = load_workload(tmp_path / "lasso.json")
    assert lasso.extra["property"] == "livelock"
    assert nx.read_graphml(tmp_path / "lasso.graphml").number_of_nodes() >= 2
    dot = (tmp_path / "lasso.dot").read_text()
    assert dot.startswith("digraph lasso")
    edge_labels = [line.split("label=", 1)[1][1:-3] for line in dot.splitlines() if " -> " in line]
    events = [e for label in edge_labels for e in label.split("\\n") if e]
    assert events and all(e.endswith(")") for e in events)   # whole events, one per line
    run = simulate_engine(lasso, 300)
    assert not run.drained and run.counters.preemptions > 100
    assert main(["replay", str(tmp_path / "lasso.json"), "--adapter", "torch"]) == 1
    assert "REPRODUCED livelock" in capsys.readouterr().out
    assert main(["explore", str(EXAMPLES / "livelock_min.json"), "--policy", "guarded"]) == 0
    assert main(["explore", str(EXAMPLES / "livelock_min.json"), "--spread", "1", "--merge", "--json",
                 "--out", str(tmp_path / "merged")]) == 1
    merged = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert merged["livelock"] and merged["complete"] and merged["states"] < data["states"]
    assert not simulate_engine(load_workload(tmp_path / "merged" / "lasso.json"), 300).drained


def test_replay_both_reports_the_first_divergence(tmp_path, capsys, monkeypatch) -> None:
    from loopcheck.engine.scheduler import Scheduler
    from loopcheck.model.events import Rewind

    original = Scheduler.emit

    def no_rewind_event(self, kind, seq, *args):  # a deliberately broken engine
        if kind is not Rewind:
            original(self, kind, seq, *args)

    monkeypatch.setattr(Scheduler, "emit", no_rewind_event)
    assert main(["replay", str(EXAMPLES / "livelock_min.json"), "--adapter", "torch", "--check", "lockstep"]) == 1
    out = capsys.readouterr().out
    assert "REPRODUCED conformance at step 3: step 3: system and model diverge" in out


def test_replay_plot_and_bad_files(tmp_path, capsys) -> None:
    png = tmp_path / "p.png"
    assert main(["replay", str(EXAMPLES / "livelock_min.json"), "--adapter", "model", "--policy",
                 "guarded", "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "loopcheck/workload@1", "config": {}, "requests": [{"id": 1}]}')
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("loopcheck replay: error:")


def test_the_collector_runs_less_often_only_while_exploring() -> None:
    """Exploring raises the cyclic collector's young threshold and puts it back
    afterwards, also when it stops early."""
    import gc

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []
    survey(five_requests(), 1, progress=lambda states, left: seen.append(gc.get_threshold()))
    explore(five_requests(), spread=3, max_states=6000,
            progress=lambda states, queue: seen.append((states, *gc.get_threshold())))
    explored = [t for t in seen if len(t) == 4]   # the explorer's reports: (states, *threshold)
    surveyed = [t for t in seen if len(t) == 3]
    assert explored and all(t[1] == YOUNG_COLLECTION_EVERY for t in explored)
    assert explored[-1][0] == 6000 // PROGRESS_EVERY * PROGRESS_EVERY   # the last report before it stopped
    assert surveyed and all(t[0] == YOUNG_COLLECTION_EVERY for t in surveyed)
    assert gc.get_threshold() == before


def test_a_timeline_row_is_the_status_after_each_step_and_marks_what_the_status_hides() -> None:
    """Statuses read from the events: none before arrival, the status a step left
    (a preemption and resumption in one step leave it running), the finishing
    step drawn in the status it finished from, none after; each preemption and
    resumption marked."""
    from loopcheck.timeline import Timeline, marked, statuses

    w = workload(req("a", 2, 2), req("b", 2, 2))
    steps = [[Arrive("a"), Admit("a", 0)],
             [Arrive("b"), Preempt("a", "b", False), Resume("a", 0, 0)],
             [Preempt("a", "b", False)],
             [Admit("b", 0), Finish("b", "length")], []]
    run = Timeline(w, steps, [0] * len(steps), None, None, "")
    assert statuses(run) == {"a": ["running", "running", "preempted", "preempted", "preempted"],
                             "b": [None, "waiting", "waiting", "running", None]}
    # the status hides step 1's preemption and resumption: each is marked, in its order within the step
    assert marked(run, len(steps)) == [(0.75, "a", "preempt"), (1.25, "a", "resume"), (1.75, "a", "preempt")]
    assert marked(run, 1) == []


def test_a_timeline_shows_the_prefix_cache_pages_and_which_were_never_computed() -> None:
    from loopcheck.timeline import COMPUTED, UNCOMPUTED, Timeline, cache_rows

    w = workload(req("a", 4, 2))   # (a prompt of 4 tokens, pages of 2)
    prompt = w.requests[0].prompt
    steps = [[Arrive("a"), Admit("a", 0), Prefill("a", 0, 2, 1)],
             [Prefill("a", 2, 3, 1)], []]
    cached = [(prompt[:2],), (prompt[:2], prompt[:4]), ()]   # (page 1 registered before its last position ran)
    run = Timeline(w, steps, [1, 2, 0], None, None, "", cached)
    assert cache_rows(run, 3) == [("a page 1", [None, UNCOMPUTED, None]), ("a page 0", [COMPUTED, COMPUTED, None])]
    assert cache_rows(replace(run, cached=None), 3) == []


def test_a_timeline_names_the_preemption_policy_only_for_a_system_with_loopchecks_semantics() -> None:
    """The policy (guarded or unguarded) is a rule of loopcheck's semantics: the
    headline of another system's timeline does not name one."""
    from loopcheck.checks.suite import CheckSet
    from loopcheck.model.workload import Workload
    from loopcheck.replayed import replay
    from loopcheck.sut.model_sut import ModelSUT
    from tests.toy_scheduler import PINNED, ToyScheduler

    w = workload(req("a", 2, 2))
    model = replay(w, ModelSUT, CheckSet("property")).timeline(w, "model").headline
    assert model == "model, 1 requests, policy guarded: drained"
    w = Workload(replace(w.config, **PINNED), w.requests)
    toy = replay(w, ToyScheduler, CheckSet("property")).timeline(w, "toy.py").headline
    assert toy == "toy.py, 1 requests: drained"
