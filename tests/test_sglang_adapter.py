"""SGLang's scheduler behind the SUT protocol (adapters/sglang_sut.py): its own
`Scheduler.__init__`, intake, batch choice, radix cache, pools and batch-result
processing, with a fake LM worker. A workload that breaks no property drains
with every check that applies on; runs are deterministic; SGLang's own pool
invariant is read as the KV accounting check and can fail; the SGLang bug and
the deferred abort shipped under examples/sglang/ replay; a short campaign with
those ignored finds nothing else.

Needs the SGLang extra (scripts/install-engine.sh sglang, which CI runs); without it
these tests are skipped with that reason, visibly."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from loopcheck.checks.suite import CheckSet, checks_for
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import RequestSpec, Workload, load_workload
from loopcheck.sut.protocol import Refused

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                reason="SGLang is not installed: run scripts/install-engine.sh sglang")
EXAMPLES = Path(__file__).parent.parent / "examples" / "sglang"
# the findings examples/sglang/ holds, by signature: ignored where a test looks for anything else (the idle
# stall shows as grammar.ready-idle on a request with a grammar: docs/engines/sglang.md)
KNOWN = "stall.state-repeats,work.token-uncomputed,abort.not-ended,grammar.ready-idle"


def sglang_config(**changes) -> Config:
    from loopcheck.adapters.sglang_sut import PINNED
    from loopcheck.sut.protocol import PLAIN_ENGINE

    return Config(**{**Config().to_json(), **PLAIN_ENGINE, **PINNED, "num_blocks": 16, "block_size": 2,
                     "max_num_seqs": 3, "max_num_batched_tokens": 8, "priority_preemption": False, **changes})


def factory():
    from loopcheck.adapters.sglang_sut import SglangSUT

    return SglangSUT


def kinds(run) -> list[tuple[str, str, tuple]]:
    return [(e.kind, e.rid, e.values()) for events in run.driver.trace for e in events]


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_a_workload_with_hits_retraction_aborts_and_a_stop_drains_with_every_property_held(prefix_caching) -> None:
    """A tight pool (13 pages of 2): with the radix cache, b hits a's two
    computed pages; without it, a (which ignores EOS) is admitted beside r,
    whose tokens SGLang's admission estimates at a fraction of its max_tokens,
    the decodes outgrow the pool and SGLang retracts a, which resumes and
    recomputes; a waiting request is aborted; f stops at its stop token."""
    cfg = sglang_config(num_blocks=13, max_num_seqs=4, prefix_caching=prefix_caching)
    w = Workload(cfg, (RequestSpec("a", (5, 6, 7, 8), 15, arrival=2), RequestSpec("r", (1, 2), 12, arrival=1,
                                                                                  stop_token=126),
                       RequestSpec("b", (5, 6, 7, 8, 9), 2, arrival=3), RequestSpec("d", (14, 15), 4, arrival=2,
                                                                                    abort_at=2),
                       RequestSpec("f", (16, 17), 8, arrival=3, stop_token=14)))
    run = run_workload(w, factory(), checks_for("property"))
    assert run.violation is None and run.drained
    events = kinds(run)
    if prefix_caching:
        assert ("admit", "b", (2,)) in events                                 # a hit on a's computed pages
    else:
        assert ("preempt", "a", (None, True)) in events and ("resume", "a", (0, 0)) in events
    assert ("finish", "d", ("abort",)) in events
    outputs = run.observation.outputs
    assert outputs["f"].finish_reason == "stop" and outputs["f"].token_ids[-1] == 14
    assert {outputs[r].finish_reason for r in "arb"} == {"length"}


@pytest.mark.parametrize("mixed", [False, True])
def test_a_prompt_only_request_is_prefilled_and_finishes_with_no_token(mixed) -> None:
    """max_new_tokens 0 (SGLang's prefill-only request): SGLang computes the
    prompt and finishes it for length; the placeholder id it keeps in output_ids
    is cut by its finished_len, so no token is reported. Alone in its batch the
    worker answers placeholders; beside a generating request (mixed chunks) it
    samples for every row, and that token is cut the same way."""
    cfg = sglang_config(execution="mixed" if mixed else "refill", prefix_caching=True)
    w = Workload(cfg, (RequestSpec("p", (2, 3, 4, 5, 6), 0), RequestSpec("g", (2, 3, 4, 5, 9), 2, arrival=1),
                       RequestSpec("q", (7,), 0, arrival=1)))
    run = run_workload(w, factory(), checks_for("property"))
    assert run.violation is None and run.drained
    out = run.observation.outputs
    assert (out["p"].token_ids, out["p"].finish_reason, out["q"].token_ids) == ([], "length", [])
    assert ("prefill", "p", (0, 5, 1)) in kinds(run) and ("finish", "q", ("length",)) in kinds(run)
    assert len(out["g"].token_ids) == 2


def test_runs_are_deterministic() -> None:
    cfg = sglang_config(num_blocks=8, prefix_caching=True, priority_preemption=True)
    w = Workload(cfg, tuple(RequestSpec(f"r{i}", tuple(range(1, 4 + i)), 5, arrival=i, priority=3 - i)
                            for i in range(4)))
    first, second = (run_workload(w, factory(), checks_for("property")) for _ in range(2))
    assert kinds(first) == kinds(second) and first.drained


def test_the_kv_accounting_check_can_fail() -> None:
    """SGLang's own pool invariant (free + evictable + protected + requests'
    private tokens == the pool) fails when a page goes missing from the free
    list, and the adapter reports it."""
    sut = factory()(sglang_config())
    sut.add(RequestSpec("a", (1, 2, 3), 3))
    sut.step()
    assert sut.observe().kv_errors == []
    allocator = sut.scheduler.token_to_kv_pool_allocator
    allocator.free_pages = allocator.free_pages[1:]
    (error,) = sut.observe().kv_errors
    assert "Mem Leak Detected" in error


def test_what_sglang_would_cut_is_refused_and_a_config_it_cannot_express_is_one_error_line() -> None:
    sut = factory()(sglang_config(num_blocks=4))
    with pytest.raises(Refused, match="init_req_max_new_tokens would cut max_tokens"):
        sut.add(RequestSpec("a", (1, 2, 3), 5))   # 8 pool tokens: SGLang keeps a page and one token back
    with pytest.raises(WorkloadError, match="max_num_batched_tokens"):
        factory()(sglang_config(max_num_seqs=4, max_num_batched_tokens=3))
    with pytest.raises(WorkloadError, match="divisible by its page_size"):   # as SGLang's server-args check
        factory()(sglang_config(block_size=2, max_num_batched_tokens=7))


@pytest.mark.parametrize("name,prop", [("idle_stall.json", "stall"), ("chunk_overwritten.json", "work"),
                                       ("deferred_abort.json", "abort")])
def test_shipped_findings_replay(name, prop) -> None:
    w = load_workload(EXAMPLES / name)
    assert w.extra["property"] == prop and len(w.requests) <= 4
    assert run_workload(w, factory(), checks_for("property")).violation.prop == prop


def test_the_idle_stall_is_sglangs_own_state() -> None:
    """The `stall` finding seen in SGLang's objects: the intake kept the
    request's max_new_tokens and queued it; on an idle pool SGLang's prefill
    adder answers NO_TOKEN for it, step after step."""
    from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

    w = load_workload(EXAMPLES / "idle_stall.json")
    sut = factory()(w.config)
    (spec,) = w.requests
    sut.add(spec)
    answers = []
    add_one_req = PrefillAdder.add_one_req

    def recorded(adder, req, *args, **kwargs):
        answers.append(add_one_req(adder, req, *args, **kwargs))
        return answers[-1]

    PrefillAdder.add_one_req = recorded
    try:
        for _ in range(3):
            sut.step()
    finally:
        PrefillAdder.add_one_req = add_one_req
    req = sut.reqs[spec.rid]
    assert req.sampling_params.max_new_tokens == spec.max_tokens and req.sampling_params.ignore_eos
    assert sut.scheduler.waiting_queue == [req] and sut.scheduler.running_batch.is_empty()
    assert answers == [AddReqResult.NO_TOKEN] * 3


def test_the_overwritten_chunk_is_sglangs_own_state() -> None:
    """The `work` finding seen in SGLang's objects (a valid config: a budget of
    2 pages, mixed chunks): beside q5's decode, q6 is chunked at a page (4 of
    its 5 prompt positions) and q8, which ignores EOS, takes the 3 tokens of
    budget left as a second chunk; SGLang keeps q8 as its one chunked request
    and samples q6's token from 4 positions."""
    w = load_workload(EXAMPLES / "chunk_overwritten.json")
    assert w.config.max_num_batched_tokens % w.config.block_size == 0 and w.config.execution == "mixed"
    sut = factory()(w.config)
    for spec in w.requests:
        sut.add(spec)
    for _ in range(2):
        sut.step()
    q6 = sut.reqs["q6"]
    assert len(q6.origin_input_ids) == 5 and q6.extend_end == 4
    assert list(q6.output_ids) and q6.finished_reason is not None
    assert sut.scheduler.chunked_req is sut.reqs["q8"]


def test_a_campaign_reports_nothing_else(tmp_path) -> None:
    """No false alarm: with the findings above ignored, a bounded campaign on
    every shape finds nothing."""
    checks = CheckSet("property", ignore=frozenset(KNOWN.split(",")))
    result = run_campaign(CampaignSettings(
        "guarded", 600, 5, tmp_path, "random", factory=factory(), checks=checks, max_examples=100))
    assert result.findings == [] and result.stats.examples >= 100


def test_a_finding_replays_from_the_command_line() -> None:
    """As a user runs it (in its own process: an in-process replay here would
    change the example sequences of the seeded fuzz tests that run after it)."""
    done = subprocess.run([sys.executable, "-m", "loopcheck.cli", "replay", str(EXAMPLES / "idle_stall.json"),
                           "--adapter", "sglang"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "REPRODUCED stall" in done.stdout


def test_building_many_schedulers_leaves_no_thread_behind() -> None:
    # an exploration builds thousands of schedulers in one process: each left a watchdog thread running
    import threading

    from loopcheck.adapters.sglang_sut import SglangSUT

    cfg = sglang_config()
    SglangSUT(cfg)
    before = threading.active_count()
    for _ in range(5):
        SglangSUT(cfg)
    assert threading.active_count() == before


def test_its_claimed_retraction_order_is_judged_and_a_reversed_one_is_caught(monkeypatch) -> None:
    """SGLang claims its retraction order (capabilities.victim_order: fewest
    output tokens first, then the longest prompt): it holds on the retraction
    workload, and SGLang with the order planted backwards is a victim-order finding."""
    cfg = sglang_config(num_blocks=13, max_num_seqs=4, prefix_caching=False)
    w = Workload(cfg, (RequestSpec("a", (5, 6, 7, 8), 15, arrival=2),
                       RequestSpec("r", (1, 2), 12, arrival=1, stop_token=126)))
    kept = run_workload(w, factory(), checks_for("property"))
    assert kept.violation is None and ("preempt", "a", (None, True)) in kinds(kept)
    # (a priority preemption reads as a retraction does: no order is claimed where one may happen)
    assert factory()(w.with_config(priority_preemption=True).config).capabilities.victim_order is None
    batch = sys.modules["sglang.srt.managers.schedule_batch"].ScheduleBatch   # (as the adapter imported it)
    original = batch._get_decode_retraction_order
    monkeypatch.setattr(batch, "_get_decode_retraction_order",
                        staticmethod(lambda reqs: list(reversed(original(reqs)))))
    run = run_workload(w, factory(), checks_for("property"))
    assert run.violation is not None and run.violation.prop == "victim-order", run.violation
    assert "SGLang's retract_decode" in run.violation.message


def test_the_pressure_preset_reaches_retraction_with_no_finding(monkeypatch) -> None:
    """The pressure preset (docs/exploring.md), on one of its configs: its
    workloads make SGLang retract decoding requests (retract_decode runs, a
    path the small preset never takes) and every one of them holds every property."""
    from loopcheck.adapters.loader import capabilities_of
    from loopcheck.checks.suite import default_mode
    from loopcheck.explorer.scope import PRESETS, scope_from_json
    from loopcheck.explorer.scoped import Limits, explore_units, make_plan

    data = PRESETS["pressure"].to_json()
    scope = scope_from_json({**data, "configs": {**data["configs"], "num_blocks": [30], "prefix_caching": [False]},
                             "max_tokens": [20]},
                            "pressure, one config")
    system = factory()
    caps = capabilities_of(system)
    batch = sys.modules["sglang.srt.managers.schedule_batch"].ScheduleBatch   # (as the adapter imported it)
    original, retractions = batch.retract_decode, []

    def counted(self, *args, **kwargs):
        retractions.append(len(self.reqs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(batch, "retract_decode", counted)
    plan = make_plan(system, scope, caps)
    result = explore_units(system, plan, plan.part(1, 1), CheckSet(default_mode(caps.semantics)), Limits(),
                           keep_going=True)
    assert result.findings == [] and result.tally.transitions > 500
    assert retractions, "no workload of the pressure preset made SGLang retract"
