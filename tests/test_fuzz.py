"""The fuzzer: a short deterministic campaign, the unguarded livelock found and
shrunk, and known bugs patched into the engine each caught."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from loopcheck.adapters.simulate import simulate_engine
from loopcheck.adapters.torch_sut import TorchSUT
from loopcheck.checks.base import Violation
from loopcheck.checks.suite import checks_for
from loopcheck.cli import main
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.pytest_plugin import run_machine
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.strategies import configs, request_bodies
from loopcheck.model.config import Config, regression_config
from loopcheck.model.workload import Workload, load_workload

# a small pool under pressure: preemptions, rewinds and snapshot restores are common
CONTENDED = Config(num_blocks=12, block_size=2, num_loops=2, kv_layout="last_exited", max_num_seqs=4,
                   max_num_batched_tokens=4, prefill_chunk_size=2, wcpb=True, snapshots=True)


def test_short_deterministic_campaigns_are_clean_under_the_guarded_policy() -> None:
    stats = run_machine(TorchSUT, st.just(regression_config()), max_examples=15, max_prompt=12,
                        max_tokens=8)
    assert stats.examples >= 15 and stats.steps > 100
    run_machine(TorchSUT, configs(preemption_policy="guarded"), max_examples=40)
    stats = run_machine(TorchSUT, st.just(replace(CONTENDED, prefix_caching=True)), max_examples=40)
    assert stats.branches["preempt+snapshot"] > 0 and stats.branches["resume+snapshot-restore"] > 0
    assert stats.branches["admit+prefix-hit"] + stats.branches["resume+prefix-hit"] > 0


def test_unguarded_campaign_finds_a_small_livelock_that_replays_on_the_engine(tmp_path) -> None:
    result = run_campaign(CampaignSettings("unguarded", 600, 1, tmp_path, max_examples=200))
    assert result.violation is not None and result.violation.prop == "livelock"
    assert result.requests <= 5
    cex = load_workload(result.counterexample)
    assert cex.extra["property"] == "livelock" and "cycle" in cex.extra
    run = simulate_engine(cex, 300)
    assert not run.drained and run.counters.preemptions > 100


def find(patches, config_strategy, monkeypatch, max_examples=150, ignore=frozenset()) -> Violation:
    for target, name, value in patches:
        monkeypatch.setattr(target, name, value)
    with pytest.raises(Violation) as caught:
        run_machine(TorchSUT, config_strategy, max_examples=max_examples, shrink=False,
                    out_dir=tempfile.mkdtemp(prefix="loopcheck-test-"), ignore=ignore)
    return caught.value


def test_mutant_no_rewind_on_preemption(monkeypatch) -> None:
    from loopcheck.engine.scheduler import Scheduler

    original = Scheduler.preempt

    def preempt(self, victim, for_seq):
        saved = (victim.chunk_end, victim.chunk_depth)
        victim.chunk_end = victim.frontier          # hide the in-flight chunk from the rewind
        original(self, victim, for_seq)
        victim.chunk_end, victim.chunk_depth = saved  # ... and keep it

    v = find([(Scheduler, "preempt", preempt)], st.just(CONTENDED), monkeypatch)
    assert v.prop == "conformance"


def test_mutant_snapshot_restored_to_the_wrong_depth(monkeypatch) -> None:
    from loopcheck.engine.kv_cache import KVStore

    original = KVStore.restore

    def restore(self, pages, snap, first_page):
        snap.keys = [k.roll(1, dims=0) for k in snap.keys]  # planes shifted by one depth
        original(self, pages, snap, first_page)

    v = find([(KVStore, "restore", restore)], st.just(replace(CONTENDED, wcpb=False)), monkeypatch,
             max_examples=300)
    assert v.prop == "output-equivalence"


def test_mutant_shared_block_freed_while_referenced(monkeypatch) -> None:
    from loopcheck.engine.kv_cache import BlockPool

    original = BlockPool.release

    def release(self, page):
        if page.key is not None and page.holders > 1:
            self.free.extend(page.blocks)                 # freed although others still hold it
        original(self, page)

    v = find([(BlockPool, "release", release)], st.just(replace(CONTENDED, prefix_caching=True)), monkeypatch,
             max_examples=300)
    assert v.prop == "kv-conservation"


def test_mutant_abort_not_releasing_blocks(monkeypatch) -> None:
    from loopcheck.engine.scheduler import Scheduler
    from loopcheck.model.events import Finish

    original = Scheduler.end

    def end(self, seq, reason):
        if reason == "abort":
            seq.status, seq.finish_reason = "finished", reason
            self.emit(Finish, seq, reason)
            return
        original(self, seq, reason)

    # (blocks held that no request holds; the model frees them, so later admissions differ
    # too: that consequence is ignored, as a user would --ignore it)
    v = find([(Scheduler, "end", end)], st.just(CONTENDED), monkeypatch, max_examples=300,
             ignore=frozenset({"conformance"}))
    assert v.prop == "kv-conservation"


def test_mutant_watermark_ignored(monkeypatch) -> None:
    from loopcheck.engine.scheduler import Scheduler

    original = Scheduler.room_for

    def room_for(self, adm, free_blocks, running, cache_only, watermark):
        return original(self, adm, free_blocks, running, cache_only, False)

    v = find([(Scheduler, "room_for", room_for)], st.just(replace(CONTENDED, watermark_blocks=4)), monkeypatch)
    assert v.prop == "conformance"


def test_fuzz_cli(tmp_path, capsys) -> None:
    code = main(["fuzz", "--policy", "unguarded", "--budget-seconds", "600", "--max-examples", "200", "--seed", "3",
                 "--shrink-replays", "40", "--out", str(tmp_path), "--json"])
    assert code == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["seed"] == 3 and "reproduce: loopcheck fuzz" in captured.err
    assert data["counterexamples"][0]["property"] == "livelock"
    assert main(["replay", data["counterexamples"][0]["file"], "--adapter", "torch"]) == 1
    assert main(["fuzz", "--budget-seconds", "0"]) == 2


def test_parallel_campaigns_report_each_worker(tmp_path, capsys) -> None:
    """--workers 2 with progress lines (no --json): each worker's campaign comes
    back to the parent (a result kept its progress hook, which no process can
    receive, and the command died) with its counterexample; the summary reports
    the bug both found once (one signature), from the first worker."""
    toy = str(Path(__file__).parent / "toy_scheduler.py")
    code = main(["fuzz", "--adapter", f"{toy}:leaky", "--workers", "2", "--budget-seconds", "600",
                 "--max-examples", "200", "--seed", "3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert (tmp_path / "w0/counterexample-kv-conservation.json").exists()
    assert (tmp_path / "w1/counterexample-kv-conservation.json").exists()
    assert out.count("COUNTEREXAMPLE kv-conservation.") == 1
    assert f"{tmp_path}/w0/counterexample-kv-conservation.json" in out


def test_the_example_database_keeps_failures_for_the_next_campaign(tmp_path) -> None:
    first = run_campaign(CampaignSettings("unguarded", 600, 4, tmp_path, max_examples=200, max_replays=20))
    assert first.violation is not None
    saved = [p for p in (tmp_path / "db").rglob("*") if p.is_file()]
    assert saved, "the failing example was not saved"
    again = run_campaign(CampaignSettings("unguarded", 600, 999, tmp_path, max_examples=200,
                         max_replays=20))   # another seed: the database replays it
    fresh = run_campaign(CampaignSettings("unguarded", 600, 999, tmp_path / "fresh", max_examples=200,
                         max_replays=20))
    assert again.violation is not None and fresh.violation is not None
    assert again.stats.examples < fresh.stats.examples


def test_rare_branches_are_read_from_event_sequences() -> None:
    from loopcheck.fuzz.machine import Stats
    from loopcheck.model.events import Abort, Admit, Preempt, Resume
    from loopcheck.sut.protocol import Observation

    stats = Stats()
    stats.new_example()
    step1 = [Preempt("v", "w", True), Admit("w", 0)]      # paired: not futile
    step2 = [Preempt("v2", "w2", True)]                              # w2 not admitted: futile
    step3 = [Resume("v", 0, 2), Preempt("v", "w", True), Abort("v2")]
    for events in (step1, step2, step3):
        stats.note_step(events, Observation())
    assert stats.branches["preempt+futile"] == 2      # step 3's preemption is not paired either
    assert stats.branches["preempt+again"] == 1 and stats.branches["abort+preempted"] == 1


def test_shrinking_is_bounded_by_replays_and_a_deadline_says_where_it_stopped() -> None:
    from loopcheck.fuzz.shrink import shrink
    from loopcheck.sut.model_sut import ModelSUT

    w = load_workload("examples/livelock.json").with_config(preemption_policy="unguarded")
    checks = lambda: checks_for("property")  # noqa: E731
    cut = shrink(w, "livelock", ModelSUT, checks, deadline=time.monotonic())
    assert cut.cut and cut.replays == 0 and cut.workload == w
    five = shrink(w, "livelock", ModelSUT, checks, max_replays=5)
    assert not five.cut and five.replays == 5 and len(five.workload.requests) < len(w.requests)
    assert shrink(w, "livelock", ModelSUT, checks, max_replays=5).workload == five.workload
    done = shrink(w, "livelock", ModelSUT, checks)
    assert not done.cut and done.replays < 400   # a fixpoint, not the bound
    assert shrink(w, "livelock", ModelSUT, checks, max_replays=done.replays).workload == done.workload


def test_shrinking_keeps_prompt_only_requests_valid_and_never_makes_them() -> None:
    """Shrinking lowers max_tokens only to values >= 1: a prompt-only request
    (max_tokens 0) is left as it is (a candidate with -1 had raised inside
    shrinking, where it read as "does not reproduce"), and a request with tokens
    does not become prompt-only."""
    from loopcheck.fuzz.shrink import candidates

    w = load_workload("examples/livelock.json")
    w = Workload(w.config, (replace(w.requests[0], max_tokens=0), replace(w.requests[1], max_tokens=2),
                            *w.requests[2:]))
    tokens = [{r.rid: r.max_tokens for r in cand.requests} for cand in candidates(w, {})]
    first, second = w.requests[0].rid, w.requests[1].rid
    assert all(row.get(first, 0) == 0 and all(m >= 1 for rid, m in row.items() if rid != first) for row in tokens)
    assert any(row.get(second) == 1 for row in tokens)


def test_the_printed_line_gives_the_same_counterexample_byte_for_byte_under_load(tmp_path, capsys) -> None:
    """The counterexample's reproduce line, run again into the same folder (its
    database now holds the failure) and into a fresh one with a busy CPU, writes
    the same file."""
    args = ["fuzz", "--adapter", "model", "--policy", "unguarded", "--budget-seconds", "600",
            "--max-examples", "200", "--seed", "7",
            "--json", "--out", str(tmp_path / "first")]
    assert main(args) == 1
    found = json.loads(capsys.readouterr().out)["counterexamples"][0]
    first = Path(found["file"]).read_bytes()
    line = shlex.split(found["reproduce"])[1:]
    assert "--shrink-replays" in line
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert main(line) == 1
        again = json.loads(capsys.readouterr().out)["counterexamples"][0]
        assert Path(again["file"]).read_bytes() == first
        fresh = line[:line.index("--out") + 1] + [str(tmp_path / "fresh")] + line[line.index("--out") + 2:]
        assert main(fresh) == 1
        elsewhere = json.loads(capsys.readouterr().out)["counterexamples"][0]
        assert elsewhere["file"] != found["file"] and Path(elsewhere["file"]).read_bytes() == first
    finally:
        hog.kill()
        hog.wait()


def test_prompts_start_with_a_shared_prefix_or_a_near_miss_of_it() -> None:
    """Near misses put a prefix's tokens after other tokens (a cache keyed by a
    page's own tokens hits them): the prefix without its first tokens, or with
    one token changed."""
    prefix = (10, 11, 12, 13, 14, 15)
    bodies = request_bodies(prefixes=(prefix,), max_prompt=2)
    for j in (1, 2, 4):
        hypothesis.find(bodies, lambda b, j=j: b["prompt"][:len(prefix) - j] == prefix[j:])
        changed = prefix[:j - 1] + (prefix[j - 1] + 1,) + prefix[j:]
        hypothesis.find(bodies, lambda b, changed=changed: b["prompt"][:len(prefix)] == changed)
    hypothesis.find(bodies, lambda b: b["prompt"][:len(prefix)] == prefix)


def test_a_dropped_request_s_gap_is_closed_by_its_lifetime() -> None:
    """Dropping a request that kept the pool busy for its lifetime moves what
    came after it earlier by that many steps (and one more or fewer), so a bug
    whose timing the drop would shift is kept: the candidates hold the drop
    with every later arrival moved by -life-1, -life and 1-life."""
    from loopcheck.fuzz.shrink import candidates, lifetimes
    from loopcheck.model.events import Admit, Arrive, Finish, Token
    from loopcheck.model.workload import RequestSpec

    trace = [[Arrive("f"), Admit("f", 0)], [Token("f", 0, 1, 1)],
             [Token("f", 1, 2, 1), Finish("f", "length")], [], [Arrive("u")]]
    assert lifetimes(trace) == {"f": 3, "u": 1}
    w = Workload(Config(), (RequestSpec("f", (1, 2), 2), RequestSpec("l", (3, 4), 2),
                            RequestSpec("u", (5,), 1, arrival=4)))
    moved = {c.requests[-1].arrival for c in candidates(w, {"f": 3}) if [r.rid for r in c.requests] == ["l", "u"]}
    assert {0, 1, 2} <= moved and 4 in moved   # 4 - 3 - 1, 4 - 3, 4 - 3 + 1; and the drop alone
