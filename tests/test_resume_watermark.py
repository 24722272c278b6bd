"""The `resume_watermark` option (docs/semantics.md): with it off, a resumption may
use the watermark. Model, engine, proofs and explorer agree on both values."""

from __future__ import annotations

import pytest

from loopcheck.adapters.simulate import simulate_model
from loopcheck.adapters.torch_sut import TorchSUT
from loopcheck.checks.suite import checks_for
from loopcheck.driver.driver import run_workload
from loopcheck.explorer.explore import explore
from loopcheck.explorer.liveness import analyse
from loopcheck.model.bounds import preemption_bound
from loopcheck.proofs.binding import solved_states, step_disagreement
from tests.helpers import req, workload


def small(resume_watermark: bool, policy: str = "guarded"):
    """A less urgent request is preempted, then resumes while a third runs: whether
    it may use the 2-block watermark decides when."""
    return workload(req("r0", 5, 3, arrival=1, priority=1), req("r1", 5, 2, priority=2),
                    req("r2", 1, 2, arrival=2, priority=2), num_blocks=7, block_size=2, max_num_seqs=3,
                    max_num_batched_tokens=6, prefill_chunk_size=4, num_loops=1, min_loops=1, watermark_blocks=2,
                    kv_layout="shared", priority_preemption=True, preemption_policy=policy,
                    resume_watermark=resume_watermark)


def test_the_option_changes_the_schedule() -> None:
    on, off = simulate_model(small(True), 100, keep_trace=True), simulate_model(small(False), 100, keep_trace=True)
    assert on.drained and off.drained and on.trace != off.trace


@pytest.mark.parametrize("resume_watermark", [True, False])
@pytest.mark.parametrize("policy", ["guarded", "unguarded"])
def test_engine_and_model_agree_in_lockstep(resume_watermark, policy) -> None:
    run = run_workload(small(resume_watermark, policy), TorchSUT, checks_for("lockstep"))
    assert run.violation is None and run.drained


@pytest.mark.parametrize("resume_watermark", [True, False])
def test_the_explorer_finds_every_state_draining_under_guarded(resume_watermark) -> None:
    w = small(resume_watermark)
    ex = explore(w, spread=1)
    result = analyse(ex)
    assert ex.complete and not result.livelock and result.can_drain == ex.states
    assert result.worst_preemptions <= preemption_bound(w)


def test_the_step_encoding_is_bound_to_the_model_on_resumptions_into_the_watermark() -> None:
    """With the option off, z3 reaches a resumption that the watermark alone
    would have refused, and the binding compares it with the model; with it on,
    no such step exists."""
    solved_off = solved_states(small(False).config, 3)
    labels_on = {label for label, _, _ in solved_states(small(True).config, 3)}
    aimed = [(w, state) for label, w, state in solved_off if label == "resume into the watermark"]
    assert aimed and "resume into the watermark" not in labels_on
    assert all(step_disagreement(w, state) is None for _, w, state in solved_off)
