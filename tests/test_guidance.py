"""Guidance from the system under test: coverage of its own code, trace
features, structured mutations and the corpus that aims them."""

from __future__ import annotations

import random
import sys
import textwrap
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.subjects.hashsched import PINNED, factory
from loopcheck.checks.suite import CheckSet
from loopcheck.driver.coverage import EdgeCoverage
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.corpus import Corpus
from loopcheck.fuzz.features import bucket, run_features
from loopcheck.fuzz.mutate import (
    MAX_PROMPT,
    Limits,
    MidPromptPreemption,
    RunNotes,
    abort_after_preemption,
    arrive_mid_prompt,
    fitting_pool,
    follow_up,
    mutate,
    regeometry_preemption,
    repage,
    share_prefix,
    stop_at_output,
)
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.strategies import Shape
from loopcheck.model.config import Config
from loopcheck.model.events import Admit, Arrive, Preempt, Prefill, Resume, Token
from loopcheck.model.reference import never_fits
from loopcheck.model.workload import RequestSpec, Workload, load_workload
from loopcheck.sut.code import code_paths

CFG = Config(**{**Config().to_json(), **PINNED, "num_blocks": 12, "block_size": 2, "prefix_caching": True,
                "priority_preemption": True})


def test_coverage_records_edges_only_in_the_systems_files_and_only_while_entered(tmp_path, monkeypatch) -> None:
    (tmp_path / "own_sched.py").write_text(textwrap.dedent("""
        def pick(n):
            total = 0
            for i in range(n):
                total += i
            return total
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import own_sched

    cov, before = EdgeCoverage(code_paths(("own_sched",))), sys.gettrace()
    own_sched.pick(3)                     # outside: not recorded
    assert not cov.edges
    with cov:
        own_sched.pick(0)
        sorted([3, 1, 2])                 # not the system's code
    skipped = cov.edges
    assert skipped and {edge[0] for edge in skipped} == {own_sched.__file__}
    cov.reset()
    assert not cov.edges
    with cov, cov:                        # re-entrant
        own_sched.pick(3)
    looped = cov.edges
    assert skipped < looped               # the loop's body: arcs a run without it did not take
    assert sys.gettrace() is before       # the trace function before is back


def test_features_name_what_the_trace_did() -> None:
    a, b = RequestSpec("a", (1, 2, 3, 4, 5), 2), RequestSpec("b", (1, 2, 3, 4, 9), 2, arrival=1, priority=-1)
    trace = [[Arrive("a"), Admit("a", 0), Prefill("a", 0, 5, 1)],
             [Arrive("b"), Preempt("a", "b", False), Admit("b", 2)],
             [Resume("a", 2, 0), Prefill("a", 4, 5, 1)]]
    found = run_features(12, 2, [a, b], trace, [3, 3, 5], {("f.py", 1 << 28 | 2)}, [(), (False,), ()])
    assert ("in-step", ("arrive", "admit", "prefill")) in found
    assert ("across-steps", "prefill", "preempt") in found
    assert ("preempted", 1, False, "prefill") in found
    assert ("hit", "admit", 2, False) in found and ("hit", "resume", 2, True) in found
    assert ("hit-page-of", "admit", "preempted") in found    # b hits pages a computed, a is preempted
    assert ("resumed", 1, 1) in found
    assert ("edge", ("f.py", 1 << 28 | 2)) in found
    assert ("uncomputed-registration", False) in found and ("uncomputed-registration", True) not in found
    assert [bucket(n) for n in (0, 1, 3, 4, 7, 8, 100)] == [0, 1, 3, 4, 4, 8, 64]


def test_features_name_who_preempts_whom_and_in_which_phase() -> None:
    """A request taken out while its prompt is half done, for one that came in
    after it and is more urgent (the window where a scheduler preempts a request
    it has already put in the step's batch); and the running pairs before it."""
    v = RequestSpec("v", tuple(range(12)), 2, priority=2)
    h = RequestSpec("h", (40, 41), 3, arrival=1, priority=1)
    trace = [[Arrive("v"), Admit("v", 0), Prefill("v", 0, 3, 1)],
             [Arrive("h"), Prefill("v", 3, 6, 1), Admit("h", 0),
              Prefill("h", 0, 2, 1)],
             [Preempt("v", "h", True), Token("h", 0, 5, 1)]]
    found = run_features(8, 4, [v, h], trace, [1, 3, 2])
    assert ("preempt-of", "prompt <page", "output", True, "less", "past a page's end") in found   # 6 + 3 -> 9
    assert ("running-pair", "prompt <page", "output", "less", 1) in found    # after step 1: v then h, 3/8 held
    assert not any(f[0] == "preempt-of" and f[1] == "output" for f in found)
    self_preempted = run_features(8, 4, [v], [trace[0], [Preempt("v", "v", True)]], [1, 0])
    assert not any(f[0] == "preempt-of" for f in self_preempted)   # preempting itself is its own feature
    unnamed = run_features(8, 4, [v], [trace[0], [Preempt("v", None, True)]], [1, 0])
    assert ("preempt-of", "prompt <page", "unknown", None, "unknown", "past a page's end") in unnamed   # 3 + 3 -> 6


@pytest.mark.parametrize("chunks, reach", [([(0, 4)], "at a page's end"), ([(0, 1), (1, 2)], "within a page"),
                                           ([(0, 3)], "past a page's end"), ([(0, 11)], "at a page's end"),
                                           ([(0, 6), (6, 12)], "-")])
def test_a_preemption_names_where_the_victims_next_chunk_would_end(chunks, reach) -> None:
    """A chunk as long as the victim's last one, from where its prompt stands,
    cut at the prompt's end (12 tokens, pages of 4): within the page, at a
    page's end (also the prompt's), past one; "-" for a prompt done."""
    v = RequestSpec("v", tuple(range(12)), 2, priority=2)
    h = RequestSpec("h", (40, 41), 3, priority=1)
    trace = [[Arrive("v"), Arrive("h"), Admit("v", 0), Admit("h", 0)]]
    trace += [[Prefill("v", a, b, 1)] for a, b in chunks] + [[Preempt("v", "h", True)]]
    preempt_of = [f for f in run_features(8, 4, [v, h], trace, [1] * len(trace)) if f[0] == "preempt-of"]
    assert [f[-1] for f in preempt_of] == [reach]


def test_an_arrival_while_a_prompt_is_half_done_contends_with_it() -> None:
    """The new request arrives the step after one where a prompt was half done
    (by the parent's trace), more urgent than it, with priority preemption on and
    the pool cut to what the run held then plus at most the new prompt's pages and
    one, but not below what every request needs; with priorities off it is as
    urgent, and a pinned pool stays."""
    v = RequestSpec("v", tuple(range(12)), 2, priority=2)
    w = Workload(replace(CFG, priority_preemption=False), (v, RequestSpec("d", (9,), 1)))
    trace = [[Admit("v", 0), Prefill("v", 0, 4, 1)], [Prefill("v", 4, 8, 1)],
             [Prefill("v", 8, 12, 1)], [Token("v", 0, 1, 1)]]
    moments = RunNotes.of(w, trace, {}, []).mid_prompt
    assert moments == [(0, "v"), (1, "v")]
    rng = random.Random(5)
    for _ in range(50):
        m = arrive_mid_prompt(w, moments, [2, 4, 6, 6], rng, Limits(Shape(), PINNED))
        new = m.requests[-1]
        assert new.arrival in (1, 2) and new.priority == 1 and m.config.priority_preemption
        pages, floor = -(-len(new.prompt) // CFG.block_size), -(-13 // CFG.block_size)   # v: 13 positions
        cut = m.config.num_blocks
        assert cut == floor or [2, 4][new.arrival - 1] <= cut <= [2, 4][new.arrival - 1] + pages + 1
        assert not any(never_fits(r, m.config) for r in m.requests)
    flat = arrive_mid_prompt(w, moments, [2, 4], rng, Limits(Shape.parse("priorities=off"), {"num_blocks": 12}))
    assert flat.requests[-1].priority == 2 and flat.config.num_blocks == 12
    assert not flat.config.priority_preemption


def test_an_abort_the_step_after_a_preemption_takes_the_requester_or_the_victim() -> None:
    w = Workload(CFG, (RequestSpec("v", (1, 2, 3), 2), RequestSpec("h", (4,), 1, arrival=1, priority=-1)))
    trace = [[Admit("v", 0)], [Admit("h", 0)], [Preempt("v", "h", True)]]
    notes = RunNotes.of(w, trace, {}, [1, 2, 2])
    assert notes.preemptions == [(2, "v", "h")]
    rng = random.Random(0)
    aborted = set()
    for _ in range(30):
        m = abort_after_preemption(w, notes.preemptions, rng)
        aborted |= {(r.rid, r.abort_at) for r in m.requests if r.abort_at is not None}
    assert aborted == {("v", 3), ("h", 3)}
    unnamed = abort_after_preemption(w, [(2, "v", None)], rng)
    assert [(r.rid, r.abort_at) for r in unnamed.requests] == [("v", 3), ("h", None)]


def test_preemptions_of_a_half_done_prompt_are_noted() -> None:
    """Noted, with where its prefills since it came in started and reached and in
    how many chunks: a request preempted for another with part of its prompt
    computed since it came in; not one preempting itself, one past its prompt,
    nor one that computed nothing since it came back."""
    v, h = RequestSpec("v", tuple(range(8)), 2), RequestSpec("h", (9, 9), 2, priority=-1)
    w = Workload(CFG, (v, h))
    trace = [[Admit("v", 1), Prefill("v", 2, 3, 1)],
             [Prefill("v", 3, 5, 1), Admit("h", 0), Preempt("v", "h", True)],
             [Resume("v", 0, 0), Preempt("v", "h", True)],
             [Resume("v", 0, 0), Prefill("v", 0, 4, 1), Preempt("v", "v", True)],
             [Resume("v", 0, 0), Prefill("v", 0, 8, 1), Token("v", 0, 5, 1)],
             [Preempt("v", "h", True)]]
    notes = RunNotes.of(w, trace, {}, [])
    assert notes.mid_prompt_preemptions == [MidPromptPreemption(1, "v", 2, 5, 2)]
    assert [t for t, _, _ in notes.preemptions] == [1, 2, 3, 5]


def test_a_preemption_of_a_half_done_prompt_comes_back_with_other_page_and_chunk_numbers() -> None:
    """The same moment either on other pages under the same chunks (`repage`)
    or with a chunk that completes a page and runs into the next (2 to two pages
    and one, the budget above it): the victim's prompt (its tokens kept) grown
    so that as many chunks leave it half done with one to go, the pool grown by
    the pages they hold more, then one block less, more or none, never below
    what the grown prompt needs; with the chunk size pinned, always on other
    pages; with the pages pinned too, the pool alone."""
    v = RequestSpec("v", tuple(range(8)), 2)
    w = Workload(CFG, (v, RequestSpec("h", (9, 9), 2, priority=-1)))
    moment = [MidPromptPreemption(1, "v", 0, 3, 1)]   # one chunk of 3 (2 pages of 2)
    rng, bs = random.Random(7), CFG.block_size
    deltas, kinds = set(), Counter()
    for _ in range(80):
        m = regeometry_preemption(w, moment, rng, Limits(Shape(), PINNED))
        if m.config.block_size != bs:   # other pages, the same requests and chunks
            kinds["repaged"] += 1
            assert m.requests == w.requests and m.config.prefill_chunk_size == CFG.prefill_chunk_size
            continue
        kinds["rechunked"] += 1
        c, grown = m.config.prefill_chunk_size, m.requests[0].prompt
        assert 2 <= c <= 2 * bs + 1 and m.config.max_num_batched_tokens > c and m.requests[1] == w.requests[1]
        assert grown[:8] == v.prompt and len(grown) >= min(2 * c, MAX_PROMPT)
        base, floor = CFG.num_blocks + -(-c // bs) - 2, -(-(len(grown) + 1) // bs)
        assert m.config.num_blocks in {max(base + d, floor) for d in (-1, 0, 1)}
        deltas.add(m.config.num_blocks - base)
    assert deltas == {-1, 0, 1} and min(kinds.values()) > 25
    pinned = Limits(Shape(), {**PINNED, "prefill_chunk_size": 4})
    assert all(regeometry_preemption(w, moment, rng, pinned).config.block_size != bs for _ in range(20))
    pages_too = Limits(Shape(), {**PINNED, "prefill_chunk_size": 4, "block_size": bs})
    for _ in range(20):
        m = regeometry_preemption(w, moment, rng, pages_too)
        assert m.requests == w.requests and m.config.num_blocks - CFG.num_blocks in (-1, 0, 1)


def test_other_pages_keep_the_pool_s_positions_and_every_request_that_fitted() -> None:
    """`repage`: another page size (1 to twice the page and one), the pool
    holding about as many positions (one block more or fewer), raised where a
    request that fitted would not; a request that never fitted is not made to."""
    fits, huge = RequestSpec("a", tuple(range(9)), 3), RequestSpec("b", tuple(range(40)), 1)
    w = Workload(CFG, (fits, huge))   # 12 blocks of 2: 24 positions; "a" needs 11, "b" 40
    rng, sizes = random.Random(3), set()
    for _ in range(80):
        m = repage(w, rng)
        size = m.config.block_size
        sizes.add(size)
        near = round(24 / size)
        assert m.requests == w.requests and m.config.num_blocks in {near - 1, near, near + 1}
    assert sizes == {1, 3, 4, 5}
    assert fitting_pool(w, 2) == 6 and fitting_pool(w, 9) == 9   # "a": 11 positions, 6 pages of 2; "b" never fitted
    tight = Workload(replace(CFG, num_blocks=6), (fits,))   # 12 positions for 11: 2 pages of 5 would not do
    assert all(not never_fits(fits, repage(tight, rng).config) for _ in range(40))


def test_a_next_turn_is_a_prompt_and_what_its_run_produced() -> None:
    a = RequestSpec("a", (1, 2, 3), 4, arrival=2)
    w = Workload(CFG, (a,))
    rng = random.Random(3)
    for _ in range(40):
        turn = follow_up(w, {"a": (7, 8, 9, 10)}, rng).requests[-1]
        k = next((i for i in range(4) if turn.prompt[3 + i:4 + i] != (7 + i,)), 4)
        assert turn.prompt[:3] == (1, 2, 3) and k >= 1 and turn.arrival > a.arrival
    assert follow_up(w, {}, rng) == w   # nothing produced: nothing to follow


def test_mutants_keep_to_the_shape_and_the_pinned_fields() -> None:
    base = Workload(CFG, (RequestSpec("a", (1, 2, 3, 4, 5), 3), RequestSpec("b", (6, 7), 2, arrival=2)))
    shape = Shape.parse("priorities=off,aborts=off,oversized=off")
    limits = Limits(shape, PINNED)
    rng = random.Random(4)
    seen = 0
    for _ in range(400):
        w = mutate(base, rng, limits)
        if w is None:
            continue
        seen += 1
        assert all(getattr(w.config, k) == v for k, v in PINNED.items())
        assert len({r.priority for r in w.requests}) == 1 and all(r.abort_at is None for r in w.requests)
        assert not any(never_fits(r, w.config) for r in w.requests) and w != base
        assert len({r.rid for r in w.requests}) == len(w.requests)
    assert seen > 300
    assert not limits.allows(replace(base, requests=(replace(base.requests[0], priority=1), base.requests[1])))


def test_a_shared_prefix_ends_at_a_page_boundary_one_before_it_or_one_after() -> None:
    base = Workload(CFG, (RequestSpec("a", tuple(range(10, 19)), 1), RequestSpec("b", tuple(range(30, 39)), 1)))
    rng, ends = random.Random(1), set()
    for _ in range(300):
        w = share_prefix(base, rng)
        assert w is not None
        src, dst = sorted(w.requests, key=lambda r: r.prompt[0] != 10)
        if dst.prompt[0] == 10:   # a took b's prefix: swap roles
            src, dst = dst, src
        ends.add(next((k for k in range(9) if src.prompt[k] != dst.prompt[k]), 9))
    assert {1, 2, 3, 4, 5} <= ends


def test_a_stop_token_is_set_to_what_the_run_produced() -> None:
    base = Workload(CFG, (RequestSpec("a", (1, 2), 3), RequestSpec("b", (3,), 2)))
    rng = random.Random(2)
    stops = {stop_at_output(base, {"a": (7, 9, 11)}, rng).requests[0].stop_token for _ in range(40)}
    assert stops == {7, 9, 11}
    assert not Limits(Shape(), PINNED).allows(replace(base, requests=(replace(base.requests[0], stop_token=64),)))


def test_the_corpus_keeps_what_is_new_and_aims_at_what_is_rare() -> None:
    limits = Limits(Shape(), PINNED)
    w = Workload(CFG, (RequestSpec("a", (1, 2, 3), 2),))
    corpus = Corpus(limits, seed=3)
    assert corpus.note(w, {("edge", "common"), ("occupancy", 1)})
    assert not corpus.note(w, {("edge", "common")})
    for _ in range(5):
        corpus.note(w, {("edge", "common")})
    rare = Workload(CFG, (RequestSpec("b", (4, 5, 6, 7), 1),))
    assert corpus.note(rare, {("edge", "common"), ("edge", "rare")})
    assert corpus.counts[("edge", "rare")] == 1 and corpus.showing[("edge", "rare")] == [1]
    assert ("occupancy", 1) not in corpus.showing   # novelty only: never a target
    twin = Corpus(limits, seed=3)
    twin.entries, twin.counts, twin.showing = list(corpus.entries), Counter(corpus.counts), dict(corpus.showing)
    twin.of_kind = {kind: list(features) for kind, features in corpus.of_kind.items()}
    twin.unserved = list(corpus.unserved)
    assert twin.next_round() == corpus.next_round()   # the same seed and state: the same round
    assert corpus.target() in (("edge", "rare"), ("edge", "common"))


def test_what_other_campaigns_keep_arrives_mid_run(tmp_path: Path) -> None:
    """Two campaigns' corpora on one shared database: what one keeps arrives at
    the other when it next looks (once), never at the one that kept it; entries
    outside a campaign's limits stay out of it."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    database, key = DirectoryBasedExampleDatabase(str(tmp_path)), b"loopcheck:corpus:test"
    one, other = (Corpus(Limits(Shape(), PINNED), seed=s, database=database, key=key) for s in (1, 2))
    assert one.saved() == other.saved() == [] and other.arrived() == []
    w = Workload(CFG, (RequestSpec("a", (1, 2, 3), 2),))
    assert one.note(w, {("edge", "x")})
    assert one.arrived() == [] and other.arrived() == [w] and other.arrived() == []
    stop_out_of_vocabulary = Workload(CFG, (RequestSpec("b", (1, 2), 3, stop_token=64),))
    assert not Limits(Shape(), PINNED).allows(stop_out_of_vocabulary)
    one.note(stop_out_of_vocabulary, {("edge", "y")})
    assert other.arrived() == []


def test_a_new_entry_gets_the_next_round_newest_first(monkeypatch) -> None:
    """Every entry has half a round to itself, the newest first, before any
    round aimed at a feature; then none is left waiting for its turn."""
    monkeypatch.setattr("loopcheck.fuzz.corpus.SPLICED", 0.0)   # (a mutant of one request keeps its id)
    corpus = Corpus(Limits(Shape(), PINNED), seed=5)
    for rid, prompt in (("a", (1, 2, 3)), ("b", (7, 8, 9, 10, 11))):
        corpus.note(Workload(CFG, (RequestSpec(rid, prompt, 2),)), {("edge", rid)})
    half = corpus.per_round // 2
    for newest in ("b", "a"):
        mutants = corpus.next_round()
        assert len(mutants) == corpus.per_round and all(newest in {r.rid for r in m.requests} for m in mutants[:half])
    assert corpus.unserved == []


def test_a_round_aims_at_the_rarest_features_the_newest_first() -> None:
    """Among features seen as often, the ones found last are aimed at (what a
    new entry reached is the way further); a rarer old one still comes first."""
    corpus = Corpus(Limits(Shape(), PINNED), seed=2)
    w = Workload(CFG, (RequestSpec("a", (1, 2, 3), 2),))
    for k in range(7):
        corpus.note(w, {("edge", k)})
    assert {corpus.target() for _ in range(40)} == {("edge", k) for k in (3, 4, 5, 6)}
    corpus.note(w, {("edge", k) for k in range(1, 7)} | {("edge", "new")})   # all but edge 0 seen twice
    assert {corpus.target() for _ in range(40)} == {("edge", 0), ("edge", "new"), ("edge", 6), ("edge", 5)}


@pytest.mark.parametrize("bug, prop, other", [("stale-hash", "kv-hit-blocks", "kv-tables"),
                                              ("hit-no-ref", "kv-tables", "kv-hit-blocks")])
def test_guidance_from_the_system_finds_prefix_cache_bugs_of_a_scheduler_it_did_not_write(bug, prop, other,
                                                                                         tmp_path) -> None:
    """Bugs of the benchmark scheduler's prefix cache (an evicted block's hash
    kept: a hit reads a block that now holds other tokens; a hit that takes no
    reference, so the block is reused under it: two tables share it), found from
    scratch within a work bound by a campaign guided by the system alone; each
    breaks both block-table properties, and the one that is not its own is
    ignored, as a user would --ignore it. The file replays clean on the
    scheduler without the bug."""
    result = run_campaign(CampaignSettings("guarded", 600, 1, tmp_path, "random", factory=factory(bug),
                          checks=CheckSet("property", frozenset({other})), max_examples=3000, max_replays=50,
                          guidance="system"))
    assert result.violation is not None and result.violation.prop == prop
    clean = run_workload(load_workload(result.counterexample), factory(), CheckSet("property").build())
    assert clean.violation is None and clean.drained   # the same workload, the bug not planted


def test_a_guided_campaign_is_the_same_whatever_the_string_hash_seed(tmp_path: Path) -> None:
    """Same seed, same campaign, byte for byte, in processes whose string hashes
    differ (features hold file names; a set of them iterates in another order)."""
    import json
    import os
    import subprocess
    import sys

    subject = str(Path(__file__).parent.parent / "benchmarks/subjects/hashsched.py")
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / hash_seed
        done = subprocess.run([sys.executable, "-m", "loopcheck.cli", "fuzz", "--adapter", f"{subject}:clean",
                               "--max-examples", "250", "--budget-seconds", "600", "--seed", "4", "--out", str(out),
                               "--json"], env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True,
                              text=True, check=True)
        summary = json.loads(done.stdout.splitlines()[-1])
        outputs.append((summary["examples"], summary["steps"], summary["guidance"], summary["branches_covered"]))
    assert outputs[0] == outputs[1] and outputs[0][2]["corpus entries"] > 0
