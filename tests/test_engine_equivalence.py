"""Batch invariance and output equivalence of the torch engine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loopcheck.adapters.simulate import simulate_engine
from loopcheck.model.workload import Workload
from tests.engine_workloads import busy


def alone(w: Workload, rid: str, batch_invariant: bool = True):
    spec = replace(w.by_id(rid), arrival=0)
    return simulate_engine(Workload(w.config, (spec,)), 500, batch_invariant=batch_invariant)


@pytest.mark.parametrize("cfg", [{}, {"snapshots": False}, {"kv_layout": "shared"},
                                 {"allocation": "incremental"}, {"execution": "refill"}])
def test_busy_run_is_bit_identical_to_each_request_alone(cfg) -> None:
    w = busy(**cfg)
    run = simulate_engine(w, 500, keep_trace=True)
    assert run.drained and run.kv_blocks_held == 0
    kinds = {e.kind for evs in run.trace for e in evs}
    assert "preempt" in kinds and "publish" in kinds
    assert any(e.kind in ("admit", "resume") and e.hit_pages > 0 for evs in run.trace for e in evs)
    for spec in w.requests:
        solo = alone(w, spec.rid)
        assert solo.outputs[spec.rid].to_json() == run.outputs[spec.rid].to_json(), spec.rid
        assert solo.fingerprints[spec.rid] == run.fingerprints[spec.rid], spec.rid


def test_control_without_padding_the_bits_differ() -> None:
    w = busy()
    run = simulate_engine(w, 500, batch_invariant=False)
    differ = [s.rid for s in w.requests
              if alone(w, s.rid, batch_invariant=False).fingerprints[s.rid] != run.fingerprints[s.rid]]
    assert differ, "unpadded linear should change some row's bits"


def test_exit_depths_vary() -> None:
    run = simulate_engine(busy(), 500)
    depths = {d for o in run.outputs.values() for d in o.exit_depths[1:]}
    assert len(depths) >= 3


def test_same_config_same_trace() -> None:
    a = simulate_engine(busy(), 500, keep_trace=True)
    b = simulate_engine(busy(), 500, keep_trace=True)
    assert a.trace == b.trace and a.fingerprints == b.fingerprints
