"""vLLM's speculative decoding through the adapter (adapters/vllm_drafts.py):
drafts proposed each step, verified in the batch within the token budget, the
rejected ones rolled back; the tokens are those of the run without drafts, and
the rules that read drafts (`spec-cap`, `token-cap`, `work.twice-in-step`)
find a system that breaks them.

Needs the vLLM extra (scripts/install-engine.sh vllm, which CI runs); without it
these tests are skipped with that reason, visibly."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from functools import partial

import pytest

from loopcheck.checks.suite import CheckSet
from loopcheck.driver.driver import run_workload
from loopcheck.model.events import Draft, Token
from loopcheck.model.workload import RequestSpec, Workload
from tests.vllm_workloads import vllm_workload as shared_workload

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM is not installed: run scripts/install-engine.sh vllm")


vllm_workload = partial(shared_workload, num_blocks=16, block_size=2, max_num_seqs=3, max_num_batched_tokens=8,
                        prefill_chunk_size=8, spec_tokens=2)   # (a call's fields override these)


def run(w: Workload, factory=None):
    from loopcheck.adapters.vllm_sut import VllmSUT

    return run_workload(w, factory or VllmSUT, CheckSet("property").build())


REQUESTS = (RequestSpec("a", (1, 2, 3), 7, spec_accepts=(2, 0, 1)), RequestSpec("b", (4, 5), 4),
            RequestSpec("c", (1, 2, 3, 4), 5, arrival=1, spec_accepts=(1,)))


def test_drafts_give_the_tokens_of_the_run_without_them_in_fewer_steps() -> None:
    drafted = run(vllm_workload(*REQUESTS))
    plain = run(vllm_workload(*(replace(r, spec_accepts=()) for r in REQUESTS), spec_tokens=0))
    assert drafted.violation is None and drafted.drained and plain.violation is None
    assert {k: o.token_ids for k, o in drafted.observation.outputs.items()} == {
        k: o.token_ids for k, o in plain.observation.outputs.items()}
    assert len(drafted.driver.trace) < len(plain.driver.trace)
    per_step = [[e for e in events if e.rid == "a"] for events in drafted.driver.trace]
    # a's second step verifies 2 drafts, both right: 3 tokens; its third, none right: 1 token
    assert [sum(isinstance(e, Token) for e in s) for s in per_step[:3]] == [1, 3, 1]
    assert all(e.count == 2 for s in per_step for e in s if isinstance(e, Draft))


def test_drafts_are_cut_to_the_token_budget() -> None:
    tight = run(vllm_workload(*REQUESTS, spec_tokens=3, max_num_batched_tokens=3))
    assert tight.violation is None and tight.drained
    assert any(isinstance(e, Draft) and e.count < 3 for events in tight.driver.trace for e in events)


def drafts_told(change):
    """The vLLM adapter whose events misreport each step's drafts by `change`."""
    from loopcheck.adapters.vllm_sut import VllmSUT

    class Misreported(VllmSUT):
        def step(self):
            return [d for e in super().step() for d in change(e)]
    return Misreported


@pytest.mark.parametrize(("change", "signature"), [
    (lambda e: [Draft(e.rid, e.count + 2)] if isinstance(e, Draft) else [e], "spec-cap"),
    (lambda e: [] if isinstance(e, Draft) else [e], "work.twice-in-step"),
])
def test_drafts_misreported_break_their_rule(change, signature) -> None:
    found = run(vllm_workload(*REQUESTS, max_num_batched_tokens=16), drafts_told(change))
    assert found.violation is not None and found.violation.signature == signature, found.violation


def test_drafts_past_the_budget_break_token_cap() -> None:
    found = run(vllm_workload(*REQUESTS, spec_tokens=3, max_num_batched_tokens=3),
                drafts_told(lambda e: [Draft(e.rid, 3)] if isinstance(e, Draft) else [e]))
    assert found.violation is not None and found.violation.signature == "token-cap", found.violation
