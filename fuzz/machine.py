"""The stateful machine: Hypothesis adds requests, aborts them and steps an
engine (through the adapter protocol) and the reference model in lockstep; the
checks live in fuzz/session.py.

After every rule: the engine's events equal the model's (the model's token
outcomes are fed from the engine), KV conservation holds on the engine's real
block pool and in the model, budgets hold. At teardown it drains and checks:
every request finishes (a repeating state is a livelock), nothing is held, steps
and preemptions stay within the proved bounds, and outputs equal a run of the
same workload without priority preemption.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from fuzz.adapter import TorchEngineAdapter
from fuzz.session import AdapterFactory, Session, Violation
from fuzz.strategies import VOCAB, request_bodies
from model.config import Config
from model.events import Event
from model.workload import RequestSpec, Workload, save_workload


@dataclass
class Stats:
    """What a campaign has covered so far (shared by every machine run)."""

    examples: int = 0
    steps: int = 0
    rules: Counter = field(default_factory=Counter)
    branches: Counter = field(default_factory=Counter)
    first_failure_at: float | None = None

    def note_events(self, events: list[Event]) -> None:
        """Scheduler branches, as far as events show them."""
        self.steps += 1
        for e in events:
            name = e.kind
            if e.kind in ("admit", "resume") and e.args[0] > 0:
                name += "+prefix-hit"
            elif e.kind == "resume" and e.args[1] > 0:
                name += "+snapshot-restore"
            elif e.kind == "preempt":
                name += "+self" if e.args[0] == e.rid else ("+snapshot" if e.args[1] else "+restart")
            elif e.kind == "finish":
                name += f"({e.args[0]})"
            self.branches[name] += 1


def write_counterexample(out: Path, workload: Workload, violation: Violation,
                         trace: list[list[Event]], name: str | None = None) -> Path:
    extra = {"property": violation.prop, "message": violation.message, "source": "loopcheck fuzz",
             "trace": [[e.to_json() for e in evs] for evs in trace]}
    if violation.cycle:
        extra["cycle"] = violation.cycle
    out.mkdir(parents=True, exist_ok=True)
    path = out / (name or f"counterexample-{violation.prop}.json")
    save_workload(Workload(workload.config, workload.requests, extra), path)
    return path


class LoopcheckMachine(RuleBasedStateMachine):
    """Bind with `machine_class`, which sets the class attributes below."""

    adapter_factory: AdapterFactory = TorchEngineAdapter
    out_dir: Path | None = None
    stats: Stats = Stats()
    max_prompt: int = 6
    max_tokens: int = 5
    clock_start: float = 0.0

    requests = Bundle("requests")

    def setup(self, config: Config, prefixes: tuple[tuple[int, ...], ...]) -> None:
        self.prefixes = prefixes
        self.session = Session(config, type(self).adapter_factory, type(self).stats.note_events)
        type(self).stats.examples += 1

    def guarded(self, action, *args) -> None:
        """Run a session action; on a violation write the counterexample (the final,
        shrunk failure overwrites earlier ones) and fail the test case."""
        try:
            action(*args)
        except Violation as v:
            cls = type(self)
            if cls.stats.first_failure_at is None:
                cls.stats.first_failure_at = time.monotonic() - cls.clock_start
            if cls.out_dir is not None and self.session.specs:
                write_counterexample(cls.out_dir, self.session.workload(), v, self.session.trace)
                (cls.out_dir / "last-failure.json").write_text(
                    json.dumps({"property": v.prop, "message": v.message}) + "\n")
            raise

    @rule(target=requests, data=st.data())
    def add(self, data: st.DataObject) -> str:
        cls = type(self)
        fields = data.draw(request_bodies(self.prefixes, cls.max_prompt, cls.max_tokens))
        spec = RequestSpec(rid=f"q{len(self.session.specs)}", **fields)
        self.guarded(self.session.add, spec)
        cls.stats.rules["add"] += 1
        return spec.rid

    @rule(rid=requests)
    def abort(self, rid: str) -> None:
        self.guarded(self.session.abort, rid)
        type(self).stats.rules["abort"] += 1

    @rule(n=st.integers(1, 4))
    def advance(self, n: int) -> None:
        for _ in range(n):
            self.guarded(self.session.step)
        type(self).stats.rules["step"] += 1

    @invariant()
    def kv_is_conserved(self) -> None:
        if hasattr(self, "session"):
            self.guarded(self.session.check_kv)

    def teardown(self) -> None:
        if hasattr(self, "session"):
            self.guarded(self.session.finish)


PREFIXES = st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=6).map(tuple),
                    min_size=1, max_size=2).map(tuple)


def machine_class(configs: st.SearchStrategy[Config], adapter: AdapterFactory = TorchEngineAdapter,
                  out_dir: Path | None = None, stats: Stats | None = None,
                  max_prompt: int = 6, max_tokens: int = 5) -> type[LoopcheckMachine]:
    """A machine class bound to a config strategy, an engine adapter, an output folder."""

    class BoundLoopcheckMachine(LoopcheckMachine):
        @initialize(config=configs, prefixes=PREFIXES)
        def start(self, config: Config, prefixes: tuple[tuple[int, ...], ...]) -> None:
            self.setup(config, prefixes)

    BoundLoopcheckMachine.adapter_factory = staticmethod(adapter)  # type: ignore[assignment]
    BoundLoopcheckMachine.out_dir = out_dir
    BoundLoopcheckMachine.stats = stats or Stats()
    BoundLoopcheckMachine.max_prompt = max_prompt
    BoundLoopcheckMachine.max_tokens = max_tokens
    BoundLoopcheckMachine.clock_start = time.monotonic()
    return BoundLoopcheckMachine
