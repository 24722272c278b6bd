"""The regression on the engine: unguarded livelocks, guarded drains with the
no-preemption outputs."""

from __future__ import annotations

from loopcheck.adapters.simulate import simulate_engine
from tests.engine_workloads import livelock_example


def test_unguarded_livelocks_on_the_engine() -> None:
    run = simulate_engine(livelock_example().with_config(preemption_policy="unguarded"), 500)
    assert not run.drained and run.counters.steps == 500
    assert run.counters.preemptions >= 400 and run.counters.resumptions >= 400
    assert run.kv_blocks_held > 0 and run.finished < len(run.outputs)


def test_guarded_drains_with_the_outputs_of_a_run_without_preemption() -> None:
    w = livelock_example().with_config(preemption_policy="guarded")
    run = simulate_engine(w, 500)
    ref = simulate_engine(w.with_config(priority_preemption=False), 500)
    assert run.drained and run.kv_blocks_held == 0 and run.counters.preemptions >= 1
    assert ref.counters.preemptions == 0
    assert {r: o.to_json() for r, o in run.outputs.items()} == {
        r: o.to_json() for r, o in ref.outputs.items()}
    assert run.fingerprints == ref.fingerprints
