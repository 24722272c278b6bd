"""The z3 encodings agree with model/ on concrete states (proofs/binding.py),
and a rule changed in model/ alone is caught there.

Besides binding's own seeded states, sym_step is evaluated on every state of
Hypothesis workloads in its class, and the admission/preflight encodings on
every waiting request and victim of Hypothesis workloads with prefix caching."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopcheck.model.reference as ref
from loopcheck.fuzz.strategies import configs, workloads
from loopcheck.model.simulate import model_steps
from loopcheck.model.workload import Workload
from loopcheck.proofs import binding
from loopcheck.proofs.binding import (
    admission_run_disagreement,
    ordered,
    run_disagreement,
    solved_states,
    step_disagreement,
)
from loopcheck.proofs.bmc import SymConfig, sym_step_traced

SLOW = [HealthCheck.too_slow, HealthCheck.filter_too_much]


def test_step_encoding_agrees_with_the_model() -> None:
    """sym_step agrees with the model on every state of 60 Hypothesis workloads in
    its class; most of those runs take steps (a workload whose requests all
    arrive past the run compares only its first state)."""
    stepped = []

    @settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=SLOW)
    @given(workloads(configs(allocation="upfront", prefix_caching=False)))
    def agrees(w: Workload) -> None:
        tally = {"random-run states": 0}
        assert run_disagreement(ordered(w), tally) is None
        stepped.append(tally["random-run states"] > 1)

    agrees()
    assert len(stepped) == 60 and sum(stepped) >= 40, f"{sum(stepped)} of {len(stepped)} runs took a step"


def test_admission_encoding_agrees_with_the_model() -> None:
    """The admission, preflight and futility-guard encodings agree with the model
    on every waiting request and victim of 60 Hypothesis workloads with prefix
    caching, and of binding's workloads aimed at futile preemptions (which random
    runs seldom make); together they evaluate every rule the tally names."""
    tally = dict.fromkeys(binding.TALLY, 0)

    @settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=SLOW)
    @given(workloads(configs(allocation="upfront", prefix_caching=True)), st.integers(0, 30))
    def agrees(w: Workload, steps: int) -> None:
        assert admission_run_disagreement(ordered(w), tally, steps) is None

    agrees()
    for w in binding.prefix_workloads(random.Random(0), binding.binding_configs(), plain=0, aimed=4):
        assert admission_run_disagreement(w, tally) is None
    admission_rules = ("admission", "guarded preflight", "preflight rejections", "prefix hits in preflight",
                       "preflights decided by pending pages", "futile preemptions")
    assert all(tally[rule] for rule in admission_rules), tally


def test_solved_states_reach_every_target_and_agree() -> None:
    cfg = binding.binding_configs()[0]
    states = solved_states(cfg, 3)
    assert {label for label, _, _ in states} >= {"preemption", "abort", "stop token", "rejection", "watermark",
                                                 "prompt-only finish"}
    for _, w, state in states:
        assert step_disagreement(w, state) is None


def _guarded_like_unguarded(self, i, active):
    cands = self.victims(lambda s: s.priority > self.specs[i].priority)
    return cands[0] if cands else None


def test_a_guarded_policy_that_chooses_like_the_unguarded_one_is_caught(monkeypatch) -> None:
    monkeypatch.setattr(ref._Step, "choose_victim", _guarded_like_unguarded)
    found = [step_disagreement(w, s) for cfg in binding.binding_configs()[:2] for _, w, s in solved_states(cfg, 3)]
    assert any(f and f.startswith("encoding and model disagree at admission, preemption") for f in found)


def _preflight_without_pending_hits(original):
    return lambda self, i, v, others, active: original(self, i, v, frozenset(), active)


def _fits_without_watermark(original):
    return lambda self, i, plan, active: original(self, i, plan, False)


def _release_keeping_holders(original):
    def release(self, i):
        self.free += self.planes * sum(page is None for page in self.reqs[i].pages)
        self.reqs[i] = replace(self.reqs[i], pages=())
    return release


def _guard_never_recording(original):
    class Forgetful(set):
        def add(self, item):
            pass

    def schedule_waiting(self, i, active):
        self.guard = Forgetful(self.guard)
        original(self, i, active)
    return schedule_waiting


def _prompt_only_sampling_a_token(original):
    def execute(self):
        self.specs = tuple(replace(spec, max_tokens=max(spec.max_tokens, 1)) for spec in self.specs)
        original(self)
    return execute


def _publication_before_the_frontier(original):
    """Pages published once a WCPB chunk is scheduled, before its last depth."""
    def publish(self, i):
        r = self.reqs[i]
        self.reqs[i] = r.evolve(frontier=r.chunk_end)
        original(self, i)
        self.reqs[i] = self.reqs[i].evolve(frontier=r.frontier)
    return publish


def _hits_on_the_last_prompt_page(original):
    """A prompt cached whole is hit whole (nothing left to compute)."""
    def hit_pages(self, i, pending_from=frozenset()):
        hits = original(self, i, pending_from)
        whole = len(self.specs[i].prompt) // self.cfg.block_size
        if (len(self.specs[i].prompt) % self.cfg.block_size == 0 and hits == whole - 1 and whole > 0
                and self.prompt_hash(i, whole - 1) in self.cache):
            return whole
        return hits
    return hit_pages


def _victims_most_urgent_first(original):
    """Victims (of growth and of priority preemption) taken from the wrong end
    of the priority order."""
    def victims(self, eligible):
        return list(reversed(original(self, eligible)))
    return victims


def _growth_waiting_instead_of_preempting_itself(original):
    """A request that cannot grow stays running out of the batch."""
    def preempt(self, v, by):
        if v != by:
            original(self, v, by)
    return preempt


@pytest.mark.parametrize("method, mutate, rule", [
    ("fits", _fits_without_watermark, "admission, preemption and finishing"),
    ("execute", _prompt_only_sampling_a_token, "tokens and snapshots"),
])
def test_a_rule_changed_in_the_model_alone_is_caught_by_the_binding(monkeypatch, method, mutate, rule) -> None:
    monkeypatch.setattr(ref._Step, method, mutate(getattr(ref._Step, method)))
    result = binding.bind()
    assert not result.agrees and f"encoding and model disagree at {rule}" in result.summary()


@pytest.mark.parametrize("method, mutate, rule", [
    ("preflight", _preflight_without_pending_hits, "guarded preflight"),
    ("release", _release_keeping_holders, "block accounting"),
    ("schedule_waiting", _guard_never_recording, "futility guard"),
    ("publish", _publication_before_the_frontier, "allocation, growth and publication"),
    ("hit_pages", _hits_on_the_last_prompt_page, "admission, preemption and finishing"),
    ("victims", _victims_most_urgent_first, "admission, preemption and finishing"),
    ("preempt", _growth_waiting_instead_of_preempting_itself, "admission, preemption and finishing"),
])
def test_a_cache_or_growth_rule_changed_in_the_model_alone_is_caught(monkeypatch, method, mutate, rule) -> None:
    """Model-only mutations of the preflight, releases, the guard, publication,
    hits and growth, on the binding's runs with prefix caching and incremental
    allocation (the part of `bind` that reaches them): the admission encodings
    or the step encoding with its choices (no choice gives the model's step)
    disagree, naming the rule (the unchanged model agrees there: the prove
    test binds it)."""
    monkeypatch.setattr(ref._Step, method, mutate(getattr(ref._Step, method)))
    found = binding.choice_runs_disagreement(random.Random(0), binding.binding_configs(), 16,
                                             dict.fromkeys(binding.TALLY, 0))
    assert found is not None and found.startswith(f"encoding and model disagree at {rule}"), found


def test_an_encoding_that_drifts_is_caught(monkeypatch) -> None:
    from pathlib import Path

    from loopcheck.model.workload import load_workload

    w = ordered(load_workload(Path(__file__).parent.parent / "examples" / "livelock.json"))
    assert run_disagreement(w, {"random-run states": 0}) is None
    # drift: forget the "- 1" in a request's lifetime positions
    monkeypatch.setattr(binding, "needs_of", lambda p, m, cfg: tuple(
        cfg.planes * ((a + b + cfg.block_size - 1) / cfg.block_size) for a, b in zip(p, m, strict=True)))
    assert run_disagreement(w, {"random-run states": 0}) is not None


def _answer(fields: list, facts: list, want: list) -> z3.CheckSatResult:
    solver = z3.Solver()
    solver.add(*facts, *[a == b for (_, a), b in zip(fields, want, strict=True)])
    return solver.check()


def test_the_step_template_is_the_step_built_over_the_states_values() -> None:
    """The binding instantiates one symbolic step per config (`step_template`)
    by substitution instead of building the step over each state's values: on
    the states of random runs, where the step is deterministic every field is
    the same number either way, and where it leaves choices the binding's
    question (can the choices give this next state?) has the same answer
    either way, for the model's next state (yes) and for one with a block
    too many (no)."""
    rng = random.Random(1)
    choice_modes = [m for m in binding.MODES if m not in binding.DETERMINISTIC_MODES]
    answers = []
    for cfg in binding.binding_configs()[:4] + binding.binding_configs(choice_modes)[:6]:
        w = binding.random_workload(rng, cfg, 4, prefixes=True)
        for state, _, nxt in model_steps(w, 10):
            sw, ins = binding.concrete_sym(w, state)
            built, trace = sym_step_traced(binding.sym_of(state, cfg), state.step, sw, SymConfig.of(cfg), ins, "b_")
            fields, facts = binding.stepped(w, state)
            if not trace.facts:
                assert not facts
                assert [z3.simplify(a) for _, a in fields] == [z3.simplify(b) for b in built.fields()]
                continue
            want = binding.sym_of(nxt, cfg).fields()
            for target in (want, want[:-2] + [want[-2] + 1, want[-1]]):   # (the free count one more)
                answer = _answer(fields, facts, target)
                assert answer == _answer(built.named(), trace.facts, target)
                answers.append(answer)
    assert z3.sat in answers and z3.unsat in answers
