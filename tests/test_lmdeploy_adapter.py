"""LMDeploy's PyTorch-engine scheduling behind the SUT protocol (adapters/lmdeploy_sut.py):
its own scheduler, inputs maker, engine-loop turn and intake, with a fake executor.
Workloads that break no property drain with every check that applies on; the
adapter's reporting of the pipelined engine loop (a forward dispatched in one
step and answered in the next) is pinned down by the cases that once looked like
bugs; runs are deterministic; and a short campaign finds nothing to report.

Needs the LMDeploy extra (scripts/install-engine.sh lmdeploy, which CI runs); without it
these tests are skipped with that reason, visibly."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from loopcheck.checks.suite import CheckSet, checks_for
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.model.config import Config
from loopcheck.model.workload import RequestSpec, Workload, save_workload
from loopcheck.sut.protocol import Refused

pytestmark = pytest.mark.skipif(importlib.util.find_spec("lmdeploy") is None,
                                reason="LMDeploy is not installed: run scripts/install-engine.sh lmdeploy")
PAGE = tuple(range(1, 17))   # one full page of LMDeploy's smallest block size, 16


def lmdeploy_config(**changes) -> Config:
    from loopcheck.adapters.lmdeploy_sut import PINNED
    from loopcheck.sut.protocol import PLAIN_ENGINE

    return Config(**{**Config().to_json(), **PLAIN_ENGINE, **PINNED, "max_num_batched_tokens": 32, **changes})


def factory():
    from loopcheck.adapters.lmdeploy_sut import LmdeploySUT

    return LmdeploySUT


def kinds(run) -> list[tuple[str, str, tuple]]:
    return [(e.kind, e.rid, e.values()) for events in run.driver.trace for e in events]


def test_a_workload_with_hits_preemption_and_aborts_drains_with_every_property_held() -> None:
    """A tight pool (5 pages): b hits a's first page; a's growth finds no room,
    so it preempts itself, and resumes by a hit on its own first page (which
    the prefix cache kept when c took its other blocks); a waiting and a running
    request are aborted; one request stops at its stop token."""
    cfg = lmdeploy_config(num_blocks=5, max_num_seqs=3, prefix_caching=True)
    w = Workload(cfg, (RequestSpec("a", PAGE + (40, 41), 40), RequestSpec("b", PAGE + (50,), 40, arrival=1),
                       RequestSpec("c", (60, 61, 62), 40, arrival=1),
                       RequestSpec("d", (70, 71), 6, arrival=2, abort_at=2),
                       RequestSpec("e", (80,), 30, abort_at=3),
                       RequestSpec("f", (90, 91), 8, arrival=3, stop_token=3)))
    run = run_workload(w, factory(), checks_for("property"))
    assert run.violation is None and run.drained
    events = kinds(run)
    assert ("admit", "b", (1,)) in events                                   # a hit on a's computed page
    assert ("preempt", "a", ("a", True)) in events and ("resume", "a", (1, 0)) in events
    assert {("finish", "d", ("abort",)), ("finish", "e", ("abort",))} <= set(events)
    assert ("admit", "e", (0,)) in events                                   # e was running when aborted
    assert {run.observation.outputs[r].finish_reason for r in "abcf"} <= {"length", "stop"}


def test_an_aborted_requests_prefill_in_flight_counts_as_computed() -> None:
    """q1's one-page prompt is published to the prefix cache when its prefill is
    dispatched; q1 is aborted before the answer, but the forward already sent
    computes the page, so q5's hit on it the next step reads computed KV (the
    adapter reports the prefill before the abort; once it did not, and the
    hit looked uncomputed)."""
    cfg = lmdeploy_config(num_blocks=5, max_num_seqs=1, max_num_batched_tokens=19, prefix_caching=True)
    w = Workload(cfg, (RequestSpec("q1", PAGE, 1, abort_at=1), RequestSpec("q5", PAGE + (13,), 1)))
    run = run_workload(w, factory(), checks_for("property"))
    assert run.violation is None and run.drained
    events = kinds(run)
    assert events.index(("prefill", "q1", (0, 16, 1))) < events.index(("abort", "q1", ()))
    assert ("admit", "q5", (1,)) in events


def test_a_page_deduplicated_onto_a_finished_copy_is_not_a_sharing_violation() -> None:
    """m4 and q1 have the same one-page prompt, prefilled in chunks of 10: when
    q1's second chunk is allocated LMDeploy swaps q1's page for m4's finished
    copy (BlockTrie._extend_trie_path), and q1's chunk writes the same KV there."""
    cfg = lmdeploy_config(num_blocks=8, max_num_seqs=4, max_num_batched_tokens=10, prefix_caching=True)
    w = Workload(cfg, (RequestSpec("m4", PAGE, 2), RequestSpec("q1", PAGE, 1, arrival=1)))
    shared = []

    def record(events, obs) -> None:
        tables = obs.block_tables
        shared.append(bool(tables.get("m4")) and bool(tables.get("q1")) and tables["m4"][0] == tables["q1"][0])

    run = run_workload(w, factory(), checks_for("property"), on_step=record)
    assert run.violation is None and run.drained
    assert any(shared), "q1 never shared m4's page: the case this test is about did not happen"


def test_a_prompt_only_request_is_prefilled_and_stopped_with_no_token() -> None:
    """max_new_tokens 0: LMDeploy's AR sequence strategy stops the sequence on
    its prefill (no token); a request with tokens beside it runs on."""
    cfg = lmdeploy_config(num_blocks=6, block_size=16, max_num_seqs=2, prefix_caching=True)
    w = Workload(cfg, (RequestSpec("p", PAGE + (20, 21), 0), RequestSpec("g", PAGE + (30,), 2, arrival=1)))
    run = run_workload(w, factory(), checks_for("property"))
    assert run.violation is None and run.drained
    assert run.observation.outputs["p"].token_ids == [] and run.observation.outputs["p"].finish_reason == "length"
    assert ("prefill", "p", (0, 18, 1)) in kinds(run) and len(run.observation.outputs["g"].token_ids) == 2


def test_runs_are_deterministic() -> None:
    cfg = lmdeploy_config(num_blocks=4, max_num_seqs=2, prefix_caching=True)
    w = Workload(cfg, tuple(RequestSpec(f"r{i}", PAGE[:8 + i * 3], 12, arrival=i) for i in range(4)))
    first, second = (run_workload(w, factory(), checks_for("property")) for _ in range(2))
    assert kinds(first) == kinds(second) and first.drained


def test_the_kv_accounting_check_can_fail() -> None:
    """A ref count off by one in LMDeploy's allocator is reported."""
    import numpy as np

    sut = factory()(lmdeploy_config(num_blocks=4))
    sut.add(RequestSpec("a", PAGE, 3))
    sut.step()
    assert sut.observe().kv_errors == []
    sut.scheduler.block_manager.allocator.add_ref_count(np.array([0]), 1)
    assert sut.observe().kv_errors == ["block 0: ref count 2 != 1 holders (sequences and prefix-cache nodes)"]


def test_what_lmdeploy_would_cut_is_refused_and_a_config_it_cannot_express_is_one_error_line(capsys) -> None:
    sut = factory()(lmdeploy_config(num_blocks=2))
    with pytest.raises(Refused, match="max session length"):
        sut.add(RequestSpec("a", PAGE, 1))   # 16 + 1 > one block of session length
    from loopcheck.model.errors import WorkloadError

    with pytest.raises(WorkloadError, match="max_num_batched_tokens"):
        factory()(lmdeploy_config(max_num_seqs=4, max_num_batched_tokens=3))


def test_a_campaign_reports_nothing(tmp_path) -> None:
    """No false alarm: a bounded campaign on every shape finds nothing."""
    result = run_campaign(CampaignSettings(
        "guarded", 600, 5, tmp_path, "random", factory=factory(), checks=CheckSet("property"), max_examples=100))
    assert result.findings == [] and result.stats.examples >= 100


def test_a_workload_replays_from_the_command_line(tmp_path) -> None:
    """As a user runs it (in its own process: an in-process replay here would
    change the example sequences of the seeded fuzz tests that run after it)."""
    cfg = lmdeploy_config(num_blocks=5, prefix_caching=True)
    path = tmp_path / "w.json"
    save_workload(Workload(cfg, (RequestSpec("a", PAGE + (1,), 3), RequestSpec("b", PAGE + (2,), 3, arrival=2))), path)
    done = subprocess.run([sys.executable, "-m", "loopcheck.cli", "replay", str(path), "--adapter", "lmdeploy",
                           "--check", "property"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "drained: no check failed" in done.stdout
