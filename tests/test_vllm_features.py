"""vLLM's LoRA and structured-output scheduling through the adapter
(adapters/vllm_sut.py, adapters/vllm_grammar.py): its own max_loras skip, its
grammar waits (WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR) and a grammar never
compiled, judged by the property checks; and a campaign with the features on
that meets no finding where vLLM's known bugs are out of reach.

Needs the vLLM extra (scripts/install-engine.sh vllm, which CI runs); without it
these tests are skipped with that reason, visibly."""

from __future__ import annotations

import importlib.util
from functools import partial

import pytest

from loopcheck.checks.suite import CheckSet
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.strategies import Shape
from loopcheck.model.events import Admit
from loopcheck.model.workload import NEVER, RequestSpec
from tests.vllm_workloads import vllm_workload as shared_workload

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM is not installed: run scripts/install-engine.sh vllm")


# (a call's fields override these)
vllm_workload = partial(shared_workload, num_blocks=12, max_num_seqs=3, max_num_batched_tokens=8)


def admitted_at(run) -> dict[str, int]:
    return {e.rid: t for t, events in enumerate(run.driver.trace) for e in events if isinstance(e, Admit)}


def test_max_loras_holds_a_second_adapter_back_until_the_first_finishes() -> None:
    from loopcheck.adapters.vllm_sut import VllmSUT

    w = vllm_workload(RequestSpec("a", (1, 2, 3), 3, lora=1), RequestSpec("b", (4, 5, 6), 3, lora=2),
                      RequestSpec("c", (7, 8), 2, lora=1), max_loras=1)
    run = run_workload(w, VllmSUT, CheckSet("property").build())
    assert run.violation is None and run.drained
    finished = {e.rid: t for t, events in enumerate(run.driver.trace) for e in events if e.kind == "finish"}
    admitted = admitted_at(run)
    assert admitted["a"] == admitted["c"] == 0 and admitted["b"] == max(finished["a"], finished["c"]) + 1


def test_a_request_waits_for_its_grammar_and_one_never_compiled_is_left_waiting() -> None:
    from loopcheck.adapters.vllm_sut import VllmSUT

    w = vllm_workload(RequestSpec("a", (1, 2, 3), 2), RequestSpec("b", (4, 5), 2, grammar_ready=3),
                      RequestSpec("c", (6, 7), 2, grammar_ready=NEVER), RequestSpec("d", (8, 9), 2, arrival=1,
                                                                                   grammar_ready=0))
    run = run_workload(w, VllmSUT, CheckSet("property").build())
    assert run.violation is None and run.drained and run.driver.never_ready() == {"c"}
    assert admitted_at(run) == {"a": 0, "d": 1, "b": 3}


@pytest.mark.parametrize("off", ["spec", "kv_transfer"])
def test_a_campaign_with_the_features_on_meets_no_finding(tmp_path, off) -> None:
    """Oversized requests and priorities off keep vLLM's queue-head stall and
    priority inversion out of reach; KV transfer and speculative decoding in
    turn, as together they meet the stall's other face
    (examples/vllm/kv_load_spec_stall.json); prefix caching on and off."""
    from loopcheck.adapters.vllm_sut import VllmSUT

    shape = Shape.parse(f"oversized=off,priorities=off,{off}=off")
    result = run_campaign(CampaignSettings("guarded", 600, 5, tmp_path, "random", factory=VllmSUT,
                                           checks=CheckSet("property"), shape=shape, max_examples=150))
    assert result.stats.examples >= 150 and not result.findings, result.findings[:1]


def work_steps(run, rid: str) -> list[int]:
    """The steps in which `rid` was admitted, resumed, or did work."""
    return sorted({t for t, events in enumerate(run.driver.trace) for e in events
                   if e.rid == rid and e.kind in ("admit", "resume", "prefill", "token", "draft")})


def test_a_pause_of_all_schedules_nothing_while_it_lasts_and_the_run_drains_after() -> None:
    from loopcheck.adapters.vllm_sut import VllmSUT

    w = vllm_workload(RequestSpec("a", (1, 2, 3), 4), RequestSpec("b", (4, 5, 6, 7), 2, arrival=2),
                      pause="all", pause_at=1, pause_steps=3)
    run = run_workload(w, VllmSUT, CheckSet("property").build())
    assert run.violation is None and run.drained
    assert not {1, 2, 3} & set(work_steps(run, "a") + work_steps(run, "b"))
    assert work_steps(run, "a")[:2] == [0, 4] and work_steps(run, "b")[0] == 4


def test_a_pause_of_new_requests_lets_running_ones_and_loaded_ones_go_on() -> None:
    """Under PAUSED_NEW, `a` (running) keeps decoding, `c` (its KV loaded before
    the pause, holding its blocks) is admitted, `b` (arriving in it) waits."""
    from loopcheck.adapters.vllm_sut import VllmSUT

    w = vllm_workload(RequestSpec("a", (1, 2, 3), 5), RequestSpec("b", (4, 5, 6, 7), 2, arrival=2),
                      RequestSpec("c", (8, 9, 10), 2, kv_load_steps=1), pause="new", pause_at=1, pause_steps=3)
    run = run_workload(w, VllmSUT, CheckSet("property").build())
    assert run.violation is None and run.drained
    assert {1, 2, 3} <= set(work_steps(run, "a")) and work_steps(run, "b")[0] == 4
    assert 1 <= work_steps(run, "c")[0] <= 3


@pytest.mark.parametrize(("mode", "ignored", "signature"), [("all", "UNPAUSED", "pause.scheduled"),
                                                            ("new", "UNPAUSED", "pause.admitted"),
                                                            ("new", "PAUSED_ALL", "pause.running-held")])
def test_a_scheduler_that_ignores_the_pause_is_caught(monkeypatch, mode, ignored, signature) -> None:
    """vLLM's pause state replaced by `ignored` (a planted bug: the scheduler
    not told, or told too much): the pause rule names it."""
    from vllm.v1.core.sched.interface import PauseState
    from vllm.v1.core.sched.scheduler import Scheduler

    from loopcheck.adapters.vllm_sut import VllmSUT

    real = Scheduler.set_pause_state
    monkeypatch.setattr(Scheduler, "set_pause_state", lambda self, state: real(
        self, PauseState[ignored] if state != PauseState.UNPAUSED else state))
    w = vllm_workload(RequestSpec("a", (1, 2, 3), 4), RequestSpec("b", (4, 5, 6, 7), 2, arrival=2),
                      pause=mode, pause_at=1, pause_steps=3)
    run = run_workload(w, VllmSUT, CheckSet("property").build())
    assert (run.violation.signature if run.violation else None) == signature


def token_steps(run) -> dict[str, list[int]]:
    """Per request, the step of each of its tokens."""
    steps: dict[str, list[int]] = {}
    for t, events in enumerate(run.driver.trace):
        for e in events:
            if e.kind == "token":
                steps.setdefault(e.rid, []).append(t)
    return steps


def test_async_scheduling_reports_each_token_a_step_late_with_the_same_outputs() -> None:
    """vLLM's AsyncScheduler behind the engine core's batch queue of two: each
    batch's tokens come in the next step, the outputs are the synchronous
    run's, and every rule holds (a stop token and an abort end requests while
    their next decode is in flight)."""
    from loopcheck.adapters.vllm_sut import VllmSUT

    requests = (RequestSpec("a", (1, 2, 3), 4), RequestSpec("b", (4, 5, 6, 7, 8), 3, arrival=1),
                RequestSpec("c", (9, 10), 6, arrival=1, abort_at=4))
    sync = run_workload(vllm_workload(*requests), VllmSUT, CheckSet("property").build())
    late = run_workload(vllm_workload(*requests, async_scheduling=True), VllmSUT, CheckSet("property").build())
    assert sync.violation is None and late.violation is None and sync.drained and late.drained
    now, before = ({rid: o.token_ids for rid, o in run.observation.outputs.items()} for run in (late, sync))
    assert now["a"] == before["a"] and now["b"] == before["b"]
    assert now["c"] == before["c"][:-1]   # (its abort comes when a token fewer has come back)
    assert all(t == s + 1 for rid, steps in token_steps(late).items()
               for t, s in zip(steps, token_steps(sync)[rid], strict=False)), (token_steps(sync), token_steps(late))


def test_async_frees_that_never_come_back_are_caught(monkeypatch) -> None:
    """A planted bug: the frees vLLM defers while a batch is in flight are
    never drained; the held blocks are found once a request aborted while its
    next decode was in flight (and the same workload passes without it)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from loopcheck.adapters.vllm_sut import VllmSUT

    w = vllm_workload(RequestSpec("a", (1, 2, 3), 4), RequestSpec("c", (9, 10), 6, arrival=1, abort_at=4),
                      async_scheduling=True)
    assert run_workload(w, VllmSUT, CheckSet("property").build()).violation is None
    monkeypatch.setattr(Scheduler, "_drain_deferred_frees", lambda self: None)
    violation = run_workload(w, VllmSUT, CheckSet("property").build()).violation
    assert violation is not None and violation.prop in ("kv-conservation", "kv-excess"), violation


def test_the_adapter_refuses_async_scheduling_with_speculative_decoding() -> None:
    from loopcheck.adapters.vllm_sut import VllmSUT
    from loopcheck.model.errors import WorkloadError

    w = vllm_workload(RequestSpec("a", (1, 2, 3), 4), async_scheduling=True, spec_tokens=1)
    with pytest.raises(WorkloadError, match="async_scheduling: the vLLM adapter runs it without speculative"):
        VllmSUT(w.config)
