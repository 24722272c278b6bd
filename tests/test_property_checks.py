"""Property mode on systems that do not share loopcheck's semantics: a small
third-party-style scheduler (tests/toy_scheduler.py) passes clean, and each bug
planted in it is caught by the property it breaks, with no reference model;
property mode on loopcheck's own engine still finds the unguarded livelock."""

from __future__ import annotations

from functools import partial

import pytest

from checks.base import Violation
from checks.suite import checks_for
from fuzz.pytest_plugin import run_machine
from sut.driver import run_workload
from sut.torch_sut import TorchSUT
from tests.engine_workloads import livelock_example
from tests.helpers import req, workload
from tests.toy_scheduler import PINNED, ToyScheduler


def toy(*bugs: str):
    return partial(ToyScheduler, bugs=frozenset(bugs))


def test_the_clean_toy_breaks_no_property(tmp_path) -> None:
    stats = run_machine(toy(), max_examples=300, out_dir=tmp_path)
    assert stats.examples >= 300 and stats.branches["preempt+restart"] > 0 and stats.branches["abort"] > 0


@pytest.mark.parametrize("bug,props", [("leak", {"kv-conservation"}), ("no-reject", {"never-fit-not-rejected"}),
                                       ("slot-cap", {"caps"}), ("budget", {"caps"}),
                                       # the crash may show first in the unconstrained rerun of the output check
                                       ("crash-on-abort", {"crash", "output-equivalence"}),
                                       ("no-priority", {"priority-inversion"}),
                                       ("batch-dependent-token", {"output-equivalence"}),
                                       # the extra token needs a block beyond the request's lifetime need:
                                       # either the count or the pointless preemption it causes shows first
                                       ("overshoot", {"lifecycle", "lone-preemption"}),
                                       ("ignore-stop", {"lifecycle"}), ("self-preempt", {"lone-preemption"})])
def test_each_planted_bug_is_caught_by_its_property(bug, props, tmp_path) -> None:
    with pytest.raises(Violation) as caught:
        run_machine(toy(bug), max_examples=1000, shrink=False, out_dir=tmp_path)
    assert caught.value.prop in props
    assert (tmp_path / f"counterexample-{caught.value.prop}.json").exists()


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
    assert main(["verify", "--adapter", f"{toy_file}:ToyScheduler", "--fuzz-seconds", "3", "--seed", "1"]) == 0
    assert "VERDICT: PASS: no property broke" in capsys.readouterr().out
    assert main(["verify", "--adapter", f"{toy_file}:leaky", "--fuzz-seconds", "20", "--seed", "1"]) == 1
    out = capsys.readouterr().out
    assert "kv-conservation" in out and "VERDICT: FAIL" in out


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
