"""The fix's regression table on examples/regression_table.json (docs/semantics.md,
"The regression table"), on the model and on the torch engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.workload import load_workload
from sut.simulate import simulate_engine, simulate_model

TABLE = load_workload(Path(__file__).parent.parent / "examples" / "regression_table.json")


def figures(result) -> tuple[int, int, int, int, int]:
    finished = sum(1 for o in result.outputs.values() if o.finish_reason)
    c = result.counters
    return finished, c.steps, c.preemptions, c.resumptions, result.kv_blocks_held


@pytest.mark.parametrize("simulate", [simulate_model, simulate_engine])
def test_the_figures_on_both_engines(simulate) -> None:
    # unguarded: 3/10 after 500 steps, 465 preemptions, 464 resumptions (the fix reports 463), 40 blocks held
    assert figures(simulate(TABLE.with_config(preemption_policy="unguarded"), 500)) == (3, 500, 465, 464, 40)
    # guarded: 10/10 in 121 steps, 4 preemptions / 4 resumptions, nothing held
    assert figures(simulate(TABLE.with_config(preemption_policy="guarded"), 500)) == (10, 121, 4, 4, 0)


def test_guarded_outputs_equal_a_run_without_preemption() -> None:
    guarded = simulate_engine(TABLE.with_config(preemption_policy="guarded"), 500)
    plain = simulate_engine(TABLE.with_config(priority_preemption=False), 2000)
    assert plain.drained and guarded.outputs == plain.outputs


def test_the_livelock_lives_on_resumptions_into_the_watermark() -> None:
    """With resumptions kept out of the watermark (the default rule) the same
    workload drains even unguarded."""
    assert not TABLE.config.resume_watermark
    kept = simulate_model(TABLE.with_config(preemption_policy="unguarded", resume_watermark=True), 500)
    assert kept.drained and kept.kv_blocks_held == 0
