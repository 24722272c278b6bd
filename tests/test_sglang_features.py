"""SGLang's structured-output scheduling through the adapter
(adapters/sglang_sut.py, adapters/sglang_grammar.py): its grammar queue holds a
request until its grammar is compiled, leaves one never compiled waiting, and
ends one aborted while it waits; judged by the property checks.

Needs the SGLang extra (scripts/install-engine.sh sglang, which CI runs); without
it these tests are skipped with that reason, visibly."""

from __future__ import annotations

import importlib.util

import pytest

from loopcheck.checks.suite import CheckSet
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.strategies import Shape
from loopcheck.model.config import Config
from loopcheck.model.events import Admit
from loopcheck.model.workload import NEVER, RequestSpec, Workload

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                                reason="SGLang is not installed: run scripts/install-engine.sh sglang")


def test_the_grammar_queue_holds_each_request_until_its_grammar_is_compiled() -> None:
    from loopcheck.adapters.sglang_sut import PINNED, SglangSUT
    from loopcheck.sut.protocol import PLAIN_ENGINE

    cfg = Config(**{**Config().to_json(), **PLAIN_ENGINE, **PINNED, "num_blocks": 12, "max_num_seqs": 3,
                    "max_num_batched_tokens": 8})
    w = Workload(cfg, (RequestSpec("a", (1, 2, 3), 2), RequestSpec("b", (4, 5), 2, grammar_ready=3),
                       RequestSpec("c", (6, 7), 2, grammar_ready=NEVER),
                       RequestSpec("d", (8, 9), 2, arrival=1, grammar_ready=0),
                       RequestSpec("e", (8, 9, 9), 2, grammar_ready=NEVER, abort_at=2)))
    run = run_workload(w, SglangSUT, CheckSet("property").build())
    assert run.violation is None and run.drained and run.driver.never_ready() == {"c"}
    admitted = {e.rid: t for t, events in enumerate(run.driver.trace) for e in events if isinstance(e, Admit)}
    assert admitted == {"a": 0, "d": 1, "b": 3}
    assert [(e.kind, e.rid) for e in run.driver.trace[2] if e.rid == "e"] == [("abort", "e"), ("finish", "e")]


def test_sglang_claims_grammar_and_no_other_feature() -> None:
    from loopcheck.adapters.loader import capabilities_of, load_factory

    caps = capabilities_of(load_factory("sglang"))
    shape = Shape().for_system(caps)
    assert caps.features == ("grammar",) and shape.grammar == "on"
    assert (shape.lora, shape.kv_transfer, shape.spec) == ("off", "off", "off")
