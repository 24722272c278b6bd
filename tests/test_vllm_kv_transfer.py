"""vLLM's KV transfer through the adapter (adapters/vllm_kv_connector.py): its
asynchronous loads through a KV connector (WAITING_FOR_REMOTE_KVS, the
KV-holding queue), a failed load recomputed, a request aborted during its load
holding its blocks until the load ends, and loaded pages hit by a later
request; judged by the property checks. A failure the scheduler never hears of
is found.

Needs the vLLM extra (scripts/install-engine.sh vllm, which CI runs); without it
these tests are skipped with that reason, visibly."""

from __future__ import annotations

import importlib.util
from functools import partial

import pytest

from loopcheck.checks.suite import CheckSet
from loopcheck.driver.driver import run_workload
from loopcheck.model.config import Config
from loopcheck.model.events import Admit, Load, Preempt, Prefill, Token
from loopcheck.model.workload import RequestSpec, Workload
from tests.vllm_workloads import vllm_workload as shared_workload

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM is not installed: run scripts/install-engine.sh vllm")


vllm_workload = partial(shared_workload, num_blocks=12, block_size=2, max_num_seqs=3, max_num_batched_tokens=8,
                        prefill_chunk_size=8)   # (a call's fields override these)


def events_of(run, rid: str) -> list[tuple[int, object]]:
    return [(t, e) for t, events in enumerate(run.driver.trace) for e in events if e.rid == rid]


def held_after_each_step(w: Workload) -> tuple[object, list[int]]:
    from loopcheck.adapters.vllm_sut import VllmSUT

    held: list[int] = []
    run = run_workload(w, VllmSUT, CheckSet("property").build(), on_step=lambda events, obs: held.append(
        obs.blocks_held))
    return run, held


def test_a_load_holds_its_blocks_until_it_ends_and_the_request_runs_on_what_it_loaded() -> None:
    run, held = held_after_each_step(vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2, kv_load_steps=2)))
    assert run.violation is None and run.drained
    a = events_of(run, "a")
    assert (0, Load("a", 0, 4)) in a and (2, Admit("a", 0)) in a   # loaded in steps 0 and 1, admitted in step 2
    assert not [e for _, e in a if isinstance(e, Prefill)]           # position 4 is decoded: 0..4 came loaded
    assert held[:2] == [2, 2] and run.observation.outputs["a"].finish_reason == "length"


def test_a_failed_load_is_recomputed_and_gives_the_same_tokens() -> None:
    failed, _ = held_after_each_step(vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2, kv_load_steps=1,
                                                               kv_load_fails=True)))
    plain, _ = held_after_each_step(vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2)))
    assert failed.violation is None and failed.drained
    a = events_of(failed, "a")
    assert (0, Load("a", 0, 4)) in a and (1, Admit("a", 0)) in a and (1, Prefill("a", 0, 5)) in a
    assert failed.observation.outputs["a"].token_ids == plain.observation.outputs["a"].token_ids


def test_a_request_aborted_during_its_load_keeps_its_blocks_until_the_load_ends() -> None:
    run, held = held_after_each_step(vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2, kv_load_steps=3,
                                                               abort_at=1)))
    assert run.violation is None and run.drained
    assert held == [2, 2, 0]   # aborted in step 1; the load ends with step 2's output, and the blocks go back


def test_a_later_request_hits_the_pages_a_load_brought() -> None:
    run, _ = held_after_each_step(vllm_workload(
        RequestSpec("a", (1, 2, 3, 4, 5), 6, kv_load_steps=1), RequestSpec("b", (1, 2, 3, 4, 9), 2, arrival=3),
        prefix_caching=True))
    assert run.violation is None and run.drained
    assert (3, Admit("b", 2)) in events_of(run, "b")   # two pages, computed by nobody here but loaded


def test_a_failure_the_scheduler_never_hears_of_is_found() -> None:
    """The connector reports the failed load as finished but names none of its
    blocks: vLLM takes the positions as loaded, and the request's token comes
    without them computed."""
    from loopcheck.adapters.vllm_sut import VllmSUT

    class SilentFailures(VllmSUT):
        def __init__(self, cfg: Config) -> None:
            super().__init__(cfg)
            finished = self.connector.finished

            def without_invalid_blocks():
                output, _ = finished()
                if output is not None:
                    output.invalid_block_ids = set()
                return output, []
            self.connector.finished = without_invalid_blocks

    w = vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2, kv_load_steps=1, kv_load_fails=True))
    run = run_workload(w, SilentFailures, CheckSet("property").build())
    assert run.violation is not None and run.violation.signature == "work.token-uncomputed", run.violation
    assert any(isinstance(e, Token) for _, e in events_of(run, "a"))


def connector_reporting(ends_early: int, ends: bool):
    """The vLLM adapter whose connector reports each load's end `ends_early`
    steps before its time, or, unless `ends`, never."""
    from loopcheck.adapters.vllm_sut import VllmSUT

    class Misreported(VllmSUT):
        def __init__(self, cfg: Config) -> None:
            super().__init__(cfg)
            connector, finished = self.connector, self.connector.finished

            def misreported():
                if not ends:
                    return None, []
                connector.step += ends_early
                try:
                    return finished()
                finally:
                    connector.step -= ends_early
            connector.finished = misreported
    return Misreported


@pytest.mark.parametrize(("ends_early", "ends", "signature"), [(1, True, "kv-load.before-loaded"),
                                                               (0, False, "kv-load.ready-idle")])
def test_a_load_ended_early_or_never_breaks_its_rule(ends_early, ends, signature) -> None:
    w = vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2, kv_load_steps=2))
    run = run_workload(w, connector_reporting(ends_early, ends), CheckSet("property").build())
    assert run.violation is not None and run.violation.signature == signature, run.violation


def test_a_load_of_a_request_with_nothing_to_load_breaks_its_rule() -> None:
    from loopcheck.adapters.vllm_sut import VllmSUT

    class LoadsAll(VllmSUT):
        def add(self, spec: RequestSpec) -> None:
            super().add(spec)
            self.connector.offer(spec.rid, 1, False)

    run = run_workload(vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2)), LoadsAll, CheckSet("property").build())
    assert run.violation is not None and run.violation.signature == "kv-load.unasked", run.violation


def test_a_load_past_the_positions_a_request_has_breaks_its_rule() -> None:
    from loopcheck.adapters.vllm_sut import VllmSUT

    class Overloads(VllmSUT):
        def step(self):
            return [Load(e.rid, e.start, e.end + 9) if isinstance(e, Load) else e for e in super().step()]

    w = vllm_workload(RequestSpec("a", (1, 2, 3, 4, 5), 2, kv_load_steps=1))
    run = run_workload(w, Overloads, CheckSet("property").build())
    assert run.violation is not None and run.violation.signature == "kv-load.past-known", run.violation


def test_a_request_preempted_for_blocks_an_aborted_load_still_holds_is_not_alone() -> None:
    """(Found by `loopcheck fuzz --adapter vllm --seed 3` with every feature on.)
    b is aborted while its load is in flight; vLLM keeps b's blocks until the
    load ends, so a, decoding, finds the pool full and vLLM preempts it: not a
    lone preemption, as b's load still holds blocks."""
    w = vllm_workload(RequestSpec("c", (11, 34, 47), 2),
                      RequestSpec("b", (14, 19, 43, 40, 17, 18), 1, abort_at=4, kv_load_steps=3),
                      RequestSpec("a", (0, 11, 55, 56, 34), 2),
                      num_blocks=12, block_size=1, max_num_seqs=3, max_num_batched_tokens=6, prefill_chunk_size=2,
                      spec_tokens=1)
    run, held = held_after_each_step(w)
    a = events_of(run, "a")
    assert run.violation is None and run.drained, run.violation
    # b aborted in step 4 with its load in flight: 11 of 12 blocks held (b's 6), a preempted by itself in step 5
    assert held[4] == 11 and (5, Preempt("a", "a", True)) in a
    assert run.observation.outputs["a"].finish_reason == "length"
