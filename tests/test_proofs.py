"""Each obligation gives its expected result; breaking a rule on purpose makes
the matching obligation fail."""

from __future__ import annotations

import json

import z3

from loopcheck.cli import main
from model.workload import load_workload
from proofs.admission import GuardRules
from proofs.kv import Rules
from proofs.obligations_kv import admission_atomic, futility, kv_conservation, preflight_soundness
from proofs.ranking import ranking_decreases
from proofs.result import COUNTEREXAMPLE, PROVED, UNKNOWN, check_claim
from sut.simulate import simulate_model


def test_expected_results_at_small_bounds() -> None:
    assert kv_conservation(3, 3).status == PROVED
    assert admission_atomic(3, 3).status == PROVED
    assert preflight_soundness(3, 3, pending=False).status == PROVED
    assert preflight_soundness(3, 3, pending=True).status == COUNTEREXAMPLE
    assert futility(6, "guarded").status == PROVED
    assert futility(6, "unguarded").status == COUNTEREXAMPLE
    assert ranking_decreases(4).status == PROVED


def test_dropping_the_watermark_from_the_guarded_check_is_refuted() -> None:
    result = preflight_soundness(3, 3, pending=False, rules=GuardRules(preflight_watermark=False))
    assert result.status == COUNTEREXAMPLE and "active=True" in result.detail


def test_forgetting_to_release_shared_references_is_refuted() -> None:
    assert kv_conservation(3, 3, Rules(release_shared_refs=False)).status == COUNTEREXAMPLE


def test_a_guard_that_records_nothing_allows_repeated_futile_preemption() -> None:
    assert futility(6, "guarded", record_guard=False).status == COUNTEREXAMPLE


def test_a_preemption_without_a_paired_admission_breaks_the_ranking() -> None:
    assert ranking_decreases(4, paired=False).status == COUNTEREXAMPLE


def test_vacuous_assumptions_are_never_proved() -> None:
    x = z3.Int("x")
    result, _ = check_claim("vacuous", "both", PROVED, [x > 1, x < 0], x == 5)
    assert result.status == UNKNOWN


def test_prove_cli_writes_a_livelock_that_replays_on_model_and_engine(tmp_path, capsys) -> None:
    from sut.simulate import simulate_engine

    junit = tmp_path / "prove.xml"
    assert main(["prove", "--json", "--out", str(tmp_path), "--junit", str(junit)]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in results} <= {"proved", "counterexample"}
    assert all(r["status"] == r["expected"] for r in results)
    assert {"name", "policy", "status", "seconds"} <= set(results[0])
    assert "failures=\"0\"" in junit.read_text()
    cex = load_workload(tmp_path / "livelock-search-unguarded.json")
    assert cex.extra["property"] == "livelock" and cex.extra["cycle"]["length"] >= 1
    assert len(cex.extra["trace"]) == cex.extra["cycle"]["start"] + cex.extra["cycle"]["length"] + 1
    for run in (simulate_model(cex, 500), simulate_engine(cex, 500)):
        assert not run.drained and run.counters.preemptions > 100
    guarded = cex.with_config(preemption_policy="guarded")
    for run in (simulate_model(guarded, 500), simulate_engine(guarded, 500)):
        assert run.drained and run.kv_blocks_held == 0


def test_prove_rejects_bad_bounds(capsys) -> None:
    assert main(["prove", "--requests", "0"]) == 2
    assert "error" in capsys.readouterr().err
