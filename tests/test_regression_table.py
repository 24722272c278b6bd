"""The fix's regression table on examples/regression_table.json (docs/semantics.md,
"The regression table"), on the model and on the torch engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopcheck.adapters.simulate import simulate_engine, simulate_model
from loopcheck.model.simulate import model_steps
from loopcheck.model.workload import load_workload

TABLE = load_workload(Path(__file__).parent.parent / "examples" / "regression_table.json")


def figures(result) -> tuple[int, int, int, int, int]:
    finished = sum(1 for o in result.outputs.values() if o.finish_reason)
    c = result.counters
    return finished, c.steps, c.preemptions, c.resumptions, result.kv_blocks_held


@pytest.mark.parametrize("simulate", [simulate_model, simulate_engine])
def test_the_figures_on_both_engines(simulate) -> None:
    # unguarded: 3/10 after 500 steps, 465 preemptions / 463 resumptions, 40 blocks held
    assert figures(simulate(TABLE.with_config(preemption_policy="unguarded"), 500)) == (3, 500, 465, 463, 40)
    # guarded: 10/10 in 121 steps, 4 preemptions / 4 resumptions, nothing held
    assert figures(simulate(TABLE.with_config(preemption_policy="guarded"), 500)) == (10, 121, 4, 4, 0)


def test_guarded_outputs_equal_a_run_without_preemption() -> None:
    guarded = simulate_engine(TABLE.with_config(preemption_policy="guarded"), 500)
    plain = simulate_engine(TABLE.with_config(priority_preemption=False), 2000)
    assert plain.drained and guarded.outputs == plain.outputs


def test_with_resumptions_kept_out_of_the_watermark_no_livelock_step_ends_with_it_used() -> None:
    """With the default rule the same workload still livelocks unguarded, but past
    its start every step ends with at least the watermark free (never 40 held)."""
    assert not TABLE.config.resume_watermark
    kept = TABLE.with_config(preemption_policy="unguarded", resume_watermark=True)
    cfg = kept.config
    result = simulate_model(kept, 500)
    assert not result.drained and result.counters.preemptions > 400
    held = [after.blocks_held(cfg.num_blocks, cfg.planes) for _, _, after in model_steps(kept, 500)]
    assert max(held[100:]) <= cfg.num_blocks - cfg.watermark_blocks
