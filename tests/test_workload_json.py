"""Workload files: round trip, and one clear error naming the field for bad input."""

from __future__ import annotations

import json

import pytest

from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import SCHEMA, load_workload, save_workload, workload_from_json
from tests.helpers import req, workload


def doc(**over):
    base = {"schema": SCHEMA, "config": {"num_blocks": 8, "block_size": 2},
            "requests": [{"id": "a", "prompt": [1, 2], "max_tokens": 2}]}
    base.update(over)
    return base


def test_round_trip(tmp_path) -> None:
    w = workload(req("a", 3, 2, priority=2, stop_token=4, abort_at=9), req("b", 1, 1),
                 num_blocks=8, kv_layout="shared")
    path = tmp_path / "w.json"
    save_workload(w, path)
    assert load_workload(path) == w
    assert json.loads(path.read_text())["schema"] == SCHEMA


@pytest.mark.parametrize("data, field", [
    (doc(schema="loopcheck/workload@0"), "schema"),
    (doc(config={"num_blocks": 0}), "config.num_blocks"),
    (doc(config={"block_size": -1}), "config.block_size"),
    (doc(config={"bogus": 1}), "config.bogus"),
    (doc(config={"execution": "sideways"}), "config.execution"),
    (doc(config={"num_loops": 2, "min_loops": 3}), "config.min_loops"),
    (doc(config={"num_blocks": 4, "watermark_blocks": 4}), "config.watermark_blocks"),
    (doc(config={"num_blocks": 3, "num_loops": 4}), "config.num_blocks"),
    (doc(requests=[{"id": "a", "prompt": [], "max_tokens": 1}]), "requests[0].prompt"),
    (doc(requests=[{"id": "a", "prompt": [99], "max_tokens": 1}]), "requests[0].prompt[0]"),
    (doc(requests=[{"id": "a", "prompt": [1], "max_tokens": -1}]), "requests[0].max_tokens"),
    (doc(requests=[{"id": "a", "prompt": [1], "max_tokens": 1, "colour": 1}]),
     "requests[0].colour"),
    (doc(requests=[{"id": "a", "prompt": [1], "max_tokens": 1},
                   {"id": "a", "prompt": [2], "max_tokens": 1}]), "requests[1].id"),
    (doc(requests={"a": 1}), "requests"),
    ([], "document"),
])
def test_bad_input_names_the_field(data, field) -> None:
    with pytest.raises(WorkloadError) as err:
        workload_from_json(data)
    assert str(err.value).startswith(field)


def test_unreadable_and_malformed_files(tmp_path) -> None:
    with pytest.raises(WorkloadError, match="no such file"):
        load_workload(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(WorkloadError, match="not valid JSON"):
        load_workload(bad)


def test_lookups_by_id_and_by_abort_step() -> None:
    """`by_id` finds each request (KeyError naming the id otherwise);
    `aborts_by_step` lists every abort under its step, and no other step."""
    w = workload(req("a", 2, 1), req("b", 2, 1, arrival=1, abort_at=3), req("c", 1, 1, abort_at=5),
                 req("d", 1, 1, abort_at=3))
    assert [w.by_id(r).rid for r in "dcba"] == list("dcba")
    with pytest.raises(KeyError, match="'x'"):
        w.by_id("x")
    assert w.aborts_by_step == {3: frozenset({"b", "d"}), 5: frozenset({"c"})}
