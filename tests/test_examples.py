"""The shipped livelock examples: unguarded livelocks, guarded drains."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopcheck.adapters.simulate import simulate_model
from loopcheck.model.workload import load_workload

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize("name", ["livelock.json", "livelock_min.json"])
def test_unguarded_livelocks_and_guarded_drains(name: str) -> None:
    w = load_workload(EXAMPLES / name)
    bad = simulate_model(w.with_config(preemption_policy="unguarded"), 500)
    assert not bad.drained and bad.counters.steps == 500
    assert bad.counters.preemptions >= 400 and bad.counters.futile_preemptions >= 400
    assert bad.kv_blocks_held > 0
    good = simulate_model(w.with_config(preemption_policy="guarded"), 500)
    assert good.drained and good.kv_blocks_held == 0
    assert good.counters.futile_preemptions == 0 and good.counters.preemptions >= 1
    ref = simulate_model(w.with_config(priority_preemption=False), 500)
    assert ref.drained
    assert {k: o.to_json() for k, o in good.outputs.items()} == {
        k: o.to_json() for k, o in ref.outputs.items()}


def test_without_wcpb_the_unguarded_policy_drains() -> None:
    w = load_workload(EXAMPLES / "livelock.json").with_config(wcpb=False)
    assert simulate_model(w, 500).drained
