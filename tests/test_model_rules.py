"""One hand-checked case per scheduling rule of docs/semantics.md."""

from __future__ import annotations

from loopcheck.model.reference import page_hash, total_pages
from loopcheck.model.state import FINISHED, PREEMPTED, RUNNING, WAITING
from tests.helpers import kinds, req, run_steps, workload

SMALL = dict(num_blocks=6, block_size=2, num_loops=2, kv_layout="shared", wcpb=False,
             max_num_batched_tokens=16, prefill_chunk_size=16)


def test_admission_in_priority_order_skips_what_does_not_fit() -> None:
    # x needs ceil((9+2-1)/2)=5 blocks, y 3, z 1; the pool has 6.
    w = workload(req("y", 5, 2, priority=1), req("x", 9, 2, priority=0),
                 req("z", 1, 2, priority=2), **SMALL)
    state, trace = run_steps(w, 1)
    assert [e.kind + e.rid for e in trace[0] if e.kind == "admit"] == ["admitx", "admitz"]
    y, x, z = state.reqs
    assert (x.status, y.status, z.status) == (RUNNING, WAITING, RUNNING)
    assert y.bypasses == 1 and len(x.pages) == 5 and len(z.pages) == 1 and state.free == 0


def test_bypass_limit_stops_fresh_admission_past_a_starved_request() -> None:
    def step_1_admits(max_bypasses: int) -> list[str]:
        w = workload(req("x", 9, 2), req("y", 5, 2, priority=1),
                     req("z", 1, 1, priority=2), req("u", 1, 1, priority=3, arrival=1),
                     **dict(SMALL, max_bypasses=max_bypasses))
        state, trace = run_steps(w, 2)
        assert "admit(z, 0)" in kinds(trace[0]) and state.reqs[1].bypasses >= 1
        return [e.rid for e in trace[1] if e.kind == "admit"]

    # step 0: z bypasses y; step 1: one block is free for u, but y was already
    # bypassed max_bypasses=1 times, so u may not pass it; with a limit of 2 it may.
    assert step_1_admits(1) == []
    assert step_1_admits(2) == ["u"]


def test_slot_limit() -> None:
    w = workload(req("a", 2, 3), req("b", 2, 3, priority=1), **dict(SMALL, max_num_seqs=1))
    state, _ = run_steps(w, 1)
    assert [r.status for r in state.reqs] == [RUNNING, WAITING]


def test_chunk_is_cut_to_the_token_budget_and_chunk_size() -> None:
    w = workload(req("a", 7, 1), **dict(SMALL, max_num_batched_tokens=3, prefill_chunk_size=4))
    state, trace = run_steps(w, 3)
    assert [str(e) for e in trace[0] if e.kind == "prefill"] == ["prefill(a, 0, 3, 2)"]
    assert [str(e) for e in trace[1] if e.kind == "prefill"] == ["prefill(a, 3, 6, 2)"]
    assert kinds(trace[2])[-3:] == ["prefill(a, 6, 7, 2)", "token(a, 0, 0, 2)", "finish(a, length)"]
    assert state.free == 6


def test_wcpb_runs_one_depth_per_step() -> None:
    w = workload(req("a", 2, 1), **dict(SMALL, num_loops=3, wcpb=True))
    state, trace = run_steps(w, 3)
    assert [str(e) for evs in trace for e in evs if e.kind in ("prefill", "token")] == [
        "prefill(a, 0, 2, 1)", "prefill(a, 0, 2, 2)", "prefill(a, 0, 2, 3)", "token(a, 0, 0, 3)"]
    assert state.reqs[0].status == FINISHED


def test_refill_separates_stages_mixed_shares_them() -> None:
    def batch_of_step_1(execution: str) -> list[str]:
        w = workload(req("a", 2, 4), req("b", 2, 2, priority=1, arrival=1),
                     **dict(SMALL, execution=execution))
        _, trace = run_steps(w, 2)
        return [str(e) for e in trace[1] if e.kind in ("prefill", "token")]

    assert batch_of_step_1("refill") == ["token(a, 1, 1, 2)"]
    assert batch_of_step_1("mixed") == ["token(a, 1, 1, 2)", "prefill(b, 0, 2, 2)",
                                        "token(b, 0, 0, 2)"]


PREEMPT = dict(num_blocks=8, block_size=2, num_loops=3, kv_layout="shared", wcpb=True,
               max_num_batched_tokens=8, prefill_chunk_size=2, max_num_seqs=4)


def test_preemption_rewinds_an_unfinished_wcpb_chunk_to_the_frontier() -> None:
    # v: prompt 6 -> pages ceil(7/2)=4; w needs ceil((4+3-1)/2)=3 pages; pool 8 - 4 - 4(filler).
    w = workload(req("v", 6, 2, priority=5), req("f", 6, 2, priority=1),
                 req("w", 4, 3, priority=0, arrival=4), **PREEMPT)
    state, trace = run_steps(w, 5)
    v = state.reqs[0]
    # v finished chunk [0,2) at step 2, started [2,4) at step 3 (depth 1), then w came.
    assert kinds(trace[4])[:4] == ["arrive(w)", "rewind(v, 2)", "preempt(v, w, True)",
                                   "admit(w, 0)"]
    assert (v.status, v.frontier, v.chunk_end, v.chunk_depth, v.pages) == (PREEMPTED, 2, 2, 0, ())


def test_snapshot_restores_a_decoding_request() -> None:
    w = workload(req("v", 2, 4, priority=5), req("f", 6, 2, priority=1),
                 req("w", 4, 3, priority=0, arrival=5), **PREEMPT)
    state, trace = run_steps(w, 6)
    assert "preempt(v, w, True)" in kinds(trace[5])
    v = state.reqs[0]
    assert (v.frontier, v.generated) == (2, 3)
    # it resumes once w and f are done, with positions 0..P+g-2 restored, and decodes token 3
    state, trace = run_steps(w, 30)
    resume = [e for evs in trace for e in evs if e.kind == "resume" and e.rid == "v"]
    assert [(e.hit_pages, e.restored) for e in resume] == [(0, 4)]
    tokens = [e.index for evs in trace for e in evs if e.kind == "token" and e.rid == "v"]
    assert tokens == [0, 1, 2, 3]


def test_without_snapshots_a_victim_restarts_from_scratch() -> None:
    w = workload(req("v", 2, 4, priority=5), req("f", 6, 2, priority=1),
                 req("w", 4, 3, priority=0, arrival=5), **dict(PREEMPT, snapshots=False))
    state, trace = run_steps(w, 6)
    assert "preempt(v, w, False)" in kinds(trace[5])
    v = state.reqs[0]
    assert (v.frontier, v.generated, v.status) == (0, 0, PREEMPTED)


def test_victim_is_the_least_urgent_latest_arrival() -> None:
    cfg = dict(PREEMPT, num_blocks=6, block_size=4, wcpb=False)
    # a, b, c hold 2 blocks each (prompt 2, max 7 -> 2 pages of 4); u needs 1, w needs 2.
    w = workload(req("a", 2, 7, priority=3), req("b", 2, 7, priority=3, arrival=1),
                 req("c", 2, 7, priority=1), req("w", 2, 4, priority=1, arrival=3),
                 req("u", 2, 2, priority=0, arrival=3), **cfg)
    _, trace = run_steps(w, 4)
    # u preempts b (priority 3, later arrival than a), then w preempts a; c, in the
    # batch already, is never a victim.
    assert [str(e) for e in trace[3] if e.kind == "preempt"] == [
        "preempt(b, u, True)", "preempt(a, w, True)"]


def test_an_equal_priority_request_is_never_a_victim() -> None:
    cfg = dict(PREEMPT, num_blocks=6, block_size=4, wcpb=False, preemption_policy="unguarded")
    w = workload(req("r0", 2, 15, priority=0), req("w", 2, 11, priority=1, arrival=1),
                 req("c", 2, 7, priority=1, arrival=2), **cfg)
    state, trace = run_steps(w, 4)
    assert "admit(c, 0)" in kinds(trace[2])  # c bypassed w, which needs 3 blocks
    assert not any(e.kind == "preempt" for evs in trace for e in evs)
    assert state.reqs[1].status == WAITING


LONG = dict(PREEMPT, num_blocks=8, block_size=4, wcpb=False)


def test_guarded_skips_a_victim_that_would_not_make_room() -> None:
    # s holds 2 blocks, t 6, big needs all 8: no single victim makes room.
    reqs = (req("s", 2, 7, priority=9), req("t", 10, 15, priority=5),
            req("big", 14, 19, priority=0, arrival=2))
    _, guarded = run_steps(workload(*reqs, **LONG), 3)
    _, unguarded = run_steps(workload(*reqs, **dict(LONG, preemption_policy="unguarded")), 3)
    assert [str(e) for e in unguarded[2] if e.kind == "preempt"] == ["preempt(s, big, True)"]
    assert not any(e.kind == "admit" for e in unguarded[2])
    assert [str(e) for e in guarded[2] if e.kind == "preempt"] == []


def test_guarded_picks_the_next_victim_that_makes_room() -> None:
    reqs = (req("s", 2, 7, priority=9), req("t", 10, 15, priority=5),
            req("w", 10, 15, priority=0, arrival=2))
    _, trace = run_steps(workload(*reqs, **LONG), 3)
    assert kinds(trace[2])[:3] == ["arrive(w)", "preempt(t, w, True)", "admit(w, 0)"]


FUTILE = dict(num_blocks=7, block_size=2, num_loops=2, kv_layout="shared", wcpb=True,
              prefix_caching=True, max_num_batched_tokens=8, prefill_chunk_size=4)


def futile_case(policy: str, steps: int):
    p = req("p", 5, 2, priority=1)            # 3 pages; prefills the prefix w shares
    v = req("v", 2, 3, priority=9, base=40)   # 2 pages
    w = req("w", 5, 5, priority=0, arrival=1)  # 5 pages, 2 of them hits once p publishes
    return run_steps(workload(p, v, w, **dict(FUTILE, preemption_policy=policy)), steps)


def test_guarded_preflight_counts_pending_prefix_pages_and_the_guard_stops_a_repeat() -> None:
    state, trace = futile_case("guarded", 2)
    # step 1: free 2; preflight after v: 4 free >= 5 - 2 pending hits -> preempt v;
    # but p publishes only at the end of the step, so w needs 5 > 4 and is not admitted.
    assert kinds(trace[1])[:3] == ["arrive(w)", "rewind(v, 0)", "preempt(v, w, True)"]
    assert not any(e.kind == "admit" for e in trace[1])
    assert "resume(v, 0, 0)" in kinds(trace[1])
    assert (2, 2) in state.guard
    state, trace = futile_case("guarded", 6)
    preempts = [e for evs in trace for e in evs if e.kind == "preempt"]
    assert len(preempts) == 1


def test_unguarded_repeats_the_futile_preemption() -> None:
    _, trace = futile_case("unguarded", 4)
    preempts_for_w = [t for t, evs in enumerate(trace) for e in evs
                      if e.kind == "preempt" and e.by == "w"]
    assert preempts_for_w[:2] == [1, 2]


def test_prefix_hits_share_pages_with_holder_counts() -> None:
    cfg = dict(num_blocks=12, block_size=2, num_loops=2, kv_layout="shared", wcpb=False,
               prefix_caching=True, max_num_batched_tokens=16, prefill_chunk_size=16)
    a = req("a", 5, 4)
    b = req("b", 5, 1, arrival=1)
    state, trace = run_steps(workload(a, b, **cfg), 2)
    assert [str(e) for e in trace[0] if e.kind == "publish"] == ["publish(a, 0)", "publish(a, 1)"]
    assert "admit(b, 2)" in kinds(trace[1])
    assert sorted(h for _, h in state.cache) == [1, 1]  # b finished; a still holds both
    state, _ = run_steps(workload(a, b, **cfg), 4)
    assert all(h == 0 for _, h in state.cache)  # cache-only, counted as free
    assert state.free_count(1) == 12 and state.free == 10


def test_cache_only_pages_are_evicted_oldest_first() -> None:
    cfg = dict(num_blocks=4, block_size=2, num_loops=2, kv_layout="shared", wcpb=False,
               prefix_caching=True, max_num_batched_tokens=16, prefill_chunk_size=16)
    a = req("a", 4, 1)                        # publishes 2 pages, then finishes
    b = req("b", 6, 1, arrival=1, base=30)    # needs 3 pages: 2 free + 1 evicted
    state, trace = run_steps(workload(a, b, **cfg), 2)
    assert "admit(b, 0)" in kinds(trace[1])
    cached = {h for h, _ in state.cache}
    assert page_hash(a.prompt[:2]) not in cached   # a's page 0 lost its holder first
    assert page_hash(a.prompt[:4]) in cached
    assert state.free == 0 and len(cached) == 4   # b's three pages + a's page 1


def test_watermark_applies_only_while_something_runs() -> None:
    cfg = dict(SMALL, watermark_blocks=2)
    alone = workload(req("x", 11, 2), **cfg)          # needs all 6 blocks
    state, _ = run_steps(alone, 1)
    assert state.reqs[0].status == RUNNING
    busy = workload(req("s", 1, 3), req("x", 7, 2, arrival=1), **cfg)  # x needs 4, s holds 2
    state, _ = run_steps(busy, 2)
    assert state.reqs[1].status == WAITING


def test_a_request_that_can_never_fit_is_rejected_at_once() -> None:
    w = workload(req("huge", 20, 5), req("ok", 2, 1), **SMALL)
    state, trace = run_steps(w, 1)
    assert kinds(trace[0])[:3] == ["arrive(huge)", "reject(huge, needs 12 blocks, pool has 6)",
                                   "finish(huge, rejected)"]
    assert state.reqs[0].finish == "rejected" and state.reqs[1].finish == "length"


def test_abort_releases_everything_in_every_state() -> None:
    cfg = dict(PREEMPT, num_blocks=8)
    w = workload(req("mid", 6, 2, priority=5, abort_at=2),        # mid-WCPB chunk
                 req("f", 6, 2, priority=1),
                 req("wt", 4, 3, priority=2, abort_at=1),          # waiting
                 req("pre", 2, 4, priority=6),                     # will be preempted
                 **cfg)
    state, trace = run_steps(w, 12)
    assert "abort(wt)" in kinds(trace[1]) and "abort(mid)" in kinds(trace[2])
    assert state.reqs[0].pages == () and state.reqs[2].pages == ()
    assert all(r.status == FINISHED for r in state.reqs)
    assert state.free == 8


def test_incremental_growth_preempts_a_less_urgent_request_or_itself() -> None:
    cfg = dict(SMALL, num_blocks=3, allocation="incremental")
    w = workload(req("a", 2, 4, priority=0), req("b", 2, 4, priority=1), **cfg)
    state, trace = run_steps(w, 2)
    # step 0: both admitted with 1 page each; step 1: a decodes position 2 -> needs a
    # second page; 1 free -> grows; b decodes position 2 -> no room: preempts itself.
    assert "preempt(b, b, True)" in kinds(trace[1])
    assert len(state.reqs[0].pages) == 2 and state.reqs[1].status == PREEMPTED


def test_stop_token_finishes_early() -> None:
    w = workload(req("a", 2, 9, stop_token=3), **SMALL)
    state, trace = run_steps(w, 6)
    assert state.reqs[0].finish == "stop" and state.reqs[0].generated == 4


def test_a_prompt_only_request_computes_its_prompt_and_finishes_without_a_token() -> None:
    """max_tokens 0: p (5 tokens, chunks of 3 on WCPB with 2 depths) needs its
    prompt's 3 pages, not ceil((5 - 1) / 2) = 2; its last chunk at depth 2 ends it
    with `length` and no token, after it publishes its full pages; the torch
    engine, in lockstep with the model, does the same."""
    from loopcheck.adapters.torch_sut import TorchSUT
    from loopcheck.checks.suite import checks_for
    from loopcheck.driver.driver import run_workload

    w = workload(req("p", 5, 0), req("q", 4, 2, arrival=1), **{**SMALL, "wcpb": True, "prefix_caching": True,
                                                               "prefill_chunk_size": 3})
    assert total_pages(w.requests[0], w.config) == 3
    state, trace = run_steps(w, 4)
    assert kinds(trace[0]) == ["arrive(p)", "admit(p, 0)", "prefill(p, 0, 3, 1)"]
    assert state.reqs[0].status == FINISHED and state.reqs[0].generated == 0
    p_events = [str(e) for evs in trace for e in evs if e.rid == "p"]
    assert p_events[-3:] == ["prefill(p, 3, 5, 2)", "publish(p, 1)", "finish(p, length)"]
    assert not any(e.startswith("token(p") for e in p_events)
    run = run_workload(w, TorchSUT, checks_for("lockstep"))
    assert run.violation is None and run.drained and run.observation.outputs["p"].token_ids == []
