"""Time-boxed fuzz campaigns: seeded batches of stateful runs against an example
database, a progress line about every two seconds, and on failure a shrunk, replayable
counterexample file."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.stateful import get_state_machine_test

from loopcheck.adapters.loader import capabilities_of
from loopcheck.checks.base import Violation
from loopcheck.checks.counterexample import numbered_paths, recorded_violation, write_counterexample
from loopcheck.checks.suite import CheckSet
from loopcheck.driver.coverage import EdgeCoverage
from loopcheck.driver.determinism import runs_differ
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.corpus import Corpus, stored
from loopcheck.fuzz.directed import Director
from loopcheck.fuzz.hypothesis_constants import no_local_constants
from loopcheck.fuzz.machine import LAST_FAILURE, Stats, machine_class, record_failure
from loopcheck.fuzz.mutate import Limits
from loopcheck.fuzz.seeds import derived_seed
from loopcheck.fuzz.settings import CampaignSettings, MachineSettings
from loopcheck.fuzz.shrink import NotReproduced, shrink
from loopcheck.fuzz.strategies import ON, configs, request_sizes
from loopcheck.model.config import Config, regression_config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import Workload, load_workload
from loopcheck.runctl.stop import StopRequest, exit_code
from loopcheck.sut.code import code_paths
from loopcheck.sut.protocol import SutFactory

DEFAULT_REPLAYS = 400   # shrinking's work bound when the budget governs it
ARRIVALS_SECONDS = 5.0   # how often a campaign takes the corpus entries the run's other campaigns kept

BRANCHES = ("admit", "admit+prefix-hit", "resume", "resume+prefix-hit", "resume+snapshot-restore",
            "preempt+snapshot", "preempt+restart", "preempt+self", "rewind", "publish", "reject", "abort",
            "finish(length)", "finish(stop)", "finish(abort)", "finish(rejected)", "preempt+futile",
            "preempt+again", "abort+preempted")


@dataclass
class Finding:
    """One distinct bug a campaign found: the violation (after shrinking), its
    counterexample file, the requests in it, when it was found (seconds into the
    campaign), the checks it was found with (with keep-going, the earlier
    findings' signatures ignored: its file replays to it with them), notes on
    its shrinking, the replays the shrink made (the same bound reproduces
    its file), and whether it is flaky (two runs of its workload differ)."""

    violation: Violation
    counterexample: Path
    requests: int
    time_to_failure: float | None
    checks: CheckSet
    notes: list[str] = field(default_factory=list)
    shrink_replays: int = 0
    flaky: bool = False   # two runs of its workload differed: kept as found, not shrunk


@dataclass
class CampaignResult:
    """A campaign's outcome: its findings in the order found (at most one
    without keep-going), coverage, the exit code of an interrupt that
    stopped it, and why it was lost where it was (its coverage then unknown)."""

    seed: int
    seconds: float
    stats: Stats
    findings: list[Finding] = field(default_factory=list)
    interrupted: int | None = None
    lost: str | None = None   # why its worker or node died, for a campaign of a cluster run that did not end

    @property
    def violation(self) -> Violation | None:
        """The first finding's violation."""
        return self.findings[0].violation if self.findings else None

    @property
    def counterexample(self) -> Path | None:
        return self.findings[0].counterexample if self.findings else None

    @property
    def requests(self) -> int:
        return self.findings[0].requests if self.findings else 0

    @property
    def time_to_failure(self) -> float | None:
        return self.findings[0].time_to_failure if self.findings else None


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


def config_strategy(mode: str, policy: str, pinned: dict[str, Any], features: Collection[str] = ()
                    ) -> tuple[st.SearchStrategy[Config], dict[str, int]]:
    """(configs, request sizes) for a campaign mode, with the fields the system
    supports only at one value pinned (sizes scaled to a pinned page,
    `request_sizes`); the config fields of the deployment `features` drawn too
    (`configs`)."""
    if mode == "regression":
        return (st.just(regression_config(**{"preemption_policy": policy, **pinned})),
                request_sizes(pinned.get("block_size"), max_prompt=12, max_tokens=8))
    return (configs(features, **{"preemption_policy": policy, **pinned}),
            request_sizes(pinned.get("block_size")))


def progress_line(elapsed: float, stats: Stats) -> str:
    covered = [b for b in BRANCHES if stats.branches[b]]
    rules = " ".join(f"{k}={v}" for k, v in sorted(stats.rules.items()))
    return (f"[{elapsed:6.1f}s] examples {stats.examples}, steps {stats.steps}, rules {rules}, "
            f"scheduler branches {len(covered)}/{len(BRANCHES)}")


@dataclass
class Hunt:
    """What one campaign's search runs with: the system, its checks (growing with
    keep-going), the output folder, the shared coverage, the clock's start, the
    example database, and the violation found and not yet handled."""

    factory: SutFactory
    checks: CheckSet
    out: Path
    stats: Stats
    start: float
    database: ExampleDatabase
    found: Violation | None = None


def run_campaign(run: CampaignSettings, progress: Callable[[str], None] | None = None) -> CampaignResult:
    """Replay the directed failures and the corpus the database kept, then run
    seeded batches, each followed by the rounds of the `guidance` (GUIDANCE;
    default `default_guidance`; the corpus's until they ran as many mutants as
    a batch runs examples; and every ARRIVALS_SECONDS the corpus entries other
    campaigns sharing the database kept since), until a property breaks or
    the budget is spent; then shrink the failure and write it. With a `share`
    (campaigns on several machines), a failure another campaign found first
    is not shrunk again here (`Stats.found_elsewhere`). With `keep_going`, each finding
    is shrunk and written once and the search goes on with its signature (as
    found and as shrunk) ignored, until the budget is spent: every distinct bug,
    each in its own file. The budget covers all: shrinking stops at the budget
    or after DEFAULT_REPLAYS replays. With `max_replays`, shrinking makes exactly
    that many replays at most, whatever the time (so a file is reproduced byte
    for byte). `max_examples` ends the search after that many examples too (a
    work bound: with `max_replays`, a fresh output folder and no shared database,
    the same seed gives the same campaign on any machine under any load).
    `checks`: the checks of each run (violations they ignore are counted, not
    reported). `progress` gets a line about every 2 s."""
    policy, budget_seconds, seed_value, out, mode = run.policy, run.budget_seconds, run.seed, run.out, run.mode
    factory, batch_examples, max_replays, keep_going = run.factory, run.batch_examples, run.max_replays, run.keep_going
    out.mkdir(parents=True, exist_ok=True)
    (out / LAST_FAILURE).unlink(missing_ok=True)
    stats = Stats()
    caps = capabilities_of(factory)
    pinned = {**run.fixed, **caps.pinned}
    shape_run = run.shape.for_system(caps)   # nothing it cannot take
    # (the features with config fields)
    features = [name for name in ("lora", "spec", "pause", "async_scheduling") if getattr(shape_run, name) == ON]
    strategy, sizes = config_strategy(mode, policy, pinned, features)
    start = time.monotonic()
    hunt = Hunt(factory, run.checks, out, stats, start,
                open_database(run.db, out) if run.share is None else run.share.database())
    result = CampaignResult(seed_value, 0.0, stats)
    stats.deadline, stats.max_examples = start + budget_seconds, run.max_examples
    if progress:   # a line about every 2 s from the start (`Stats.clock`)
        stats.ticker = lambda: progress(progress_line(time.monotonic() - start, stats))
    guides = run.guidance or default_guidance(caps.semantics)
    director = Director(directed_configs(mode, policy, pinned, features), sizes["max_prompt"],
                        derived_seed(seed_value, "directed"), shape_run) if guides in ("model", "both") else None
    if guides in ("system", "both"):
        stats.coverage = EdgeCoverage(code_paths(caps.code)) if caps.code else None
        stats.corpus = Corpus(Limits(shape_run, pinned, caps.abort), derived_seed(seed_value, "corpus"),
                              hunt.database, CORPUS_KEY + system_name(factory).encode())

    arrivals = [start + ARRIVALS_SECONDS]   # when the corpus next takes the entries other campaigns kept

    def guided_rounds() -> None:
        if director is not None:
            run_recorded(director.next_round(stats.deadline), hunt)
        if stats.corpus is not None and hunt.found is None and time.monotonic() >= arrivals[0]:
            arrivals[0] = time.monotonic() + ARRIVALS_SECONDS   # what the run's other campaigns kept since
            run_recorded(((w, Counter()) for w in stats.corpus.arrived()), hunt)
        made = 0   # corpus rounds until they ran as many mutants as a batch runs examples
        while stats.corpus is not None and hunt.found is None and made < batch_examples and not stats.spent():
            mutants = stats.corpus.next_round()
            if not mutants:
                break
            made += len(mutants)
            run_recorded(((w, Counter()) for w in mutants), hunt)

    batches = iter(range(10**9))
    try:
        with StopRequest.deferred():   # a signal stops the run at the next driver action
            # the directed failures of earlier campaigns first, then the corpus they kept
            run_recorded(((w, Counter()) for w in stored(hunt.database, DIRECTED_KEY)), hunt)
            if stats.corpus is not None and hunt.found is None:
                run_recorded(((w, Counter()) for w in stats.corpus.saved()), hunt)
            while True:
                if hunt.found is None:
                    machine = machine_class(strategy, MachineSettings(factory, hunt.checks, out, shape=shape_run,
                                                                      **sizes), stats)
                    run_batches(machine, hunt, seed_value, batches, batch_examples, guided_rounds)
                if hunt.found is None:
                    break
                first = None if run.share is None else run.share.claim(hunt.found.signature, hunt.checks,
                                                                        out / LAST_FAILURE)
                shrunk_to: list[str] = []   # (the signature as shrunk, where this campaign shrank it)
                if first is None:
                    finding = finalise(hunt, result.findings, max_replays or DEFAULT_REPLAYS,
                                       None if max_replays is not None else start + budget_seconds, progress)
                    result.findings.append(finding)
                    shrunk_to.append(finding.violation.signature)
                    if run.share is not None:
                        run.share.publish(finding)
                else:   # another campaign found it first and shrinks it: not twice
                    stats.found_elsewhere[hunt.found.signature] += 1
                    (out / LAST_FAILURE).unlink(missing_ok=True)
                    if progress:
                        progress(f"{hunt.found.signature} again: {first} found it first and shrinks it")
                if not keep_going or stats.spent():
                    break
                hunt.checks = hunt.checks.ignoring(hunt.found.signature, *shrunk_to)
                hunt.found, stats.failure_at = None, None
    except KeyboardInterrupt as exc:
        result.interrupted = exit_code(exc)
        if hunt.found is not None and (out / LAST_FAILURE).exists():   # found, not yet written (finalise)
            result.findings.append(kept_unshrunk(hunt, result.findings, "interrupted: the counterexample is not "
                                                                        "shrunk"))
    result.seconds = time.monotonic() - start
    if run.share is not None:
        stats.shared = Counter(run.share.calls)
    if stats.corpus is not None:
        stats.edges = frozenset(f[1] for f in stats.corpus.counts if f[0] == "edge")
        stats.guidance = {"corpus entries": len(stats.corpus.entries), "features": len(stats.corpus.counts),
                          "code edges": len(stats.edges)}
    # (the result may cross to another process: it keeps no hook, no code objects, no database)
    stats.ticker, stats.coverage, stats.corpus, stats.separated = None, None, None, {}
    return result


def kept_unshrunk(hunt: Hunt, earlier: list[Finding], why: str) -> Finding:
    """The finding being handled, its file as found (not shrunk, for `why`)."""
    assert hunt.found is not None
    return unshrunk_finding(hunt.out, earlier, hunt.checks, hunt.stats.failure_at, why)


def unshrunk_finding(out: Path, earlier: list[Finding], checks: CheckSet, failure_at: float | None,
                     why: str) -> Finding:
    """The failure found in `out` with `checks` (its file as found, LAST_FAILURE),
    moved to its numbered file after those `earlier` and kept as it is (for `why`)."""
    found = load_workload(out / LAST_FAILURE)
    violation = recorded_violation(found)
    path = numbered_path(out, violation.prop, earlier)
    (out / LAST_FAILURE).replace(path)
    return Finding(violation, path, len(found.requests), failure_at, checks, [why])


def numbered_path(out: Path, prop: str, earlier: list[Finding]) -> Path:
    """The file of a new finding of `prop`, after those `earlier`."""
    return numbered_paths(out, [f.violation.prop for f in earlier] + [prop])[-1]


def run_batches(machine: type, hunt: Hunt, seed_value: int, batches: Iterator[int], batch_examples: int,
                between: Callable[[], None] = lambda: None) -> None:
    """Seeded batches of the machine (numbered by `batches`, each with its own
    derived seed), each followed by `between` (the guided rounds), until a
    violation (kept in `hunt.found`) or the budget is spent."""
    while not hunt.stats.spent():
        test = get_state_machine_test(machine, settings=settings(
            max_examples=batch_examples, deadline=None, database=hunt.database, stateful_step_count=20,
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
            suppress_health_check=list(HealthCheck),
            print_blob=False))
        seeded = seed(derived_seed(seed_value, "batch", next(batches)))(test)
        # hypothesis.seed() switches the example database off; a campaign wants both
        # a reproducible seed and the database (reuse saved failures, save new ones).
        seeded._hypothesis_internal_use_settings = settings(seeded._hypothesis_internal_use_settings,
                                                            database=hunt.database)
        try:
            with no_local_constants():
                seeded()
            StopRequest.check()
        except Violation as v:
            hunt.found = v
        except Exception as exc:  # noqa: BLE001 - Hypothesis may wrap or group failures
            found = [e for e in getattr(exc, "exceptions", [exc]) if isinstance(e, Violation)]
            if not found:
                raise
            hunt.found = found[0]
        if hunt.found is not None:
            return
        between()
        if hunt.found is not None:
            return


def directed_configs(mode: str, policy: str, pinned: dict[str, Any], features: Collection[str] = ()
                     ) -> list[st.SearchStrategy[Config]]:
    """Config strategies for directed rounds, in turn: the campaign's own, and for
    random configs, ones with the switches that open rare windows on (priority
    preemption with prefix caching and upfront allocation, or with snapshots; a
    bypass limit of 1); the config fields of the deployment `features` drawn too."""
    own = config_strategy(mode, policy, pinned, features)[0]
    if mode == "regression":
        return [own]
    focus = [{"priority_preemption": True, "prefix_caching": True, "allocation": "upfront"},
             {"priority_preemption": True, "snapshots": True}, {"max_bypasses": 1}]
    return [own] + [config_strategy(mode, policy, {**f, **pinned}, features)[0] for f in focus]


DIRECTED_KEY = b"loopcheck:directed-failures"   # failing guided workloads in the example database
CORPUS_KEY = b"loopcheck:corpus:"               # + the system's name: its corpus in the example database
GUIDANCE = ("model", "system", "both")


def default_guidance(semantics: str | None) -> str:
    """Both kinds for a system with loopcheck's semantics (the reference model can
    aim at its rare windows), the system's own for any other."""
    return "both" if semantics == "loopcheck" else "system"


def system_name(factory: SutFactory) -> str:
    """The factory as MODULE:NAME (the key of the system's corpus)."""
    return f"{getattr(factory, '__module__', '')}:{getattr(factory, '__qualname__', type(factory).__name__)}"


def run_recorded(runs: Iterable[tuple[Workload, Counter]], hunt: Hunt) -> None:
    """Run recorded workloads (a guided round's, or those the database kept),
    each with the rare windows it opens (directed rounds; empty for others), on
    the system, within the budget (`Stats.spent`), but those whose config the
    system refuses. Keep the first violation in `hunt.found`, recorded like the
    machine's, and save its workload in the database; a finding that ended a
    run only after an ignored one counts where a request fewer shows it alone
    (`Stats.separate`)."""
    stats = hunt.stats
    for w, windows in runs:
        StopRequest.check()
        if stats.spent():
            return
        stats.new_example()
        try:
            run = run_workload(w, hunt.factory, hunt.checks.build(), on_step=stats.note_step, coverage=stats.coverage)
        except WorkloadError:
            continue   # the system refuses this config, as it may refuse the machine's draws: the next workload
        stats.examples += 1
        stats.windows.update(windows.keys())
        stats.note_run(run.driver)
        alone = stats.separate(run.driver, hunt.factory, hunt.checks.build)
        if alone is not None:   # a finding of its own, shown by a request fewer
            w, run = alone.driver.workload(), alone
        if run.violation is not None:
            record_failure(hunt.out, w, run.violation, run.driver.trace, f"loopcheck fuzz {hunt.checks}", stats,
                           hunt.start)
            hunt.database.save(DIRECTED_KEY, json.dumps(w.to_json(), sort_keys=True).encode())
            hunt.found = run.violation
            return


def finalise(hunt: Hunt, earlier: list[Finding], max_replays: int, deadline: float | None,
             progress: Callable[[str], None] | None) -> Finding:
    """Shrink the recorded failure (keeping its signature) and write it, with a
    fresh trace, to its own file; a failure whose workload runs differently
    twice is flaky: kept as found, not shrunk (shrinking would chase noise)."""
    assert hunt.found is not None
    recorded = load_workload(hunt.out / LAST_FAILURE)
    _, differs = runs_differ(recorded, hunt.factory, hunt.checks.build)
    if differs is not None:
        flaky = kept_unshrunk(hunt, earlier, f"FLAKY: two runs of it differ from step {differs} (the system is not "
                                             "deterministic); kept as found, not shrunk")
        return replace(flaky, flaky=True)
    if progress:
        progress(f"shrinking a {hunt.found.prop} counterexample of {len(recorded.requests)} requests ...")
    try:
        shrunk = shrink(recorded, hunt.found.signature, hunt.factory, hunt.checks.build, max_replays, deadline,
                        progress)
    except NotReproduced:
        return kept_unshrunk(hunt, earlier, "the recorded workload does not reproduce on replay; kept unshrunk")
    small, violation = shrunk.workload, shrunk.run.violation
    assert violation is not None
    notes = [f"shrinking stopped at the budget after {shrunk.replays} replays ({len(small.requests)} requests)"
             ] if shrunk.cut else []
    path = write_counterexample(numbered_path(hunt.out, violation.prop, earlier), small, violation,
                                shrunk.run.driver.trace, f"loopcheck fuzz {hunt.checks}")
    (hunt.out / LAST_FAILURE).unlink(missing_ok=True)
    return Finding(violation, path, len(small.requests), hunt.stats.failure_at, hunt.checks, notes,
                   shrunk.replays)


def main_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
