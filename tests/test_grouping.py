"""One bug, one finding: a keep-going campaign's findings grouped by cause
(fuzz/grouping.py). Two bugs planted are two groups; one bug that breaks several
rules is one group; two crash sites are never one group."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from loopcheck.adapters.loader import load_factory
from loopcheck.checks.base import Violation
from loopcheck.checks.suite import CheckSet
from loopcheck.cli import main
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz import grouping
from loopcheck.fuzz.campaign import Finding, run_campaign
from loopcheck.fuzz.grouping import Shown, group_findings
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.model.workload import load_workload
from tests.toy_scheduler import toy

TOY = str(Path(__file__).parent / "toy_scheduler.py")


def test_two_planted_bugs_are_two_groups(tmp_path, capsys) -> None:
    code = main(["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--max-examples", "300", "--seed",
                 "2", "--out", str(tmp_path), "--json"])
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == 1 and len(summary["bugs"]) == 2
    assert sorted(s for bug in summary["bugs"] for s in bug["signatures"]) == ["kv-conservation.reported-errors",
                                                                               "seq-cap"]
    assert {c["bug"] for c in summary["counterexamples"]} == {1, 2}
    report = (tmp_path / "report.md").read_text()
    assert "## 2 bugs, 2 findings" in report and "### Bug 1: first departs at" in report


def test_one_bug_that_breaks_several_rules_is_one_group(tmp_path) -> None:
    """The toy that never rejects a request larger than its pool: the request
    is not rejected, the queue behind it stalls and the state repeats, three
    signatures of one cause."""
    checks = CheckSet("property")
    result = run_campaign(CampaignSettings("guarded", 600, 3, tmp_path, "random", factory=toy("no-reject"),
                                           checks=checks, keep_going=True, max_examples=600, max_replays=40))
    groups = group_findings(result.findings, toy("no-reject"), checks)
    assert len(result.findings) >= 2 and len(groups) == 1
    assert "never-fit-not-rejected" in groups[0].signatures


def test_crashes_at_two_sites_are_never_one_group(tmp_path, monkeypatch) -> None:
    """Even when every finding's file shows the others' signatures, two crash
    sites stay apart (and a third finding joins one of them)."""
    def finding(signature: str) -> Finding:
        prop, _, where = signature.partition("@")
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        shutil.copy(Path(__file__).parent.parent / "examples" / "livelock_min.json", path)
        return Finding(Violation(prop, "m", where=where), path, 1, None, CheckSet("property"))

    found = [finding("crash@a.py:f:ValueError:000001"), finding("crash@b.py:g:KeyError:000002"), finding("stall")]
    everything = frozenset(f.violation.signature for f in found)
    monkeypatch.setattr(grouping, "shown_by", lambda f, factory, checks: Shown(everything, everything))
    groups = group_findings(found, toy(), CheckSet("property"))
    assert len(groups) == 2 and sorted(len(g.findings) for g in groups) == [1, 2]
    assert all(sum(s.startswith("crash@") for s in g.signatures) == 1 for g in groups)


# The engine findings shipped in examples/ENGINE by cause (each read in the engine's code): three of vLLM's
# files are one mechanism, a request its waiting loop can never schedule stopping the loop at the queue head
# (too large for the pool; its KV load's reservation too large; its padded verify step larger than the budget).
SHIPPED_CAUSES = {
    "vllm": [["fenced_free_self_preemption.json"],
             ["kv_load_spec_stall.json", "queue_head_stall.json", "spec_pad_stall.json"],
             ["paused_loaded_request_held.json"], ["priority_inversion.json"],
             ["spec_pad_chunk_crash.json"], ["uncomputed_prefix_hit.json"]],
    "sglang": [["chunk_overwritten.json"], ["deferred_abort.json"], ["idle_stall.json"]],
}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_shipped_engine_finding_is_one_group(engine) -> None:
    """The engine bugs shipped in examples/ENGINE, taken as one campaign's
    findings: one group per cause."""
    if importlib.util.find_spec(engine) is None:
        pytest.skip(f"{engine} is not installed: run scripts/install-engine.sh {engine}")
    factory, checks = load_factory(engine), CheckSet("property")
    found = []
    for path in sorted((Path(__file__).parent.parent / "examples" / engine).glob("*.json")):
        run = run_workload(load_workload(path), factory, checks.build())
        assert run.violation is not None, path
        found.append(Finding(run.violation, path, 1, None, checks))
    groups = group_findings(found, factory, checks)
    grouped = sorted(sorted(Path(f.counterexample).name for f in g.findings) for g in groups)
    assert grouped == SHIPPED_CAUSES[engine], [g.signatures for g in groups]
