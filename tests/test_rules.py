"""The documented-rules check (checks/rules.py): quiet on the reference model and
the engine, and it finds policy bugs planted in the model itself (the system and
the reference at once, so lockstep cannot see them) and misreported internals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loopcheck.adapters.torch_sut import TorchSUT
from loopcheck.checks.base import Violation
from loopcheck.checks.rules import DocumentedRules, VictimOrders
from loopcheck.checks.suite import CheckSet
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.model.config import Config
from loopcheck.model.events import Event
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.sut.model_sut import ModelSUT
from loopcheck.sut.protocol import Internals


def contended(**overrides) -> Workload:
    """Three requests at three priorities on a pool that holds one at a time,
    the most urgent arriving last: preemptions, resumptions and bypasses."""
    cfg = Config(num_blocks=8, block_size=2, max_num_seqs=2, max_num_batched_tokens=8, prefill_chunk_size=4,
                 num_loops=1, min_loops=1, priority_preemption=True, max_bypasses=1, **overrides)
    reqs = (RequestSpec("low", tuple(range(9)), 4, arrival=0, priority=3),
            RequestSpec("mid", tuple(range(10, 19)), 4, arrival=1, priority=2),
            RequestSpec("high", tuple(range(20, 29)), 4, arrival=2, priority=1))
    return Workload(cfg, reqs)


@pytest.mark.parametrize("factory", [ModelSUT, TorchSUT])
@pytest.mark.parametrize("snapshots", [False, True])
def test_the_rules_hold_on_the_model_and_the_engine(factory, snapshots) -> None:
    w = contended(snapshots=snapshots)
    run = run_workload(w, factory, [DocumentedRules(), VictimOrders()])
    assert run.violation is None and run.drained
    assert run.driver.counters.preemptions > 0


class TwoVictims(ModelSUT):
    """Reports each preemption twice, before its requester's admission."""

    def step(self) -> list[Event]:
        return [x for e in super().step() for x in ([e, e] if e.kind == "preempt" else [e])]


class StaleSnapshots(ModelSUT):
    """Reports a snapshot for every request ever preempted, finished or not."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.ever: set[str] = set()

    def internals(self) -> Internals:
        now = super().internals()
        self.ever |= now.snapshots
        return replace(now, snapshots=frozenset(self.ever))


def test_the_victim_is_the_least_urgent(monkeypatch) -> None:
    """Two running requests could make room for an urgent arrival; the unguarded
    policy must preempt the less urgent one. A model planted to take the more
    urgent one (a policy bug lockstep cannot see) is caught."""
    w = contended(preemption_policy="unguarded").with_config(num_blocks=12)
    assert run_workload(w, ModelSUT, [DocumentedRules(), VictimOrders()]).violation is None
    _most_urgent_victim(monkeypatch)
    run = run_workload(w, ModelSUT, [DocumentedRules(), VictimOrders()])
    assert run.violation is not None and run.violation.prop == "victim-order"


def test_one_victim_per_turn() -> None:
    run = run_workload(contended(), TwoVictims, [DocumentedRules()])
    assert isinstance(run.violation, Violation) and run.violation.prop == "one-victim"


def test_a_snapshot_held_after_finish_is_seen() -> None:
    run = run_workload(contended(snapshots=True), StaleSnapshots, [DocumentedRules()])
    assert run.violation is not None and run.violation.prop == "snapshots"
    assert "held by" in run.violation.message


def _keep_guard(monkeypatch) -> None:
    from loopcheck.model import reference

    original = reference._Step.admit

    def admit(self, i, plan, fresh):
        kept = {g for g in self.guard if g[0] == i}
        original(self, i, plan, fresh)
        self.guard |= kept                    # the guard is not cleared on admission

    monkeypatch.setattr(reference._Step, "admit", admit)


def _keep_bypasses(monkeypatch) -> None:
    from loopcheck.model import reference

    original = reference._Step.admit

    def admit(self, i, plan, fresh):
        self.settle_bypasses()
        kept = self.reqs[i].bypasses
        original(self, i, plan, fresh)
        self.reqs[i] = replace(self.reqs[i], bypasses=kept)   # the bypass count is not reset

    monkeypatch.setattr(reference._Step, "admit", admit)


def _most_urgent_victim(monkeypatch) -> None:
    from loopcheck.model import reference

    original = reference._Step.victims
    monkeypatch.setattr(reference._Step, "victims", lambda self, eligible: original(self, eligible)[::-1])


@pytest.mark.parametrize("plant,prop,policy", [(_keep_guard, "futility-guard", "guarded"),
                                               (_keep_bypasses, "bypass-count", "guarded"),
                                               (_most_urgent_victim, "victim-order", "guarded")])
def test_a_policy_bug_planted_in_the_model_is_found_without_a_reference(monkeypatch, tmp_path, plant, prop,
                                                                         policy) -> None:
    plant(monkeypatch)
    result = run_campaign(CampaignSettings(
        policy, 600, 1, tmp_path, mode="random", factory=ModelSUT, checks=CheckSet("property"), max_examples=200,
        max_replays=30))
    assert result.violation is not None and result.violation.prop == prop
