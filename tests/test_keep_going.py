"""Every distinct bug in one campaign: signatures, --keep-going, ignoring one
rule or one crash line, and independent seeds."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis.database import InMemoryExampleDatabase

from loopcheck.checks.base import Violation, ignored
from loopcheck.checks.suite import CheckSet
from loopcheck.cli import main
from loopcheck.driver.driver import message_shape, run_workload
from loopcheck.fuzz.campaign import Hunt, run_campaign, run_recorded
from loopcheck.fuzz.machine import LAST_FAILURE, SEPARATIONS, Stats
from loopcheck.fuzz.seeds import derived_seed
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.shrink import separated
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import RequestSpec, Workload, load_workload
from loopcheck.sut.code import functions
from tests.toy_scheduler import PINNED, toy

TOY = str(Path(__file__).parent / "toy_scheduler.py")
PROPERTY = CheckSet("property")



def crashing_abort() -> Workload:
    """A waiting request aborted: the toy with crash-on-abort raises in step()."""
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 8, "block_size": 2, "max_num_seqs": 1})
    return Workload(cfg, (RequestSpec("a", (1, 2, 3), 3), RequestSpec("b", (4, 5), 2, abort_at=1)))


def leaking() -> Workload:
    """Three requests on a pool of 4 blocks: the toy with its leak loses the first
    one's blocks, and the others stall for them."""
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 4, "block_size": 2, "max_num_seqs": 2})
    return Workload(cfg, (RequestSpec("a", (1, 2, 3), 2), RequestSpec("b", (4, 5, 6), 2, arrival=1),
                          RequestSpec("c", (7, 8, 9), 2, arrival=2)))


def test_a_violation_is_signed_by_its_property_and_rule() -> None:
    assert Violation("seq-cap", "one rule").signature == "seq-cap"
    assert Violation("work", "x", rule="token-uncomputed").signature == "work.token-uncomputed"
    assert Violation("crash", "x", where="a/b.py:f:ValueError:0a1b2c").signature == "crash@a/b.py:f:ValueError:0a1b2c"


def test_a_crash_is_signed_by_the_systems_function_the_exception_type_and_the_message_shape() -> None:
    run = run_workload(crashing_abort(), toy("crash-on-abort"), PROPERTY.build())
    v = run.violation
    assert v is not None and v.prop == "crash"
    file, function, kind, shape = v.where.split(":")
    assert (file, kind, len(shape)) == ("tests/toy_scheduler.py", "RuntimeError", 6)
    source = Path(TOY).read_text().splitlines()
    first, last = next((a, b) for a, b, name in functions(TOY) if name == function)
    assert any('raise RuntimeError("abort of a waiting request")' in line for line in source[first - 1:last])
    assert message_shape("block 12 at 0x7f3a is free") == message_shape("block 3 at 0x10 is free")
    assert message_shape("block 12 is free") != message_shape("block 12 is held")


def test_an_ignored_crash_ends_its_run_quietly_and_other_crashes_still_count() -> None:
    found = run_workload(crashing_abort(), toy("crash-on-abort"), PROPERTY.build()).violation
    assert found is not None
    quiet = run_workload(crashing_abort(), toy("crash-on-abort"), PROPERTY.ignoring(found.signature).build())
    assert quiet.violation is None and not quiet.drained
    assert quiet.driver.ended_by is not None and quiet.driver.ended_by.signature == found.signature
    other = run_workload(crashing_abort(), toy("crash-on-abort"),
                         PROPERTY.ignoring("crash@tests/toy_scheduler.py:ToyScheduler.add:RuntimeError").build())
    assert other.violation is not None and other.violation.signature == found.signature
    cut = found.signature.rpartition(":")[0]   # (every message shape of that crash: a signature cut at a ':')
    assert run_workload(crashing_abort(), toy("crash-on-abort"), PROPERTY.ignoring(cut).build()).violation is None


def test_the_caps_are_two_properties() -> None:
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 32, "block_size": 2, "max_num_seqs": 1,
                    "max_num_batched_tokens": 64, "prefill_chunk_size": 64})
    w = Workload(cfg, tuple(RequestSpec(f"r{i}", (i + 1, 2), 2) for i in range(3)))
    seq = run_workload(w, toy("slot-cap"), PROPERTY.build()).violation
    assert seq is not None and seq.prop == "seq-cap"
    assert run_workload(w, toy("slot-cap"), PROPERTY.ignoring("seq-cap").build()).violation is None


@pytest.mark.parametrize("entry,error", [
    ("crash", "ignore one by its signature"), ("hang", "ignore one by its signature"),
    ("work@", "names no place after '@'"), ("nope@x.py:f", "unknown property 'nope'"),
    ("work.nope", "unknown rule 'work.nope'"), ("seq-cap.nope", "seq-cap alone: it has one rule"),
    ("work@checks/lifecycle.py:9", "a signature by line of an older loopcheck that this one does not know")])
def test_ignore_entries_are_properties_rules_or_signatures(entry: str, error: str) -> None:
    with pytest.raises(WorkloadError, match=error):
        CheckSet("property", frozenset({entry}))
    assert CheckSet("property", frozenset({"crash@x.py:f:ValueError", "work.token-uncomputed", "liveness"})).ignore


def test_signatures_by_line_of_the_last_release_are_read_as_their_new_names(capsys) -> None:
    old = {"stall@checks/liveness.py:45", "work@checks/lifecycle.py:123", "liveness@sut/driver.py:268"}
    assert CheckSet("property", frozenset(old)).ignore == {"stall.state-repeats", "work.token-uncomputed", "liveness"}
    err = capsys.readouterr().err
    assert "stall@checks/liveness.py:45 is a signature by line of an older loopcheck; it is now stall.state-repeats" \
        in err
    line = next(a for a, _, name in functions(TOY) if name == "ToyScheduler.step") + 1
    (entry,) = CheckSet("property", frozenset({f"crash@tests/toy_scheduler.py:{line}:RuntimeError"})).ignore
    assert entry == "crash@tests/toy_scheduler.py:ToyScheduler.step:RuntimeError"


def test_keep_going_reports_each_distinct_bug_once_each_in_a_file_that_replays(tmp_path: Path) -> None:
    """Three bugs of three properties: one campaign finds all three (a work
    bound, not a time box), writes each once, and each file replays to its
    signature; without --keep-going the same campaign stops at the first."""
    three = toy("leak", "slot-cap", "crash-on-abort")
    result = run_campaign(CampaignSettings(
        "guarded", 600, 5, tmp_path / "all", "random", factory=three, checks=PROPERTY, keep_going=True,
        max_examples=1500, max_replays=60))
    signatures = [f.violation.signature for f in result.findings]
    assert len(signatures) == len(set(signatures))
    assert {f.violation.prop for f in result.findings} >= {"kv-conservation", "seq-cap", "crash"}
    for f in result.findings:
        assert f.counterexample.exists()
        replayed = run_workload(load_workload(f.counterexample), three, f.checks.build()).violation
        assert replayed is not None and replayed.signature == f.violation.signature
    first = run_campaign(CampaignSettings(
        "guarded", 600, 5, tmp_path / "first", "random", factory=three, checks=PROPERTY, max_examples=1500,
        max_replays=60))
    assert len(first.findings) == 1 and first.findings[0].violation.signature == signatures[0]


def test_the_command_lists_distinct_bugs_and_reproduces_them(tmp_path: Path, capsys) -> None:
    argv = ["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--max-examples", "600",
            "--budget-seconds", "600", "--seed", "2", "--shrink-replays", "40", "--json"]
    assert main(argv + ["--out", str(tmp_path / "a")]) == 1
    one = json.loads(capsys.readouterr().out.splitlines()[-1])
    props = [c["property"] for c in one["counterexamples"]]   # (the leak's lone preemption may come too)
    assert {"kv-conservation", "seq-cap"} <= set(props)
    assert len({c["signature"] for c in one["counterexamples"]}) == len(props)
    assert all("--keep-going" in c["reproduce"] for c in one["counterexamples"])
    assert f"--ignore {one['counterexamples'][0]['signature']}" in one["counterexamples"][1]["replay"]
    report = Path(one["report"]).read_text()   # OUT/report.md: each finding, its replay line and timeline
    for c in one["counterexamples"]:
        picture = Path(c["file"]).with_suffix(".png")
        assert c["signature"] in report and c["replay"] in report and picture.name in report and picture.exists()
    assert main(argv + ["--out", str(tmp_path / "b")]) == 1   # the same seed and work bound: the same files
    two = json.loads(capsys.readouterr().out.splitlines()[-1])
    for a, b in zip(one["counterexamples"], two["counterexamples"], strict=True):
        assert Path(a["file"]).read_bytes() == Path(b["file"]).read_bytes()


def test_seeds_of_a_campaigns_parts_are_independent() -> None:
    seeds = {derived_seed(s, "batch", b) for s in range(20) for b in range(20)}
    assert len(seeds) == 400   # S + b gave 39
    assert derived_seed(7, "worker", 1) == derived_seed(7, "worker", 1) != derived_seed(7, "batch", 1)


def test_what_breaks_after_an_ignored_finding_is_its_consequence_not_a_new_bug() -> None:
    """The leaking toy: once its leak (kv-conservation) is ignored, what it
    causes later in the same run ends the run quietly, named in `ended_by`: the
    blocks held past what the running requests may hold (kv-excess, judged on
    by the same check), or, that ignored too, the stall (its blocks never come
    back)."""
    w = leaking()
    leak = run_workload(w, toy("leak"), PROPERTY.build()).violation
    assert leak is not None and leak.prop == "kv-conservation"
    quiet = run_workload(w, toy("leak"), PROPERTY.ignoring("kv-conservation").build())
    assert quiet.violation is None and quiet.driver.ended_by is not None
    assert quiet.driver.ended_by.prop == "kv-excess"
    quieter = run_workload(w, toy("leak"), PROPERTY.ignoring("kv-conservation", "kv-excess").build())
    assert quieter.violation is None and quieter.driver.ended_by is not None
    assert quieter.driver.ended_by.prop == "stall"


def test_a_run_stops_once_an_ignored_finding_shows_its_state_repeating() -> None:
    """Ignored, a stall found by the state key (the state after a step equal to
    the one before, no input to come) stops the run right there instead of at
    the step cap: every later step would repeat it. The run neither drains nor
    reports a finding; a stall found before a later input does not stop it."""
    w = leaking()
    quiet = run_workload(w, toy("leak"), PROPERTY.ignoring("kv-conservation", "kv-excess", "stall").build())
    (stall,) = [v for _, v in ignored(quiet.driver.checks) if v.prop == "stall"]
    assert stall.cycle is not None and quiet.violation is None and not quiet.drained
    assert quiet.driver.t == stall.step + 1 < quiet.driver.default_cap() - 10   # stopped after the step that showed it
    quiet.driver.last_input = stall.step + 1   # an input after it: the state may change again
    assert not quiet.driver.repeating()


def hidden_behind_a_stuck_request() -> Workload:
    """The toy with no-reject and slot-cap: `big` never fits and is not rejected
    (never-fit-not-rejected after 3 steps); later `a` and `b` run together over
    max_num_seqs 1 (seq-cap), a bug of its own that `big` has nothing to do with."""
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 4, "block_size": 2, "max_num_seqs": 1})
    return Workload(cfg, (RequestSpec("big", tuple(range(12)), 2), RequestSpec("a", (1, 2), 2, arrival=3),
                          RequestSpec("b", (3, 4), 2, arrival=3)))


def test_a_finding_after_an_ignored_one_counts_where_a_request_fewer_shows_it_alone(tmp_path: Path) -> None:
    """With never-fit-not-rejected ignored, seq-cap ends the run unreported (it
    came after the ignored finding); the campaign's runs try it without each
    request in turn, and without `big` it is the run's own finding: recorded,
    with that workload. A consequence of the ignored bug (the leak's stall) is
    not separated; each signature is tried in SEPARATIONS runs at most."""
    stuck, w = toy("no-reject", "slot-cap"), hidden_behind_a_stuck_request()
    checks = PROPERTY.ignoring("never-fit-not-rejected")
    run = run_workload(w, stuck, checks.build())
    assert run.violation is None and run.driver.ended_by.prop == "seq-cap"
    alone = separated(w, run.driver.ended_by.signature, stuck, checks.build)
    assert alone is not None and alone.violation.prop == "seq-cap" and [s.rid for s in alone.driver.specs] == ["a", "b"]
    hunt = Hunt(stuck, checks, tmp_path, Stats(), 0.0, InMemoryExampleDatabase())
    run_recorded([(w, Counter())], hunt)
    assert hunt.found is not None and hunt.found.prop == "seq-cap"
    assert [r.rid for r in load_workload(tmp_path / LAST_FAILURE).requests] == ["a", "b"]
    stats = Stats()
    first = stats.separate(run.driver, stuck, checks.build)
    assert first is not None and stats.separate(run.driver, stuck, checks.build) is first   # the same answer again

    def another(k: int):   # the same bug in another workload: `a` with another prompt
        a = replace(w.requests[1], prompt=(1, 10 + k))
        return run_workload(replace(w, requests=(w.requests[0], a, w.requests[2])), stuck, checks.build()).driver

    assert all(stats.separate(another(k), stuck, checks.build) is not None for k in range(SEPARATIONS - 1))
    assert stats.separate(another(SEPARATIONS), stuck, checks.build) is None   # SEPARATIONS runs tried for it
    leak = PROPERTY.ignoring("kv-conservation")
    quiet = run_workload(leaking(), toy("leak"), leak.build())
    assert quiet.driver.ended_by.prop == "kv-excess"   # (the leak again: no request fewer shows it alone)
    assert separated(leaking(), quiet.driver.ended_by.signature, toy("leak"), leak.build) is None


def test_a_campaign_reports_a_separated_finding_once_and_goes_on(tmp_path: Path) -> None:
    """Seed 3 of the stuck toy with never-fit-not-rejected and stall ignored
    meets seq-cap first after the ignored finding, separates it and reports
    it; once it is ignored the same example replayed from the database does not
    report it again (every finding's signature is distinct)."""
    checks = PROPERTY.ignoring("never-fit-not-rejected").ignoring("stall")
    result = run_campaign(CampaignSettings(
        "guarded", 600, 3, tmp_path, "random", factory=toy("no-reject", "slot-cap"), checks=checks, keep_going=True,
        max_examples=200, max_replays=30))
    signatures = [f.violation.signature for f in result.findings]
    assert result.stats.separations["seq-cap"] and "seq-cap" in signatures
    assert len(signatures) == len(set(signatures))
    assert not result.stats.separated   # it keeps no run (a vLLM run does not pickle): a worker's result crosses
    assert pickle.loads(pickle.dumps(result)).findings   # to the parent process
