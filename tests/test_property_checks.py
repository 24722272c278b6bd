"""Property mode on systems that do not share loopcheck's semantics: a small
third-party-style scheduler (tests/toy_scheduler.py) passes clean, and each bug
planted in it is caught by the property it breaks, with no reference model;
property mode on loopcheck's own engine still finds the unguarded livelock."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from loopcheck.adapters.torch_sut import TorchSUT
from loopcheck.checks.base import Violation
from loopcheck.checks.needs import covered_blocks
from loopcheck.checks.rules import NO_SEMANTICS, DocumentedRules
from loopcheck.checks.safety import KvHitBlocks
from loopcheck.checks.suite import CheckSet, checks_for
from loopcheck.cli import main
from loopcheck.driver import driver as sut_driver
from loopcheck.driver.driver import Overran, run_workload, watchdog
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.pytest_plugin import run_machine
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Prefill, Resume
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.sut.model_sut import ModelSUT
from loopcheck.sut.view import RUNNING, RequestView
from tests.engine_workloads import livelock_example
from tests.helpers import req, workload
from tests.toy_scheduler import MISPLACED, PINNED, ToyScheduler, toy

TOY = str(Path(__file__).parent / "toy_scheduler.py")
SEEN_IN_TABLES_TOO = {"page-key"}   # bugs kv-hit-blocks sees as well (a hit reads a block of other tokens)



def test_the_clean_toy_breaks_no_property(tmp_path) -> None:
    stats = run_machine(toy(), max_examples=300, out_dir=tmp_path)
    assert stats.examples >= 300 and stats.branches["preempt+restart"] > 0 and stats.branches["abort"] > 0


# (where an example can show a consequence of the bug first, that consequence is
# ignored, as a user would --ignore it)
@pytest.mark.parametrize("bug,prop,ignore", [
    # an admitted request that never fits can loop before it is judged
    ("leak", "kv-conservation", ()), ("no-reject", "never-fit-not-rejected", ("livelock",)),
    ("slot-cap", "seq-cap", ()),
    # (a toy blind to priorities may also preempt for a less urgent request: priority-victim, a consequence)
    ("budget", "token-cap", ()), ("crash-on-abort", "crash", ()),
    ("no-priority", "priority-inversion", ("priority-victim",)),
    ("batch-dependent-token", "output-equivalence", ()),
    # the extra token needs a block beyond the request's lifetime need, so a pointless lone preemption shows first
    ("overshoot", "lifecycle", ("lone-preemption",)),
    ("ignore-stop", "lifecycle", ()), ("self-preempt", "lone-preemption", ()), ("skip-position", "work", ()),
    ("chunk-overrun", "work", ()), ("lost-abort", "abort", ()), ("unreported-stop", "reported-outputs", ()),
    ("short-alloc", "kv-tables", ()), ("early-token", "work", ()), ("stale-resume", "work", ()),
    # (with block tables, kv-hit-blocks sees the wrong block too: the toy here reports none, see below)
    ("page-key", "prefix-hits", ()), ("keep-on-preempt", "kv-excess", ()), ("phantom-restore", "work", ()),
    # (a stale key's page, reused, is a wrong block for the hit too)
    ("urgent-victim", "priority-victim", ()), ("stale-key", "kv-tables", ("kv-hit-blocks",)),
    ("split-chunk", "work", ()), ("prompt-only-early", "work", ())])
def test_each_planted_bug_is_caught_by_its_property(bug, prop, ignore, tmp_path) -> None:
    """Each bug is caught by the one property it breaks, first (where another
    property shows a consequence of it first, that one is ignored, as a user
    would --ignore it; where block tables show it too, the toy reports none:
    kv-hit-blocks has a planted bug of its own, below)."""
    factory = partial(ToyScheduler, bugs=frozenset({bug}), block_tables=bug not in SEEN_IN_TABLES_TOO)
    with pytest.raises(Violation) as caught:
        run_machine(factory, max_examples=1000, shrink=False, out_dir=tmp_path, ignore=frozenset(ignore))
    assert caught.value.prop == prop
    assert (tmp_path / f"counterexample-{prop}.json").exists()


@pytest.mark.parametrize("kind", sorted(MISPLACED))
def test_an_event_in_a_state_where_it_cannot_come_is_a_lifecycle_violation(kind, tmp_path) -> None:
    """One planted bug per kind of event: the toy reports it for a request in a
    state where no scheduler can (an arrival or admission of a running request,
    a token or finish of a finished one, a preemption, resumption or prefill of a
    waiting one, ...); lifecycle names it."""
    with pytest.raises(Violation) as caught:
        run_machine(toy(f"misplaced-{kind}"), max_examples=300, shrink=False, out_dir=tmp_path)
    assert caught.value.prop == "lifecycle" and f"{kind}(" in str(caught.value)


def test_a_table_a_page_short_is_caught_by_the_block_count_where_no_tables_are_reported(tmp_path) -> None:
    """The short allocation again, on a toy that reports no block tables: the
    count of blocks held alone shows the positions computed without KV
    (kv-coverage; kv-tables cannot run)."""
    with pytest.raises(Violation) as caught:
        run_machine(partial(ToyScheduler, bugs=frozenset({"short-alloc"}), block_tables=False), max_examples=1000,
                    shrink=False, out_dir=tmp_path)
    assert caught.value.prop == "kv-coverage"


def test_a_block_in_two_tables_is_one_full_page_of_the_same_tokens() -> None:
    """kv-tables on the toy whose evicted prefix pages keep their keys: q0's page
    (0,) is cached in block 0 and evicted when q1 needs a third page; q2, preempted
    and resumed, shares block 0 through the stale key as its page 0 while q1
    writes it as its page 2. The clean toy drains the same workload."""
    pinned = {k: v for k, v in PINNED.items() if k != "execution"}
    w = Workload(Config(num_blocks=5, block_size=1, max_num_seqs=3, max_num_batched_tokens=3, prefill_chunk_size=1,
                        prefix_caching=True, **pinned),
                 (RequestSpec("q0", (0,), 1), RequestSpec("q1", (0, 0), 3), RequestSpec("q2", (0, 0, 0, 0), 1)))
    stale = run_workload(w, toy("stale-key"), checks_for("property"))
    assert stale.violation is not None and stale.violation.prop == "kv-tables" and stale.violation.step == 2
    assert stale.violation.message == "block 0 is page 2 of q1 and page 0 of q2"
    clean = run_workload(w, toy(), checks_for("property"))
    assert clean.violation is None and clean.drained


def test_a_hit_reads_the_block_that_last_held_its_tokens() -> None:
    """kv-hit-blocks on the toy whose evicted prefix pages keep their keys: q0's
    page (5,) is cached in block 0, which q1 takes as its page 4 when the queue
    runs dry and fills with its own tokens; once q1 has finished (nobody holds
    block 0, so kv-tables has no two tables to compare), q2 hits (5,) through
    the stale key and reads q1's page. No other check sees it; the clean toy
    drains the same workload."""
    pinned = {k: v for k, v in PINNED.items() if k != "execution"}
    w = Workload(Config(num_blocks=6, block_size=1, max_num_seqs=1, max_num_batched_tokens=8, prefill_chunk_size=8,
                        prefix_caching=True, **pinned),
                 (RequestSpec("q0", (5, 5), 1), RequestSpec("q1", (7,) * 5, 2),
                  RequestSpec("q2", (5, 9), 2, arrival=6)))
    stale = run_workload(w, toy("stale-key"), checks_for("property"))
    assert stale.violation is not None and stale.violation.prop == "kv-hit-blocks" and stale.violation.step == 6
    assert stale.violation.message == ("admit(q2, 1): hit page 0 of q2 (its tokens at positions 0..1: [5]) is block 0, "
                                       "which last held page 4 of q1")
    others = [c for c in checks_for("property") if not isinstance(c, KvHitBlocks)]
    assert run_workload(w, toy("stale-key"), others).violation is None
    clean = run_workload(w, toy(), checks_for("property"))
    assert clean.violation is None and clean.drained


def test_ignore_looks_past_a_known_bug(tmp_path, capsys) -> None:
    """On the toy with two bugs, with the leak's kv-conservation ignored, a
    campaign goes on to the next property broken (in a run, before any leak: what
    breaks after an ignored finding is not reported), counts the runs that broke
    the ignored one, and gives a reproduce line and a replay command with the
    same --ignore; the file replays to its signature. An unknown property is one
    error line, exit 2."""
    adapter = f"{TOY}:leaky_over_slots"
    code = main(["fuzz", "--adapter", adapter, "--ignore", "kv-conservation", "--budget-seconds", "600",
                 "--max-examples", "300", "--seed", "3", "--out", str(tmp_path), "--json"])
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])   # (seeds 1 and 2 meet the slot bug first)
    assert code == 1
    (found,) = summary["counterexamples"]
    assert found["property"] != "kv-conservation" and "--ignore kv-conservation" in found["reproduce"]
    assert summary["ignored"][0]["signature"].startswith("kv-conservation.") and summary["ignored"][0]["runs"] > 0
    replay = ["replay", found["file"], "--adapter", adapter, "--check", "property"]
    assert main(replay + ["--ignore", "kv-conservation"]) == 1
    out = capsys.readouterr().out
    assert f"REPRODUCED {found['property']}" in out and f"signature {found['signature']}" in out
    assert main(replay + ["--ignore", found["property"], "--ignore", "kv-conservation"]) == 0   # repeated: both
    assert "this replay found no violation" in capsys.readouterr().out
    assert main(replay + ["--ignore", "kv-conservation,nope"]) == 2
    assert "loopcheck replay: error: --ignore: unknown property 'nope' (known: abort, " in capsys.readouterr().err
    assert main(replay + ["--ignore", "crash"]) == 2
    assert "--ignore: 'crash' is the driver's own finding (crash, hang: " in capsys.readouterr().err


def test_the_plugin_ignores_too(tmp_path, capsys) -> None:
    with pytest.raises(Violation) as caught:
        run_machine(toy("leak", "slot-cap"), max_examples=300, shrink=False, out_dir=tmp_path,
                    ignore=frozenset({"kv-conservation"}))
    assert caught.value.prop != "kv-conservation"
    assert "--check property --ignore kv-conservation" in capsys.readouterr().out
    with pytest.raises(WorkloadError, match="unknown property 'nope'"):
        run_machine(toy(), max_examples=1, out_dir=tmp_path, ignore=frozenset({"nope"}))


def test_each_check_names_the_properties_it_reports() -> None:
    """A check's `props` (which --ignore accepts) hold every property name its
    module raises a Violation with."""
    import ast

    from loopcheck.checks.suite import properties

    for module in Path("checks").glob("*.py"):
        tree = ast.parse(module.read_text())
        raised = {call.args[0].value for call in ast.walk(tree) if isinstance(call, ast.Call)
                  and getattr(call.func, "id", None) == "Violation" and isinstance(call.args[0], ast.Constant)}
        declared = {p for node in tree.body if isinstance(node, ast.ClassDef) for stmt in node.body
                    if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", None) == "props"
                    for p in ast.literal_eval(stmt.value)}
        assert raised <= declared, (module, raised - declared)
    assert {"kv-tables", "priority-inversion", "conformance", "stall"} <= set(properties())


def test_property_mode_finds_the_unguarded_livelock_on_the_engine() -> None:
    run = run_workload(livelock_example().with_config(preemption_policy="unguarded"), TorchSUT,
                       checks_for("property"))
    assert run.violation is not None and run.violation.prop == "livelock" and run.violation.cycle
    guarded = run_workload(livelock_example().with_config(preemption_policy="guarded"), TorchSUT,
                           checks_for("property"))
    assert guarded.violation is None and guarded.drained


def test_the_plugin_writes_a_counterexample_and_the_replay_command(tmp_path, capsys) -> None:
    with pytest.raises(Violation):
        run_machine(toy("leak"), max_examples=200, shrink=False, out_dir=tmp_path)
    out = capsys.readouterr().out
    assert f"counterexample: {tmp_path}/counterexample-kv-conservation.json" in out
    assert "replay: loopcheck replay" in out and "--adapter MODULE:FACTORY --check property" in out


def test_verify_on_another_system(capsys) -> None:
    from loopcheck.cli import main

    toy_file = "tests/toy_scheduler.py"
    assert main(["verify", "--adapter", f"{toy_file}:ToyScheduler", "--fuzz-seconds", "600", "--max-examples", "60",
                 "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: PASS: no property broke" in out
    assert re.search(r"every workload of the tiny scope +explore +certificate: [\d,]+ workloads", out)
    assert "checks not run: futile-preemption in " in out and "one-victim, bypass-limit, " in out   # no semantics
    assert "victim-order in " in out and "(the system claims no victim order (capabilities.victim_order))" in out
    assert main(["verify", "--adapter", f"{toy_file}:leaky", "--fuzz-seconds", "600", "--max-examples", "300",
                 "--seed", "1"]) == 1
    out = capsys.readouterr().out
    assert "kv-conservation" in out and "VERDICT: FAIL" in out
    assert re.search(r"every workload of the tiny scope +explore +kv-conservation\.\S+ in 1 steps", out)


def test_verifys_fuzz_campaigns_run_at_once_and_report_in_a_fixed_order(tmp_path) -> None:
    """The torch engine's three campaigns of `verify` (bounded by examples here)
    run in processes of their own; the rows come back in the order verify
    lists them, each judged (the guarded ones clean)."""
    from loopcheck import verify_cmd

    rows = verify_cmd.fuzz_rows(600, 1, tmp_path, 8)
    assert [row[0] for row in rows] == [f"lockstep + liveness, {mode} configs ({policy})"
                                        for policy, mode in verify_cmd.FUZZ_ROWS]
    assert [row[2].startswith("clean: 8 examples") for row in rows[:2]] == [True, True]
    assert rows[2][2].startswith(("livelock after", "no livelock found"))
    assert {path.name for path in tmp_path.iterdir()} == {"guarded-regression", "guarded-random",
                                                          "unguarded-regression"}


def test_a_violation_names_the_step_that_showed_it() -> None:
    """Violation.step numbers steps as traces and arrivals do: a check that fails
    on a step's events names that step; a crash names the step that raised."""
    pinned = {k: v for k, v in PINNED.items() if k != "execution"}
    cfg = dict(num_blocks=8, block_size=2, max_num_seqs=1, max_num_batched_tokens=4, prefill_chunk_size=4, **pinned)
    over = run_workload(workload(req("a", 2, 2), **cfg), toy("overshoot"), checks_for("property"))
    assert over.violation is not None and over.violation.prop == "lifecycle"
    step = over.violation.step
    assert step == len(over.driver.trace) - 1 == 2   # prefill + token 0, token 1, then the extra token 2
    assert [str(e) for e in over.driver.trace[step] if e.kind == "token"] == [f"token(a, 2, {(1 + 2 + 14) % 64}, 1)"]
    crashed = run_workload(workload(req("a", 2, 3), req("b", 2, 2, abort_at=1), **cfg), toy("crash-on-abort"),
                           checks_for("property"))
    assert crashed.violation is not None and crashed.violation.prop == "crash"
    assert crashed.violation.step == len(crashed.driver.trace) == 1   # step 1 raised; step 0 ran
    capped = run_workload(workload(req("a", 2, 3), **cfg), toy(), checks_for("property"), max_steps=2)
    assert capped.violation is not None and capped.violation.prop == "liveness"
    assert capped.violation.step == len(capped.driver.trace) - 1 == 1   # the run ended after step 1


def test_a_system_that_never_returns_is_a_hang(monkeypatch, tmp_path, capsys) -> None:
    """A call to a verb of the system that runs past CALL_TIMEOUT is stopped and
    reported as a hang of the step that ran it, naming where it was stopped (a
    slow build is not one); the fuzzer finds one, and replay reproduces it
    (exit 1)."""
    monkeypatch.setattr(sut_driver, "CALL_TIMEOUT", 0.2)
    pinned = {k: v for k, v in PINNED.items() if k != "execution"}
    cfg = dict(num_blocks=4, block_size=2, max_num_seqs=2, max_num_batched_tokens=8, prefill_chunk_size=4, **pinned)
    spun = run_workload(workload(req("a", 4, 4), req("b", 4, 1, arrival=1), **cfg), toy("spin"),
                        checks_for("property"))
    assert spun.violation is not None and spun.violation.prop == "hang"
    assert spun.violation.step == len(spun.driver.trace) == 1   # step 0 ran; step 1 was stopped
    assert "step() did not return within 0.2 s (stopped at " in spun.violation.message
    assert "toy_scheduler.py:" in spun.violation.message

    def slow_to_build(config: Config) -> ToyScheduler:   # building is not timed
        time.sleep(0.4)
        return ToyScheduler(config)
    built = run_workload(workload(req("a", 4, 4), **cfg), slow_to_build, checks_for("property"))
    assert built.violation is None and built.drained
    with pytest.raises(Violation) as caught:
        run_machine(toy("spin"), max_examples=300, shrink=False, out_dir=tmp_path)
    assert caught.value.prop == "hang"
    capsys.readouterr()
    found = tmp_path / "counterexample-hang.json"
    assert main(["replay", str(found), "--adapter", f"{TOY}:spinning", "--check", "property"]) == 1
    out = capsys.readouterr().out
    assert "REPRODUCED hang at step" in out and "did not return within 0.2 s" in out


def test_the_watchdog_stops_what_catches_exceptions_and_leaves_the_alarm_as_it_was() -> None:
    rang: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: rang.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 3.0)
        with pytest.raises(Overran), watchdog(0.05):
            while True:
                with contextlib.suppress(Exception):   # a system that swallows every exception
                    time.sleep(0.01)
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0 and not rang   # the earlier alarm is still set
        for _ in range(600):   # it rings, once (a minute's guard, not a bound: a busy machine is slow, not wrong)
            if rang:
                break
            time.sleep(0.1)
        assert rang == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_system_that_refuses_some_configs_is_fuzzed_on_the_others(tmp_path) -> None:
    """A factory may refuse a config (WorkloadError; here vLLM's rule, a token
    budget below the slots): the machine draws another and a guided round (of
    the model's windows, or of the corpus) goes on to its next workload; the
    campaign runs clean to its budget. Where the
    system refuses the unconstrained config of the output check (here a pool
    past 6 blocks), there is nothing to compare with: the run passes, with that
    check listed as not run (a campaign counts the runs each check did not run
    in, machine and directed ones alike)."""
    refused = []

    def like_vllm(cfg: Config) -> ToyScheduler:
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:
            refused.append(cfg)
            raise WorkloadError("config.max_num_batched_tokens: this system needs at least max_num_seqs")
        return ToyScheduler(cfg)
    result = run_campaign(CampaignSettings(
        "guarded", 600, 1, tmp_path, mode="random", factory=like_vllm, checks=CheckSet("property"), batch_examples=5,
        guidance="both", max_examples=40))
    assert result.violation is None and result.interrupted is None
    assert result.stats.examples > 20 and sum(result.stats.windows.values()) > 0   # directed rounds ran
    assert result.stats.guidance["corpus entries"] > 0                            # and corpus rounds
    assert refused
    assert result.stats.not_run[(DocumentedRules().label, NO_SEMANTICS)] == \
        result.stats.examples

    def small_pools(cfg: Config) -> ToyScheduler:
        if cfg.num_blocks > 6:
            refused.append(cfg)
            raise WorkloadError("config.num_blocks: this system takes pools of up to 6 blocks")
        return ToyScheduler(cfg)
    refused.clear()
    pinned = {k: v for k, v in PINNED.items() if k != "execution"}
    w = workload(req("a", 4, 2), req("b", 4, 2), num_blocks=4, block_size=2, max_num_seqs=2,
                 max_num_batched_tokens=8, prefill_chunk_size=4, **pinned)
    run = run_workload(w, small_pools, checks_for("property"))
    assert run.violation is None and run.drained
    assert [cfg.num_blocks for cfg in refused] == [7]   # the unconstrained pool: both lifetimes and a spare page
    assert run.driver.skipped["output-equivalence"] == ("the system refuses the unconstrained config: "
                                                        "config.num_blocks: this system takes pools of up to 6 blocks")


def test_the_kv_floor_counts_a_shared_full_page_once_by_its_content() -> None:
    """Pages under each running request's reach: a partial page is its own; with
    prefix caching a full page is one per content (prompt and tokens up to its
    end), so a request whose token completes another's prompt page shares it."""
    def running(rid: str, prompt: tuple[int, ...], reach: int, tokens: tuple[int, ...] = ()) -> RequestView:
        return RequestView(RequestSpec(rid, prompt, 4), RUNNING, list(tokens), [1] * len(tokens), reach=reach)

    views = [running("a", (1, 2, 3, 4, 5), 5),      # [1 2] [1 2 3 4] and a partial page
             running("b", (1, 2, 3, 9), 4),         # [1 2] shared, [1 2 3 9] its own
             running("c", (1, 2, 3), 4, (4,))]      # its token 4 completes the page [1 2 3 4]
    cached = Config(block_size=2, prefix_caching=True, kv_layout="shared")
    assert covered_blocks(views, cached) == 4
    assert covered_blocks(views, replace(cached, prefix_caching=False)) == 3 + 2 + 2
    assert covered_blocks(views, replace(cached, kv_layout="last_exited", num_loops=2)) == 4 * 2
    assert covered_blocks([running("d", (1, 2, 3), 0)], cached) == 0   # no work since its admission


def test_a_resumed_request_has_its_hit_pages_and_the_positions_its_snapshot_restored() -> None:
    """r2's first WCPB chunk is done and its first page published when r1 preempts
    it (snapshots on); it resumes with one hit page (3 positions) and one position
    restored past it, so its next prefill starts at 4, skipping nothing."""
    w = workload(req("r1", 1, 1, arrival=3, priority=2), req("r2", 11, 3, priority=3),
                 num_blocks=5, block_size=3, max_num_seqs=4, max_num_batched_tokens=7, prefill_chunk_size=4,
                 num_loops=3, kv_layout="shared", execution="refill", wcpb=True, prefix_caching=True,
                 allocation="upfront", snapshots=True, max_bypasses=2)
    run = run_workload(w, ModelSUT, checks_for("property"))
    assert run.violation is None and run.drained
    events = [e for step in run.driver.trace for e in step if e.rid == "r2"]
    resumed = events.index(Resume("r2", 1, 1))
    assert events[resumed + 1] == Prefill("r2", 4, 8, 1)


def test_a_wcpb_chunk_that_skips_a_depth_is_caught_without_a_reference(monkeypatch, tmp_path) -> None:
    """The engine, patched to run a WCPB chunk's depth 3 right after its depth 1,
    is caught in property mode by the order of depths its events report."""
    from hypothesis import strategies as st

    from loopcheck.engine.scheduler import Scheduler

    original = Scheduler.enqueue

    def enqueue(self, seq, kind, start, end, cost) -> None:
        original(self, seq, kind, start, end, cost)
        item = self.batch[-1]
        if kind == "prefill" and self.cfg.wcpb and item.last_depth == 2 < self.cfg.num_loops:
            item.first_depth = item.last_depth = 3

    monkeypatch.setattr(Scheduler, "enqueue", enqueue)
    cfg = Config(num_blocks=12, block_size=2, num_loops=3, kv_layout="shared", max_num_seqs=4,
                 max_num_batched_tokens=4, prefill_chunk_size=2, wcpb=True)
    with pytest.raises(Violation) as caught:
        run_machine(TorchSUT, st.just(cfg), max_examples=50, shrink=False, mode="property", out_dir=tmp_path)
    assert caught.value.prop == "work" and "depth 3, where 2 comes next" in str(caught.value)


def test_a_token_that_exits_before_min_loops_is_caught_without_a_reference(tmp_path) -> None:
    """An engine that ignores min_loops (built here with min_loops 1 for runs
    whose config says 2) lets its exit gate stop a token at depth 1; property
    mode catches the first such token."""
    from hypothesis import strategies as st

    def ignores_min_loops(cfg: Config) -> TorchSUT:
        return TorchSUT(replace(cfg, min_loops=1))

    cfg = Config(num_blocks=12, block_size=2, num_loops=3, min_loops=2, exit_threshold=0.0, kv_layout="shared",
                 max_num_seqs=4, max_num_batched_tokens=4, prefill_chunk_size=2)
    with pytest.raises(Violation) as caught:
        run_machine(ignores_min_loops, st.just(cfg), max_examples=50, shrink=False, mode="property",
                    out_dir=tmp_path)
    assert caught.value.prop == "work" and "outside min_loops..num_loops (2..3)" in str(caught.value)


def test_a_page_cached_for_work_a_preemption_took_back_is_found_when_cached() -> None:
    """The cached-page rule of prefix-hits, on a scheduler that reports its hash
    table: with pages hashed when their chunk is scheduled (hashsched's eager-hash),
    q0's third page is in the table after the step whose chunk q5's growth took
    back; the same scheduler without the bug runs the workload clean. A system
    that does not report its cache has the rule listed as not run."""
    from benchmarks.subjects.hashsched import PINNED as HASHSCHED_PINNED
    from benchmarks.subjects.hashsched import factory

    cfg = Config(**{**Config().to_json(), **HASHSCHED_PINNED, "num_blocks": 4, "block_size": 3, "max_num_seqs": 3,
                    "max_num_batched_tokens": 4, "prefill_chunk_size": 5, "priority_preemption": True,
                    "prefix_caching": True, "max_bypasses": 4})
    w = Workload(cfg, (RequestSpec("q0", (56, 6, 44, 51, 49, 56), 4, priority=2, stop_token=0),
                       RequestSpec("q5", (27, 28), 3, arrival=3, priority=1, stop_token=0)))
    v = run_workload(w, factory("eager-hash"), checks_for("property")).violation
    assert v is not None and v.prop == "prefix-hits" and v.step == 5
    assert "the prefix cache holds page 2 of tokens [56, 6, 44, 51, 49, 56, 46, 21, 49]" in v.message
    clean = run_workload(w, factory(), checks_for("property"))
    assert clean.violation is None and clean.drained
    model = run_workload(w, ModelSUT, checks_for("property"))
    assert "prefix-hits (cached pages)" in model.driver.skipped
