"""Time-boxed fuzz campaigns: seeded batches of stateful runs against an example
database, a progress line about every two seconds, and on failure a shrunk, replayable
counterexample file."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.stateful import get_state_machine_test

from checks.base import Violation
from checks.suite import CheckSet
from fuzz.directed import Director
from fuzz.machine import (
    LAST_FAILURE,
    LOCKSTEP,
    Stats,
    counterexample_path,
    machine_class,
    record_failure,
    write_counterexample,
)
from fuzz.shrink import shrink
from fuzz.strategies import DEFAULT_SHAPE, Shape, configs
from model.config import Config, regression_config
from model.errors import StopRequest, WorkloadError, exit_code
from model.workload import Workload, load_workload, workload_from_json
from sut.driver import run_workload
from sut.loader import capabilities_of
from sut.protocol import SutFactory
from sut.torch_sut import TorchSUT

DEFAULT_REPLAYS = 400   # shrinking's work bound when the budget governs it

BRANCHES = ("admit", "admit+prefix-hit", "resume", "resume+prefix-hit", "resume+snapshot-restore",
            "preempt+snapshot", "preempt+restart", "preempt+self", "rewind", "publish", "reject", "abort",
            "finish(length)", "finish(stop)", "finish(abort)", "finish(rejected)", "preempt+futile",
            "preempt+again", "abort+preempted")


@dataclass
class CampaignResult:
    seed: int
    seconds: float
    stats: Stats
    violation: Violation | None = None
    counterexample: Path | None = None
    requests: int = 0
    time_to_failure: float | None = None
    notes: list[str] = field(default_factory=list)
    interrupted: int | None = None     # the exit code of the interrupt that stopped it
    shrink_replays: int = 0            # replays the shrink made (the same bound reproduces its file)


def open_database(spec: str | None, out: Path) -> ExampleDatabase:
    """A directory database under the output folder, or a shared Redis one."""
    if spec is None:
        return DirectoryBasedExampleDatabase(str(out / "db"))
    if spec.startswith("redis://"):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError as exc:
            raise WorkloadError("--db: a Redis database needs the 'redis' package (pip install redis)") from exc
        return RedisExampleDatabase(redis.Redis.from_url(spec))
    return DirectoryBasedExampleDatabase(spec)


def config_strategy(mode: str, policy: str, pinned: dict[str, Any]) -> tuple[st.SearchStrategy[Config], int, int]:
    """(configs, max prompt, max tokens) for a campaign mode, with the fields the
    system supports only at one value pinned."""
    if mode == "regression":
        return st.just(regression_config(**{"preemption_policy": policy, **pinned})), 12, 8
    return configs(**{"preemption_policy": policy, **pinned}), 6, 5


def progress_line(elapsed: float, stats: Stats) -> str:
    covered = [b for b in BRANCHES if stats.branches[b]]
    rules = " ".join(f"{k}={v}" for k, v in sorted(stats.rules.items()))
    return (f"[{elapsed:6.1f}s] examples {stats.examples}, steps {stats.steps}, rules {rules}, "
            f"scheduler branches {len(covered)}/{len(BRANCHES)}")


def run_campaign(policy: str, budget_seconds: float, seed_value: int, out: Path, mode: str = "regression",
                 db: str | None = None, factory: SutFactory = TorchSUT, checks: CheckSet = LOCKSTEP,
                 shape: Shape = DEFAULT_SHAPE, batch_examples: int = 20, max_replays: int | None = None,
                 progress: Callable[[str], None] | None = None, fixed: dict[str, Any] | None = None
                 ) -> CampaignResult:
    """Replay the directed failures the database kept, then run seeded batches
    (each followed by a directed round) until a property breaks or the budget is
    spent; then shrink the failure and write it. The budget covers both:
    shrinking stops at the budget or after DEFAULT_REPLAYS replays. With `max_replays`, shrinking makes
    exactly that many replays at most, whatever the time (so a file is reproduced
    byte for byte). `fixed` pins config fields beyond those the system pins.
    `checks`: the checks of each run (violations of the properties they ignore
    are counted, not reported)."""
    out.mkdir(parents=True, exist_ok=True)
    stats = Stats()
    caps = capabilities_of(factory)
    pinned = {**(fixed or {}), **caps.pinned}
    strategy, max_prompt, max_tokens = config_strategy(mode, policy, pinned)
    machine = machine_class(strategy, factory, checks, out, stats, max_prompt, max_tokens, shape)
    database = open_database(db, out)
    start = time.monotonic()
    result = CampaignResult(seed_value, 0.0, stats)
    stats.deadline = start + budget_seconds
    if progress:   # a line within TICK seconds, then about every TICK seconds
        stats.ticker = lambda: progress(progress_line(time.monotonic() - start, stats))
        stats.next_tick = start + Stats.TICK
    try:
        with StopRequest.deferred():   # a signal stops the run at the next driver action
            shape_run = shape if caps.abort else replace(shape, aborts="off")   # no aborts the system cannot do
            director = Director(directed_configs(mode, policy, pinned), max_prompt, seed_value, shape_run)
            saved = [(workload_from_json(json.loads(v)), Counter()) for v in sorted(database.fetch(DIRECTED_KEY))]

            def directed(runs: Iterable[tuple[Workload, Counter]]) -> None:
                run_directed(runs, factory, checks, out, stats, start, result, database)

            directed(saved)   # the directed failures of earlier campaigns first
            if result.violation is None:
                run_batches(machine, database, seed_value, budget_seconds, batch_examples, start, result,
                            lambda: directed(director.next_round(stats.deadline)))
    except KeyboardInterrupt as exc:
        result.interrupted = exit_code(exc)
    result.time_to_failure = stats.first_failure_at
    recorded = out / LAST_FAILURE
    if result.interrupted is not None and result.violation is None and recorded.exists():
        found = json.loads(recorded.read_text())     # interrupted after a failure: report it, unshrunk
        result.violation = Violation(found["property"], found["message"])
        result.counterexample = counterexample_path(out, found["property"])
    if result.violation is not None and result.interrupted is None:
        try:
            with StopRequest.deferred():
                deadline = None if max_replays is not None else start + budget_seconds
                finalise(result, out, factory, checks, max_replays or DEFAULT_REPLAYS, deadline, progress)
        except KeyboardInterrupt as exc:   # the unshrunk file the machine wrote stays
            result.interrupted = exit_code(exc)
            result.counterexample = counterexample_path(out, result.violation.prop)
            result.notes.append("shrinking was interrupted; the counterexample is not shrunk")
    result.seconds = time.monotonic() - start
    stats.ticker = None   # (the result may cross to another process: it keeps no hook)
    return result


def run_batches(machine: type, database: ExampleDatabase, seed_value: int, budget_seconds: float,
                batch_examples: int, start: float, result: CampaignResult,
                between: Callable[[], None] = lambda: None) -> None:
    """Seeded batches of the machine, each followed by `between` (a directed
    round), until a violation (kept in `result`) or the budget is spent."""
    batch = 0
    while time.monotonic() - start < budget_seconds:
        test = get_state_machine_test(machine, settings=settings(
            max_examples=batch_examples, deadline=None, database=database, stateful_step_count=20,
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
            suppress_health_check=list(HealthCheck),
            print_blob=False))
        seeded = seed(seed_value + batch)(test)
        # hypothesis.seed() switches the example database off; a campaign wants both
        # a reproducible seed and the database (reuse saved failures, save new ones).
        seeded._hypothesis_internal_use_settings = settings(seeded._hypothesis_internal_use_settings,
                                                            database=database)
        try:
            seeded()
            StopRequest.check()
        except Violation as v:
            result.violation = v
        except Exception as exc:  # noqa: BLE001 - Hypothesis may wrap or group failures
            found = [e for e in getattr(exc, "exceptions", [exc]) if isinstance(e, Violation)]
            if not found:
                raise
            result.violation = found[0]
        batch += 1
        if result.violation is not None:
            return
        between()
        if result.violation is not None:
            return


def directed_configs(mode: str, policy: str, pinned: dict[str, Any]) -> list[st.SearchStrategy[Config]]:
    """Config strategies for directed rounds, in turn: the campaign's own, and for
    random configs, ones with the switches that open rare windows on (priority
    preemption with prefix caching and upfront allocation, or with snapshots; a
    bypass limit of 1)."""
    own = config_strategy(mode, policy, pinned)[0]
    if mode == "regression":
        return [own]
    focus = [{"priority_preemption": True, "prefix_caching": True, "allocation": "upfront"},
             {"priority_preemption": True, "snapshots": True}, {"max_bypasses": 1}]
    return [own] + [config_strategy(mode, policy, {**f, **pinned})[0] for f in focus]


DIRECTED_KEY = b"loopcheck:directed-failures"   # failing directed workloads in the example database


def run_directed(runs: Iterable[tuple[Workload, Counter]], factory: SutFactory, checks: CheckSet, out: Path,
                 stats: Stats, start: float, result: CampaignResult, database: ExampleDatabase) -> None:
    """Run window-directed workloads, each with the windows it opens (a round's,
    or the failing ones the database kept), on the system, within the budget
    (stats.deadline), but those whose config the system refuses. Keep the first
    violation in `result`, recorded like the machine's, and save its workload in
    the database."""
    for w, windows in runs:
        StopRequest.check()
        if stats.deadline is not None and time.monotonic() >= stats.deadline:
            return
        stats.new_example()
        try:
            run = run_workload(w, factory, checks.build(), on_step=stats.note_step)
        except WorkloadError:
            continue   # the system refuses this config, as it may refuse the machine's draws: the next workload
        stats.examples += 1
        stats.windows.update(windows.keys())
        stats.note_run(run.driver)
        if run.violation is not None:
            record_failure(out, w, run.violation, run.driver.trace, f"loopcheck fuzz {checks}", stats,
                           start)
            database.save(DIRECTED_KEY, json.dumps(w.to_json(), sort_keys=True).encode())
            result.violation = run.violation
            return


def finalise(result: CampaignResult, out: Path, factory: SutFactory, checks: CheckSet, max_replays: int,
             deadline: float | None, progress: Callable[[str], None] | None) -> None:
    """Shrink the recorded failure and rewrite it with a fresh trace."""
    assert result.violation is not None
    recorded = load_workload(counterexample_path(out, result.violation.prop))
    if progress:
        progress(f"shrinking a {result.violation.prop} counterexample of {len(recorded.requests)} requests ...")
    try:
        shrunk = shrink(recorded, result.violation.prop, factory, checks.build, max_replays,
                        deadline, progress)
        small, run = shrunk.workload, shrunk.run
        assert run.violation is not None
        result.violation = run.violation
        result.shrink_replays = shrunk.replays
        if shrunk.cut:
            result.notes.append(f"shrinking stopped at the budget after {shrunk.replays} replays "
                                f"({len(small.requests)} requests)")
    except ValueError:
        result.notes.append("the recorded workload does not reproduce on replay; kept unshrunk")
        small, run = recorded, run_workload(recorded, factory, checks.build())
    result.counterexample = write_counterexample(out, small, result.violation, run.driver.trace,
                                                 f"loopcheck fuzz {checks}")
    result.requests = len(small.requests)


def main_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
