"""Determinism checked, not assumed: replay runs a file twice and says where the
runs differ; fuzz runs a finding's workload twice before shrinking it and
keeps a flaky one as found, marked; check-adapter fails a system whose runs
differ; and --ignore of one rule leaves every other rule judging."""

from __future__ import annotations

import json
from pathlib import Path

from loopcheck.checks.suite import CheckSet
from loopcheck.cli import main
from loopcheck.driver.determinism import runs_differ
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.model.config import Config
from loopcheck.model.workload import RequestSpec, Workload, save_workload
from loopcheck.sut.model_sut import ModelSUT
from tests.broken_adapters import ByIdentity
from tests.toy_scheduler import PINNED, toy

BROKEN = str(Path(__file__).parent / "broken_adapters.py")
TWO_AT_ONCE = Workload(Config(num_blocks=16), (RequestSpec("a", (1, 2), 2), RequestSpec("b", (3, 4), 2)))


def test_runs_of_a_deterministic_system_agree_and_of_another_differ_at_a_step() -> None:
    assert runs_differ(TWO_AT_ONCE, ModelSUT, runs=3)[1] is None
    assert runs_differ(TWO_AT_ONCE, ByIdentity)[1] == 0   # the step of the two arrivals


def test_replay_says_not_deterministic_with_the_step(tmp_path, capsys) -> None:
    path = tmp_path / "two.json"
    save_workload(TWO_AT_ONCE, path)
    assert main(["replay", str(path), "--adapter", f"{BROKEN}:ByIdentity", "--check", "property"]) == 1
    assert "NOT DETERMINISTIC: 2 runs of this file differ from step 0" in capsys.readouterr().out
    assert main(["replay", str(path), "--adapter", "model", "--runs", "3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == 3 and summary["differs_from_step"] is None
    assert main(["replay", str(path), "--runs", "0"]) == 2
    assert "--runs: must be >= 1" in capsys.readouterr().err


def test_fuzz_keeps_a_flaky_finding_as_found_and_marks_it(tmp_path) -> None:
    result = run_campaign(CampaignSettings("guarded", 600, 1, tmp_path, "random", factory=ByIdentity,
                                           checks=CheckSet("property"), max_examples=200, max_replays=20))
    (finding,) = result.findings
    assert finding.flaky and "FLAKY: two runs of it differ from step" in finding.notes[0]
    assert finding.counterexample.exists() and finding.shrink_replays == 0


def test_check_adapter_fails_a_system_whose_runs_differ(capsys) -> None:
    assert main(["check-adapter", "--adapter", f"{BROKEN}:ByIdentity"]) == 1
    assert "not deterministic: the two runs differ from step 0" in capsys.readouterr().out


def test_ignoring_one_rule_leaves_every_other_rule_judging() -> None:
    """The leaking toy breaks kv-conservation.reported-errors and, in the same
    check, kv-excess: ignoring the one rule, the same check still reports the other;
    ignoring that too, it reports nothing of its own in the run."""
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 8, "block_size": 2, "max_num_seqs": 1})
    w = Workload(cfg, (RequestSpec("a", (1, 2, 3), 2), RequestSpec("b", (4, 5, 6), 2, arrival=1)))
    first = run_workload(w, toy("leak"), CheckSet("property").build()).violation
    assert first is not None and first.signature == "kv-conservation.reported-errors"
    one_rule = CheckSet("property", frozenset({"kv-conservation.reported-errors"}))
    run = run_workload(w, toy("leak"), one_rule.build())
    ended = run.driver.ended_by
    assert ended is not None and ended.prop in ("kv-conservation", "kv-excess")
    assert ended.signature != "kv-conservation.reported-errors"   # another rule of the same check judged on
    assert not run.driver.skipped.get("kv-conservation, kv-coverage, kv-excess")


def test_replay_max_seconds_stops_one_run_incomplete_and_compares_none(tmp_path, capsys) -> None:
    """300 requests of 60 tokens (thousands of judged steps) replayed with a bound
    of half a second: INCOMPLETE after some steps, exit 1, no second run (a cut
    run is not compared), nothing said about the file's property; 0 is bad input."""
    cfg = Config(**{**Config().to_json(), "num_blocks": 4000, "max_num_seqs": 64, "max_num_batched_tokens": 256,
                    "prefill_chunk_size": 256})
    path = tmp_path / "long.json"
    save_workload(Workload(cfg, tuple(RequestSpec(f"r{i}", (1, 2, 3, 4), 60, arrival=i) for i in range(300)),
                           {"property": "stall"}), path)
    assert main(["replay", str(path), "--max-seconds", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "INCOMPLETE: --max-seconds passed after" in out and "note: the file records" not in out
    assert main(["replay", str(path), "--max-seconds", "0.5", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["incomplete"] and data["runs"] == 1 and data["steps"] > 0 and not data["drained"]
    assert main(["replay", str(path), "--max-seconds", "0"]) == 2
    assert "--max-seconds: must be > 0" in capsys.readouterr().err
