"""Every distinct bug in one campaign: signatures, --keep-going, ignoring one
rule or one crash line, and independent seeds."""

from __future__ import annotations

import inspect
import json
from functools import partial
from pathlib import Path

import pytest

from loopcheck.checks.base import Violation
from loopcheck.checks.suite import CheckSet
from loopcheck.cli import main
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.seeds import derived_seed
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import RequestSpec, Workload, load_workload
from loopcheck.sut.driver import run_workload
from tests.toy_scheduler import PINNED, ToyScheduler

TOY = str(Path(__file__).parent / "toy_scheduler.py")
PROPERTY = CheckSet("property")


def toy(*bugs: str):
    return partial(ToyScheduler, bugs=frozenset(bugs))


def crashing_abort() -> Workload:
    """A waiting request aborted: the toy with crash-on-abort raises in step()."""
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 8, "block_size": 2, "max_num_seqs": 1})
    return Workload(cfg, (RequestSpec("a", (1, 2, 3), 3), RequestSpec("b", (4, 5), 2, abort_at=1)))


def test_a_violation_is_signed_by_the_rule_that_built_it() -> None:
    here, line = Violation("work", "made here"), inspect.currentframe().f_lineno
    assert here.where == f"tests/test_keep_going.py:{line}" and here.signature == f"work@{here.where}"
    assert Violation("work", "x", where="checks/lifecycle.py:1").signature == "work@checks/lifecycle.py:1"


def test_a_crash_is_signed_by_the_systems_line_and_the_exception_type() -> None:
    run = run_workload(crashing_abort(), toy("crash-on-abort"), PROPERTY.build())
    v = run.violation
    assert v is not None and v.prop == "crash"
    assert v.where.startswith("tests/toy_scheduler.py:") and v.where.endswith(":RuntimeError")
    line = int(v.where.split(":")[1])
    source = (Path(TOY).read_text().splitlines())[line - 1]
    assert 'raise RuntimeError("abort of a waiting request")' in source


def test_an_ignored_crash_ends_its_run_quietly_and_other_crashes_still_count() -> None:
    found = run_workload(crashing_abort(), toy("crash-on-abort"), PROPERTY.build()).violation
    assert found is not None
    quiet = run_workload(crashing_abort(), toy("crash-on-abort"), PROPERTY.ignoring(found.signature).build())
    assert quiet.violation is None and not quiet.drained
    assert quiet.driver.ended_by is not None and quiet.driver.ended_by.signature == found.signature
    other = run_workload(crashing_abort(), toy("crash-on-abort"),
                         PROPERTY.ignoring("crash@tests/toy_scheduler.py:1:RuntimeError").build())
    assert other.violation is not None and other.violation.signature == found.signature


def test_the_caps_are_two_properties() -> None:
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 32, "block_size": 2, "max_num_seqs": 1,
                    "max_num_batched_tokens": 64, "prefill_chunk_size": 64})
    w = Workload(cfg, tuple(RequestSpec(f"r{i}", (i + 1, 2), 2) for i in range(3)))
    seq = run_workload(w, toy("slot-cap"), PROPERTY.build()).violation
    assert seq is not None and seq.prop == "seq-cap"
    assert run_workload(w, toy("slot-cap"), PROPERTY.ignoring("seq-cap").build()).violation is None


@pytest.mark.parametrize("entry,error", [
    ("crash", "ignore one by its signature"), ("liveness", "ignore one by its signature"),
    ("work@", "names no place after '@'"), ("nope@x.py:1", "unknown property 'nope'")])
def test_ignore_entries_are_properties_or_signatures(entry: str, error: str) -> None:
    with pytest.raises(WorkloadError, match=error):
        CheckSet("property", frozenset({entry}))
    assert CheckSet("property", frozenset({"crash@x.py:3:ValueError", "work@checks/lifecycle.py:9"})).ignore


def test_keep_going_reports_each_distinct_bug_once_each_in_a_file_that_replays(tmp_path: Path) -> None:
    """Three bugs of three properties: one campaign finds all three (a work
    bound, not a time box), writes each once, and each file replays to its
    signature; without --keep-going the same campaign stops at the first."""
    three = toy("leak", "slot-cap", "crash-on-abort")
    result = run_campaign("guarded", 600, 5, tmp_path / "all", "random", factory=three, checks=PROPERTY,
                          keep_going=True, max_examples=1500, max_replays=60)
    signatures = [f.violation.signature for f in result.findings]
    assert len(signatures) == len(set(signatures))
    assert {f.violation.prop for f in result.findings} >= {"kv-conservation", "seq-cap", "crash"}
    for f in result.findings:
        assert f.counterexample.exists()
        replayed = run_workload(load_workload(f.counterexample), three, f.checks.build()).violation
        assert replayed is not None and replayed.signature == f.violation.signature
    first = run_campaign("guarded", 600, 5, tmp_path / "first", "random", factory=three, checks=PROPERTY,
                         max_examples=1500, max_replays=60)
    assert len(first.findings) == 1 and first.findings[0].violation.signature == signatures[0]


def test_the_command_lists_distinct_bugs_and_reproduces_them(tmp_path: Path, capsys) -> None:
    argv = ["fuzz", "--adapter", f"{TOY}:leaky_over_slots", "--keep-going", "--max-examples", "600",
            "--budget-seconds", "600", "--seed", "2", "--shrink-replays", "40", "--json"]
    assert main(argv + ["--out", str(tmp_path / "a")]) == 1
    one = json.loads(capsys.readouterr().out.splitlines()[-1])
    props = sorted(c["property"] for c in one["counterexamples"])
    assert props == ["kv-conservation", "seq-cap"]
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
    """The leaking toy: once its leak (kv-conservation) is ignored, the stall it
    causes later in the same run ends the run quietly, named in `ended_by`."""
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 4, "block_size": 2, "max_num_seqs": 2})
    w = Workload(cfg, (RequestSpec("a", (1, 2, 3), 2), RequestSpec("b", (4, 5, 6), 2, arrival=1),
                       RequestSpec("c", (7, 8, 9), 2, arrival=2)))
    leak = run_workload(w, toy("leak"), PROPERTY.build()).violation
    assert leak is not None and leak.prop == "kv-conservation"
    quiet = run_workload(w, toy("leak"), PROPERTY.ignoring("kv-conservation").build())
    assert quiet.violation is None and quiet.driver.ended_by is not None
    assert quiet.driver.ended_by.prop == "stall"   # (its blocks never come back)
