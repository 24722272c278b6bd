"""Each obligation gives its expected result; breaking a rule on purpose makes
the matching obligation fail."""

from __future__ import annotations

import json
import re

import pytest
import z3

from loopcheck.adapters.simulate import simulate_model
from loopcheck.cli import main
from loopcheck.model.workload import load_workload
from loopcheck.proofs.admission import GuardRules
from loopcheck.proofs.drain import drain, preemption_pairs
from loopcheck.proofs.kv import Rules
from loopcheck.proofs.obligations_kv import admission_atomic, futility, kv_conservation, preflight_soundness
from loopcheck.proofs.result import COUNTEREXAMPLE, PROVED, UNKNOWN, check_claim


def test_expected_results_at_small_bounds() -> None:
    assert kv_conservation(3, 3).status == PROVED
    assert admission_atomic(3, 3).status == PROVED
    assert preflight_soundness(3, 3, pending=False).status == PROVED
    assert preflight_soundness(3, 3, pending=True).status == COUNTEREXAMPLE
    assert futility("guarded").status == PROVED
    assert futility("unguarded").status == COUNTEREXAMPLE


def test_dropping_the_watermark_from_the_guarded_check_is_refuted() -> None:
    result = preflight_soundness(3, 3, pending=False, rules=GuardRules(preflight_watermark=False))
    assert result.status == COUNTEREXAMPLE and "active=True" in result.detail


def test_forgetting_to_release_shared_references_is_refuted() -> None:
    assert kv_conservation(3, 3, Rules(release_shared_refs=False)).status == COUNTEREXAMPLE


def test_a_guard_that_records_nothing_allows_repeated_futile_preemption() -> None:
    assert futility("guarded", record_guard=False).status == COUNTEREXAMPLE


GUARDED = dict(allocation="upfront", prefix_caching=False, execution="refill", wcpb=True, snapshots=False,
               priority_preemption=True, preemption_policy="guarded")


def test_drain_is_proved_guarded_and_refuted_unguarded() -> None:
    assert drain(4, GUARDED).status == PROVED
    assert drain(4, {**GUARDED, "priority_preemption": False}).status == PROVED
    result = drain(4, {**GUARDED, "preemption_policy": "unguarded"})
    assert result.status == COUNTEREXAMPLE and result.detail.startswith("rank:")
    assert preemption_pairs(4, GUARDED).status == PROVED
    assert preemption_pairs(4, {**GUARDED, "preemption_policy": "unguarded"}).status == COUNTEREXAMPLE


@pytest.mark.slow
def test_drain_is_proved_with_prefix_caching_and_incremental_allocation() -> None:
    """Every config switch: the guarded policy and no preemption drain, the
    unguarded rank claim is refuted, for 3 requests (slow: the prove command's
    test checks the same rows for 2)."""
    for allocation in ("upfront", "incremental"):
        for prefix in (False, True):
            modes = {**GUARDED, "allocation": allocation, "prefix_caching": prefix}
            assert drain(3, modes).status == PROVED
            assert drain(3, {**modes, "priority_preemption": False}).status == PROVED
            assert drain(3, {**modes, "preemption_policy": "unguarded"}).status == COUNTEREXAMPLE


def test_every_shipped_config_gets_a_drain_result() -> None:
    """`drain (this config)` for the regression config and every example's
    config (upfront and incremental, with and without prefix caching): proved,
    or refuted for the unguarded policy; never unknown."""
    from pathlib import Path

    from loopcheck.model.config import regression_config
    from loopcheck.proofs.obligations import config_drain

    configs = [regression_config()] + [load_workload(path).config
                                       for path in sorted((Path(__file__).parent.parent / "examples").rglob("*.json"))]
    assert {c.allocation for c in configs} == {"upfront", "incremental"} and {c.prefix_caching for c in configs} == {
        False, True}
    for cfg in configs:
        result = config_drain(cfg, 3)
        assert result.status == result.expected and result.status in (PROVED, COUNTEREXAMPLE), (cfg, result.detail)


def test_with_prefix_caching_drain_rests_on_the_futility_guard(monkeypatch) -> None:
    """A futile preemption the guard does not record: drain is refuted with
    prefix caching (the preflight may be optimistic there) and still proved
    without it (the preflight is exact, so no preemption is futile)."""
    from loopcheck.proofs import bmc

    original = bmc.Pass.admit_waiting

    def unrecorded(self, i, waiting):
        before = self.gd[i]
        out = original(self, i, waiting)
        self.gd[i] = bmc.z3.If(out[0], 0, before)
        return out
    monkeypatch.setattr(bmc.Pass, "admit_waiting", unrecorded)
    refuted = drain(3, {**GUARDED, "prefix_caching": True})
    assert refuted.status == COUNTEREXAMPLE and refuted.detail.startswith("rank:")
    assert drain(3, GUARDED).status == PROVED


def test_one_request_alone_drains_under_every_policy() -> None:
    """Unguarded preemption needs two requests to go wrong: with one, drain and
    preemption-pairs are proved, and that is what prove expects."""
    unguarded = {**GUARDED, "preemption_policy": "unguarded"}
    for result in (drain(1, unguarded), preemption_pairs(1, unguarded), drain(2, unguarded)):
        assert result.status == result.expected
    assert drain(1, unguarded).status == PROVED and drain(2, unguarded).status == COUNTEREXAMPLE


def test_a_step_that_loses_blocks_breaks_the_accounting_lemmas(monkeypatch) -> None:
    from loopcheck.proofs import bmc

    original = bmc.Pass.abort

    def leaky_abort(self, i, aborted):   # aborting a running request forgets its blocks
        before = self.free
        original(self, i, aborted)
        self.free = before
    monkeypatch.setattr(bmc.Pass, "abort", leaky_abort)
    result = drain(3, GUARDED)
    assert result.status == COUNTEREXAMPLE and "accounting, abort" in result.detail


def test_drain_rests_on_the_victim_check_where_the_watermark_binds(monkeypatch) -> None:
    """The guarded step drains without its watermark; without its victim check
    (the unguarded step) it does not, while a watermark can keep a requester
    out after its preemption. With neither, the rank falls again (K=3; the
    bounded lasso search agrees: no lasso within 6 steps at watermark 0)."""
    from loopcheck.proofs import bmc

    def no_watermark(self):
        self.wm = bmc.z3.IntVal(0)
    original_open = bmc.Pass.open_schedule
    monkeypatch.setattr(bmc.Pass, "open_schedule", no_watermark)
    assert drain(3, GUARDED).status == PROVED   # the watermark is not what drain rests on
    monkeypatch.setattr(bmc.Pass, "open_schedule", original_open)
    monkeypatch.setattr(bmc.Pass, "schedule", _no_victim_check(bmc.Pass.schedule))
    assert drain(3, GUARDED).status == COUNTEREXAMPLE
    monkeypatch.setattr(bmc.Pass, "open_schedule", no_watermark)
    assert drain(3, GUARDED).status == PROVED


def _no_victim_check(schedule):
    """The guarded step with its victim check removed: the unguarded step."""
    def unguarded(self, i):
        policy = self.c.preemption_policy
        object.__setattr__(self.c, "preemption_policy", "unguarded")
        try:
            schedule(self, i)
        finally:
            object.__setattr__(self.c, "preemption_policy", policy)
    return unguarded


def test_vacuous_assumptions_are_never_proved() -> None:
    x = z3.Int("x")
    result, _ = check_claim("vacuous", "both", PROVED, [x > 1, x < 0], x == 5)
    assert result.status == UNKNOWN


def test_prove_cli_writes_a_livelock_that_replays_on_model_and_engine(tmp_path, capsys) -> None:
    from loopcheck.adapters.simulate import simulate_engine

    junit = tmp_path / "prove.xml"
    assert main(["prove", "--json", "--drain-requests", "2", "--out", str(tmp_path), "--junit", str(junit)]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in results} == {"proved", "counterexample", "bounded", "agrees"}
    drain_rows = [r for r in results if r["name"].startswith("drain ") and r["name"] != "drain (this config)"]
    assert len(drain_rows) == 12 and {r["status"] for r in drain_rows if r["policy"] != "unguarded"} == {"proved"}
    assert "preemption-pairs" in {r["name"] for r in results if r["status"] == "proved"}
    bound = next(r["detail"] for r in results if r["name"] == "encodings bound to model/")
    counts = {what: int(n) for n, what in re.findall(r"(\d+) ([^,]+)", bound)}
    rare = ("futile preemptions", "hits on cache-only pages", "evictions of a page a waiting request would hit",
            "publications with a chunk in flight", "guard entries cleared", "steps the guard decided",
            "growth preemptions", "self-preemptions")
    assert all(counts[rule] > 0 for rule in rare), counts   # the binding's runs reach every rare rule
    assert all(r["status"] == "bounded" for r in results if r["name"].startswith("no-lasso"))
    assert all(r["status"] == r["expected"] for r in results)
    assert {"name", "policy", "status", "seconds"} <= set(results[0])
    assert "failures=\"0\"" in junit.read_text()
    for name, allocation in (("livelock-search", "upfront"), ("livelock-search-incremental", "incremental")):
        cex = load_workload(tmp_path / f"{name}-unguarded.json")
        assert cex.extra["property"] == "livelock" and cex.extra["cycle"]["length"] >= 1
        assert cex.config.allocation == allocation
        assert len(cex.extra["trace"]) == cex.extra["cycle"]["start"] + cex.extra["cycle"]["length"] + 1
        for livelock in (cex, cex.with_config(prefix_caching=True)):
            for run in (simulate_model(livelock, 500), simulate_engine(livelock, 500)):
                assert not run.drained and run.counters.preemptions > 100
        guarded = cex.with_config(preemption_policy="guarded")
        for run in (simulate_model(guarded, 500), simulate_engine(guarded, 500)):
            assert run.drained and run.kv_blocks_held == 0


def test_prove_rejects_bad_bounds(capsys) -> None:
    assert main(["prove", "--requests", "0"]) == 2
    assert "error" in capsys.readouterr().err


def test_a_rule_changed_in_the_model_alone_fails_prove(monkeypatch, capsys) -> None:
    """The binding catches it, and no proof is reported (drain for one request:
    what is demoted does not matter here, only that nothing is proved)."""
    import loopcheck.model.reference as ref

    def like_unguarded(self, i, active):
        cands = self.victims(lambda s: s.priority > self.specs[i].priority)
        return cands[0] if cands else None
    monkeypatch.setattr(ref._Step, "choose_victim", like_unguarded)
    assert main(["prove", "--drain-requests", "1", "--json"]) == 1
    captured = capsys.readouterr()
    assert "loopcheck prove: encoding and model disagree at" in captured.err
    results = json.loads(captured.out)
    assert "proved" not in {r["status"] for r in results} and "disagrees" in {r["status"] for r in results}
