"""Window-directed generation: the windows read from a model run, the variants
aimed at them, and a planted engine bug that only a directed window exposes."""

from __future__ import annotations

import random

from loopcheck.checks.suite import CheckSet
from loopcheck.fuzz import directed
from loopcheck.fuzz.campaign import directed_configs, run_campaign
from loopcheck.fuzz.directed import Director, sized_arrival, variants, windows_of
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.strategies import Shape
from loopcheck.model.config import Config
from loopcheck.model.reference import never_fits
from loopcheck.model.workload import RequestSpec, Workload

# j prefills an 8-token prompt two tokens a step; v holds one page; i arrives more
# urgent, sharing three of j's pages, two still unpublished: the guarded preflight
# counts those as hits and preempts v, but admission does not, so i stays out.
FUTILE = Workload(Config(num_blocks=6, block_size=2, max_num_seqs=4, max_num_batched_tokens=4, prefill_chunk_size=2,
                         num_loops=1, kv_layout="shared", wcpb=False, prefix_caching=True),
                  (RequestSpec("j", tuple(range(1, 9)), 1, priority=2), RequestSpec("v", (30,), 2, priority=3),
                   RequestSpec("i", tuple(range(1, 7)) + (40,), 1, arrival=1, priority=0)))


def test_windows_are_read_from_the_model_run() -> None:
    opened, moments = windows_of(FUTILE)
    assert {"preempt+futile", "guard+recorded", "guard+cleared"} <= set(opened)
    assert opened["preempt+futile"] == 1
    assert any(j == 0 for j, *_ in moments.prefilling)        # j holds unpublished prompt pages
    plain = FUTILE.with_config(priority_preemption=False)
    assert "preempt+futile" not in windows_of(plain)[0]


def test_a_sized_arrival_opens_the_futile_window_from_a_prefilling_moment() -> None:
    """Without i, the model run shows j prefilling; the arrival sized from that
    moment reproduces a futile preemption (whatever tail tokens it draws)."""
    base = Workload(FUTILE.config, FUTILE.requests[:2])
    _, moments = windows_of(base)
    j, t, first, end = next(m for m in moments.prefilling if m[0] == 0)
    opened = 0
    for seed in range(10):
        arrival = sized_arrival(base, moments.states[t], j, end, end - first, random.Random(seed), True)
        if arrival is None:       # the drawn size left no room for the prompt it shares
            continue
        assert arrival.priority < min(r.priority for r in base.requests) and arrival.arrival == t
        opened += windows_of(Workload(base.config, base.requests + (arrival,)))[0]["preempt+futile"] > 0
    assert opened >= 5


def test_variants_keep_to_the_shape() -> None:
    _, moments = windows_of(FUTILE)
    rng = random.Random(0)
    calm = Shape.parse("aborts=off,priorities=off")
    for v in variants(FUTILE, moments, rng, calm):
        assert all(r.abort_at is None for r in v.requests)
        assert {r.priority for r in v.requests[len(FUTILE.requests):]} <= {FUTILE.requests[0].priority}


def test_directed_rounds_keep_every_request_within_the_pool_when_oversized_is_off(monkeypatch) -> None:
    """Follow-up arrivals are sized from the pages a moment holds, which can pass
    the pool (here: always, where the workload opens a window); with oversized
    off a round drops such a workload, as it drops a drawn one."""
    def oversized_follow_up(w: Workload, *_) -> list[Workload]:
        huge = RequestSpec("huge", (1,) * (w.config.max_positions + 1), 1)
        return [Workload(w.config, w.requests + (huge,))] if windows_of(w)[0] else []

    monkeypatch.setattr(directed, "readmission_variants", oversized_follow_up)

    def never_fitting(shape: Shape) -> int:
        d = Director(directed_configs("random", "guarded", {}), 6, 13, shape, runs=10_000)   # every candidate runs
        return sum(any(never_fits(r, w.config) for r in w.requests) for _ in range(2) for w, _ in d.next_round())

    assert never_fitting(Shape.parse("oversized=on")) > 0
    assert never_fitting(Shape.parse("oversized=off")) == 0


def test_director_rounds_are_deterministic_and_reach_rare_windows() -> None:
    def rounds(seed: int) -> tuple[list[Workload], dict]:
        d = Director(directed_configs("random", "guarded", {}), 6, seed)
        chosen = [w for _ in range(4) for w in d.next_round()]
        return chosen, dict(d.seen)

    first, seen = rounds(1)
    assert rounds(1) == (first, seen)
    assert seen.get("abort+preempted", 0) > 0 and seen.get("bypass+limit", 0) > 0
    assert seen.get("preempt+futile", 0) > 0 and seen.get("guard+recorded", 0) > 0


def test_a_snapshot_kept_after_an_abort_is_found_by_a_directed_window(monkeypatch, tmp_path) -> None:
    """A planted engine bug that needs an abort while preempted with snapshots on:
    the directed rounds place the abort, and the kv check sees the snapshot."""
    from loopcheck.engine.scheduler import Scheduler

    original = Scheduler.end

    def end(self, seq, reason):
        snapshot = seq.snapshot
        original(self, seq, reason)
        seq.snapshot = snapshot               # the CPU snapshot stays

    monkeypatch.setattr(Scheduler, "end", end)
    result = run_campaign(CampaignSettings(
        "guarded", 600, 1, tmp_path, mode="random", max_examples=400, max_replays=30))
    assert result.violation is not None and result.violation.prop == "kv-conservation"
    assert "snapshot" in result.violation.message


def test_a_preflight_without_the_watermark_is_caught_without_a_reference(monkeypatch, tmp_path) -> None:
    """A policy-level bug planted in the model itself (the system under test and
    the reference at once, so lockstep cannot see it): the guarded preflight
    forgets the watermark, so it preempts for requests that admission then
    refuses. The futile-preemption property finds it."""
    from loopcheck.model import reference
    from loopcheck.sut.model_sut import ModelSUT

    original = reference._Step.preflight
    monkeypatch.setattr(reference._Step, "preflight",
                        lambda self, i, v, others, active: original(self, i, v, others, False))
    result = run_campaign(CampaignSettings(
        "guarded", 600, 1, tmp_path, mode="random", factory=ModelSUT, checks=CheckSet("property"), max_examples=200,
        max_replays=30))
    assert result.violation is not None and result.violation.prop == "futile-preemption"
