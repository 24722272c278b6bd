"""Deployment features in the workload vocabulary (model/workload.py `FEATURES`):
LoRA adapters and structured-output grammars, drawn only for a system that
claims them, refused for one that does not, and judged by their rules
(`lora-cap`, `grammar.*`): the toy scheduler claiming them passes clean, and
each bug planted in its feature paths is found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopcheck.checks.suite import CheckSet
from loopcheck.cli import main
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.strategies import Shape
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import NEVER, RequestSpec, Workload, load_workload, workload_from_json
from loopcheck.sut.protocol import Capabilities
from tests.toy_scheduler import PINNED, toy, toy_with_features

TOY = str(Path(__file__).parent / "toy_scheduler.py")
CFG = Config(**{**Config().to_json(), **PINNED, "num_blocks": 12, "max_num_seqs": 3, "max_num_batched_tokens": 8})


def test_feature_fields_round_trip_and_are_validated() -> None:
    spec = RequestSpec("a", (1, 2), 2, lora=3, grammar_ready=NEVER)
    data = {"schema": "loopcheck/workload@1", "config": CFG.to_json(), "requests": [spec.to_json()]}
    assert workload_from_json(json.loads(json.dumps(data))).requests == (spec,)
    assert spec.features == {"lora", "grammar"} and spec.ready_at() is None
    assert RequestSpec("b", (1,), 1, arrival=2, grammar_ready=3).ready_at() == 5
    for field, value in (("lora", -1), ("grammar_ready", -2)):
        bad = {**data, "requests": [{**spec.to_json(), field: value}]}
        with pytest.raises(WorkloadError, match=rf"requests\[0\]\.{field}: must be >="):
            workload_from_json(bad)


def test_a_kv_load_round_trips_and_is_validated() -> None:
    spec = RequestSpec("a", (1, 2), 2, kv_load_steps=2, kv_load_fails=True)
    data = {"schema": "loopcheck/workload@1", "config": CFG.to_json(), "requests": [spec.to_json()]}
    assert workload_from_json(json.loads(json.dumps(data))).requests == (spec,)
    assert spec.features == {"kv_transfer"} and RequestSpec("b", (1,), 1).to_json().keys().isdisjoint(
        {"kv_load_steps", "kv_load_fails"})
    for change, message in (({"kv_load_steps": 0}, r"kv_load_steps: must be >= 1"),
                            ({"kv_load_steps": 65}, r"kv_load_steps: must be <= 64"),
                            ({"kv_load_fails": 1}, r"kv_load_fails: must be true or false"),
                            ({"kv_load_steps": None}, r"kv_load_fails: needs kv_load_steps")):
        bad = {**data, "requests": [{**spec.to_json(), **change}]}
        with pytest.raises(WorkloadError, match=rf"requests\[0\]\.{message}"):
            workload_from_json(bad)


def test_a_scope_takes_kv_loads_and_a_system_without_the_feature_explores_none() -> None:
    from loopcheck.explorer.scope import FAIL, PRESETS, scope_from_json
    from loopcheck.explorer.scoped import resolve_shapes

    scope = PRESETS["kv"]
    assert scope.kv_loads == (None, 1, 2, FAIL)
    with pytest.raises(WorkloadError, match=r"scope.kv_loads\[0\]: must be an integer in \[1, 32\] or null or 'fail'"):
        scope_from_json({**scope.to_json(), "kv_loads": [0]}, "bad")
    cfg = scope.config_list(PINNED)[0]
    plain = resolve_shapes(scope, cfg, toy_with_features(), Capabilities(features=("grammar",)))
    loads = resolve_shapes(scope, cfg, toy_with_features(), Capabilities(features=("grammar", "kv_transfer")))
    assert all(s.kv_load_steps is None for s in plain) and len(loads) == 4 * len(plain)
    assert {(s.kv_load_steps, s.kv_load_fails) for s in loads} == {(None, False), (1, False), (2, False), (1, True)}


def test_features_are_drawn_only_for_a_system_that_claims_them() -> None:
    assert str(Shape().for_system(Capabilities())).endswith(
        "lora=off,grammar=off,kv_transfer=off,spec=off,pause=off,async_scheduling=off")
    assert str(Shape().for_system(Capabilities(features=("lora", "grammar")))).endswith(
        "lora=on,grammar=on,kv_transfer=off,spec=off,pause=off,async_scheduling=off")
    assert Capabilities().pinned["pause"] == "off" and "pause" not in Capabilities(features=("pause",)).pinned
    assert Capabilities().pinned["max_loras"] == 1 and "max_loras" not in Capabilities(features=("lora",)).pinned
    assert Capabilities().pinned["spec_tokens"] == 0 and "spec_tokens" not in Capabilities(features=("spec",)).pinned


def test_a_system_without_the_feature_refuses_the_workload(tmp_path, capsys) -> None:
    w = Workload(CFG, (RequestSpec("a", (1, 2), 2, lora=1),))
    with pytest.raises(WorkloadError, match="request 'a': uses lora, which the system does not run"):
        run_workload(w, toy(), CheckSet("property").build())
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"schema": "loopcheck/workload@1", "config": CFG.to_json(),
                                "requests": [r.to_json() for r in w.requests]}))
    assert main(["replay", str(path), "--adapter", f"{TOY}:ToyScheduler"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "uses lora, which the system does not run" in err[0]


def test_a_never_ready_request_waits_without_stalling_the_others(capsys) -> None:
    w = Workload(CFG, (RequestSpec("a", (1, 2, 3), 2), RequestSpec("b", (4, 5), 2, grammar_ready=NEVER),
                       RequestSpec("c", (6, 7), 2, grammar_ready=2)))
    run = run_workload(w, toy_with_features(), CheckSet("property").build())
    assert run.violation is None and run.drained and run.driver.never_ready() == {"b"}
    assert run.observation.outputs["c"].finish_reason == "length"


@pytest.mark.parametrize(("bug", "signature", "requests"), [
    ("grammar-early", "grammar.token-before-ready", (RequestSpec("a", (3, 4), 2, grammar_ready=3),)),
    ("lora-over", "lora-cap", (RequestSpec("a", (1, 2), 2, lora=1), RequestSpec("b", (3, 4), 2, lora=2)))])
def test_a_planted_feature_bug_breaks_its_rule(bug, signature, requests) -> None:
    w = Workload(CFG, requests)
    assert run_workload(w, toy_with_features(), CheckSet("property").build()).violation is None
    assert run_workload(w, toy_with_features(bug), CheckSet("property").build()).violation.signature == signature


def test_a_ready_request_left_behind_by_an_idle_system_breaks_ready_idle_before_the_stall() -> None:
    w = Workload(CFG, (RequestSpec("a", (1, 2), 2, grammar_ready=1),))
    violation = run_workload(w, toy_with_features("grammar-stuck"), CheckSet("property").build()).violation
    assert violation is not None and violation.signature == "grammar.ready-idle" and violation.step == 2


@pytest.mark.parametrize("bug", ["grammar-early", "grammar-stuck", "grammar-starves", "lora-over"])
def test_fuzz_finds_each_planted_feature_bug_and_the_clean_toy_passes(tmp_path, bug) -> None:
    checks = CheckSet("property")
    found = run_campaign(CampaignSettings("guarded", 300, 1, tmp_path / bug, "random", factory=toy_with_features(bug),
                                          checks=checks, max_examples=400)).findings
    assert found, f"{bug}: not found in 400 examples"
    clean = run_campaign(CampaignSettings("guarded", 300, 1, tmp_path / "clean", "random", factory=toy_with_features(),
                                          checks=checks, max_examples=200))
    assert not clean.findings, clean.findings[0].violation
    replayed = run_workload(load_workload(found[0].counterexample), toy_with_features(bug), checks.build())
    assert replayed.violation is not None and replayed.violation.signature == found[0].violation.signature


def test_a_never_ready_request_submitted_last_still_reaches_the_system() -> None:
    """A run drains past a request left waiting only after a quiet step since
    it was submitted: the system got it, and every end check judges it."""
    from loopcheck.driver.driver import Driver

    driver = Driver(toy_with_features(), CFG, CheckSet("property").build())
    driver.add(RequestSpec("a", (1, 2), 2))
    driver.step()
    driver.step()
    driver.step()
    driver.add(RequestSpec("b", (3, 4), 2, grammar_ready=NEVER))
    driver.finish()
    assert driver.t == 5 and driver.drained()   # (its arrival, then a quiet step)
    assert driver.obs.outputs["b"].finish_reason is None


def test_the_step_executor_finishes_jobs_at_their_step_and_drops_cancelled_ones() -> None:
    from loopcheck.adapters.step_executor import StepExecutor

    pool = StepExecutor()
    pool.label, pool.due = "b", 2
    later, cancelled = pool.submit(lambda: "ready"), pool.submit(lambda: "never run")
    pool.label, pool.due = "a", None
    never = pool.submit(lambda: "never due")
    assert cancelled.cancel()
    pool.run_due(1)
    assert not later.done() and not never.done() and pool.pending(1) == (("a", None), ("b", 1))
    pool.run_due(2)
    assert later.result() == "ready" and cancelled.cancelled() and not never.done() and len(pool.jobs) == 1
    assert pool.pending(2) == (("a", None),)


def test_speculative_decoding_round_trips_and_is_validated() -> None:
    spec = RequestSpec("a", (1, 2), 2, spec_accepts=(2, 0))
    cfg = Config(**{**CFG.to_json(), "spec_tokens": 2})
    data = {"schema": "loopcheck/workload@1", "config": cfg.to_json(), "requests": [spec.to_json()]}
    w = workload_from_json(json.loads(json.dumps(data)))
    assert w.requests == (spec,) and w.config.spec_tokens == 2 and spec.features == {"spec"}
    for bad, message in (({**data, "config": {**cfg.to_json(), "spec_tokens": 9}}, r"config.spec_tokens: must be in"),
                         ({**data, "requests": [{**spec.to_json(), "spec_accepts": [9]}]},
                          r"requests\[0\]\.spec_accepts\[0\]: must be <= 8")):
        with pytest.raises(WorkloadError, match=message):
            workload_from_json(bad)


def test_a_scope_takes_spec_accepts() -> None:
    from loopcheck.explorer.scope import PRESETS, scope_from_json

    data = {**PRESETS["tiny"].to_json(), "spec_accepts": [[], [1, 0]]}
    assert scope_from_json(data, "s").spec_accepts == ((), (1, 0))
    with pytest.raises(WorkloadError, match=r"scope.spec_accepts\[0\]: must be a list"):
        scope_from_json({**data, "spec_accepts": [1]}, "bad")


def test_pause_fields_are_validated_and_name_the_paused_steps(tmp_path, capsys) -> None:
    cfg = Config(pause="new", pause_at=2, pause_steps=3)
    assert [cfg.paused(t) for t in range(6)] == [None, None, "new", "new", "new", None] and cfg.pause_end == 5
    assert Config(pause_at=2, pause_steps=3).paused(2) is None and Config().pause_end == 0
    for change, message in (({"pause": "some"}, r"config\.pause: must be one of off, new, all"),
                            ({"pause_steps": 0}, r"config\.pause_steps: must be in \[1,"),
                            ({"pause_steps": 65}, r"config\.pause_steps: must be in \[1, 64\]"),
                            ({"pause_at": -1}, r"config\.pause_at: must be in \[0,")):
        with pytest.raises(WorkloadError, match=message):
            Config.from_json({**CFG.to_json(), **change})
    path = tmp_path / "w.json"   # a system that does not claim "pause": the field is pinned off, one line, exit 2
    path.write_text(json.dumps({"schema": "loopcheck/workload@1", "config": {**CFG.to_json(), "pause": "all"},
                                "requests": [RequestSpec("a", (1, 2), 2).to_json()]}))
    assert main(["replay", str(path), "--adapter", f"{TOY}:ToyScheduler"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pause" in err[0], err
