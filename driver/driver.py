"""The one driver loop: steps a system under test through submissions, validates
what it returns against the protocol, records the trace and feeds every check.

Simulate, replay, the fuzzer, the shrinker and the pytest plugin all run systems
through `Driver` (incrementally) or `run_workload` (a recorded workload).
"""

from __future__ import annotations

import hashlib
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from loopcheck.checks.base import DRIVER_PROPERTIES, Check, Reference, Violation, ignored, matches
from loopcheck.driver.coverage import EdgeCoverage
from loopcheck.model.bounds import work_units
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Event, GenericEventError, Load
from loopcheck.model.simulate import Counters
from loopcheck.model.workload import InputSchedule, RequestSpec, Workload
from loopcheck.runctl.stop import Deadline, OutOfTime
from loopcheck.sut.code import Frame, code_paths, innermost, place, site
from loopcheck.sut.protocol import (
    Capabilities,
    Internals,
    Observation,
    ProtocolError,
    Refused,
    SutFactory,
    SystemUnderTest,
    check_events,
    check_internals,
    check_observation,
    check_sut,
)
from loopcheck.sut.view import TraceView

OnStep = Callable[[list[Event], Observation], None]
T = TypeVar("T")
CALL_TIMEOUT = 10.0   # seconds a call into the SUT may run before it is a hang
REFERENCE_RUNS_KEPT = 2048   # unconstrained runs remembered per process (an exploration ends many runs alike)
_reference_runs: dict[tuple, Reference] = {}   # (oldest first)


class RunEnded(Exception):
    """The run met a finding that is not reported: the system crashed, hung or did
    not drain in a way the run's checks ignore (`matches` its signature), or any
    property broke after an ignored finding earlier in the run (a consequence of
    a known bug is not a new one; a campaign tries such a run again without each
    request, `fuzz/shrink.py`'s `separated`). Nothing more is judged in this run.
    `Driver.ended_by` holds the finding."""


class Overran(BaseException):
    """Raised by `watchdog` inside a call that ran too long (not an Exception, so
    that a system's own `except Exception` does not swallow it)."""


@contextmanager
def watchdog(seconds: float | None) -> Iterator[None]:
    """Raise Overran in the block once it has run `seconds` (by SIGALRM, between
    two Python bytecodes: code stuck inside one C call is not reached). Only on
    the main thread of a platform with SIGALRM; elsewhere, or with None, the
    block runs unwatched. Whatever handler and timer were set before are set
    again after (the timer less the time the block ran)."""
    if (seconds is None or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return

    def overran(signum: int, frame: object) -> None:
        raise Overran
    handler = signal.signal(signal.SIGALRM, overran)
    earlier, start = signal.setitimer(signal.ITIMER_REAL, seconds), time.monotonic()
    try:
        yield
    finally:
        if earlier[0] > 0:   # an outer block's timer: what is left of it (at once, if nothing is)
            earlier = (max(earlier[0] - (time.monotonic() - start), 1e-6), earlier[1])
        signal.setitimer(signal.ITIMER_REAL, *earlier)
        signal.signal(signal.SIGALRM, handler)


def _timer(deadline: Deadline | None, seconds: float | None) -> tuple[float | None, bool]:
    """What `watchdog` times for a call that may run `seconds` (None: any time)
    within `deadline`: those seconds, or what is left of the deadline where
    that is sooner; and whether it is the deadline's. OutOfTime if the deadline
    has passed already."""
    left = deadline.left() if deadline is not None else None
    if left is not None and left <= 0:
        raise OutOfTime
    if left is not None and (seconds is None or left < seconds):
        return left, True
    return seconds, False


def within(deadline: Deadline | None, fn: Callable[[], T]) -> T:
    """fn(), cut short once `deadline` passes (OutOfTime; see `watchdog` for
    what can be cut): for work outside a driver's calls, such as building a
    system to read its capabilities."""
    seconds, _ = _timer(deadline, None)
    try:
        with watchdog(seconds):
            return fn()
    except Overran:   # (only the deadline's timer runs here)
        raise OutOfTime from None


def _stopped_at(exc: BaseException, own: tuple[str, ...]) -> tuple[Frame | None, str]:
    """Where `exc` stopped the system: of the frames it passed through outside this
    module, the innermost in the system's own code (`code.innermost`), and " at
    FILE:LINE" for a message ("" for none)."""
    frames = [(frame.f_code.co_filename, line, frame.f_code.co_qualname)
              for frame, line in traceback.walk_tb(exc.__traceback__) if frame.f_code.co_filename != __file__]
    found = innermost(frames, own)
    return found, f" at {site(found[0], found[1])}" if found else ""


def message_shape(text: str) -> str:
    """A short hash of the message with its numbers (and addresses) taken out:
    two crashes of one type in one function with messages of other shapes stay
    apart, the same crash with other numbers does not."""
    shape = re.sub(r"\d+", "#", re.sub(r"0x[0-9a-fA-F]+", "#", text))
    return hashlib.sha256(shape.encode()).hexdigest()[:6]


def crash(verb: str, exc: BaseException, own: tuple[str, ...] = ()) -> Violation:
    """An exception raised inside the SUT, as a violation named by where it was
    raised (the function of the innermost frame in the system's own code, the
    paths `own`; see `code.innermost`), its type and its message's shape
    (`message_shape`): FILE:FUNCTION:TYPE:SHAPE."""
    found, at = _stopped_at(exc, own)
    kind = f"{type(exc).__name__}:{message_shape(str(exc))}"
    where = f"{place(found[0], found[2])}:{kind}" if found else kind
    return Violation("crash", f"{type(exc).__name__}: {exc} (in {verb}(){at})", where=where)


def hang(verb: str, stopped: Overran, own: tuple[str, ...] = ()) -> Violation:
    """A call into the SUT that did not return within CALL_TIMEOUT, named by the
    function it was stopped in (FILE:FUNCTION)."""
    found, at = _stopped_at(stopped, own)
    return Violation("hang", f"{verb}() did not return within {CALL_TIMEOUT:g} s (stopped{at})",
                     where=place(found[0], found[2]) if found else verb)


def check_pinned(pinned: dict[str, Any], cfg: Config) -> None:
    """Refuse a config that contradicts what the SUT supports (bad input, exit 2)."""
    for name, value in pinned.items():
        if getattr(cfg, name) != value:
            raise WorkloadError(f"config.{name}: this system supports only {name}={value!r}, "
                                f"got {getattr(cfg, name)!r}")


class Driver:
    """One SUT, its trace and its checks.

    `add` and `abort` take effect at the start of the next `step` (so a request added
    at step t has arrival t). The first violation any check raises is kept in
    `failure` and raised again by any later call. A crash, hang or liveness
    finding that the checks ignore (`Check.ignore` names its signature), and
    any violation after an ignored one in the same run, end the run instead: it
    is kept in `ended_by`, and this call and every later one raise RunEnded. A
    ProtocolError (the SUT broke the protocol) and WorkloadError (bad input)
    propagate as they are.
    """

    def __init__(self, factory: SutFactory, cfg: Config, checks: Sequence[Check] = (),
                 on_step: OnStep | None = None, coverage: EdgeCoverage | None = None,
                 past_repeats: bool = False, deadline: Deadline | None = None) -> None:
        self.cfg = cfg
        self.deadline = deadline   # the run's wall-clock bound: checked before each step and cuts a call short
        self.factory = factory
        self.t = 0
        self.specs: list[RequestSpec] = []
        self.trace: list[list[Event]] = []
        self.counters = Counters()
        self.view = TraceView(cfg.block_size, keep_pages=cfg.prefix_caching and bool(checks),   # (for prefix-hits)
                              load_known=cfg.load_known)
        self.on_step = on_step
        self.failure: Violation | None = None
        self.ended_by: Violation | None = None
        self.ignore = frozenset().union(*(c.ignore for c in checks))
        self.own: tuple[str, ...] = ()   # the paths of the system's own code (capabilities.code)
        self.coverage = coverage         # counts the system's code edges inside its verbs, from zero
        if coverage is not None:
            coverage.reset()
        self.last_input = 0          # the step of the latest add or abort
        self.inputs_until = cfg.pause_end - 1   # inputs are scheduled up to this step (recorded workloads; the
        #                                         operator's resume after a pause is one: `Config.pause_end`)
        self.checks: list[Check] = []
        self.skipped: dict[str, str] = {}
        self.refused: dict[str, str] = {}   # requests the system refused at `add` (`Refused`) -> why
        self.obs = Observation()
        # per step, for each page the system's prefix cache registered in it that no request had computed by its
        # end (`Observation.registered_pages`), whether the cache still held it after the step (in runs with checks)
        self.uncomputed_registrations: list[tuple[bool, ...]] = []
        self.past_repeats = past_repeats   # run on past an ignored finding whose state repeats (`run_to_drain`)
        self.chose_stops = False   # `stop_with` was called: `workload` scripts the tokens given
        self._index: dict[str, int] = {}   # request id -> position in specs
        self.sut: SystemUnderTest
        self.out_of_time = False   # the deadline passed while the system was being built: every call raises OutOfTime
        try:
            # (no hang: building a system may import a whole engine, many seconds the first time)
            self.sut = check_sut(self._call("construct", lambda: factory(cfg), watched=False))
        except (Violation, RunEnded):
            return   # the crash is kept in `failure` (or `ended_by`); the first call raises it
        except OutOfTime:
            self.out_of_time = True
            return
        check_pinned(self.sut.capabilities.pinned, cfg)
        self.own = code_paths(self.sut.capabilities.code)
        for c in checks:
            reason = c.unavailable(self.sut.capabilities, cfg)
            if reason is None:
                self.checks.append(c)
            else:
                self.skipped[c.label] = reason
        self.obs = check_observation(self._call("observe", self.sut.observe), self.view.requests)

    # ----- inputs ------------------------------------------------------------------------
    def add(self, spec: RequestSpec) -> None:
        """Submit a request; it arrives at this step, unless the system refuses it
        (`Refused`: it is then left out, kept in `refused` with why)."""
        self.raise_failure()
        spec = spec.submitted_at(self.t)
        if spec.rid in self.view.requests or spec.rid in self.refused:
            raise WorkloadError(f"request {spec.rid!r}: duplicate request id")
        unknown = sorted(spec.features - set(self.caps.features))
        if unknown:
            raise WorkloadError(f"request {spec.rid!r}: uses {', '.join(unknown)}, which the system does not run "
                                f"(its capabilities.features: {', '.join(self.caps.features) or 'none'})")
        refusal: list[str] = []

        def submit() -> None:
            try:
                self.sut.add(spec)
            except Refused as refused:
                refusal.append(str(refused) or type(refused).__name__)
        self._call("add", submit)
        if refusal:
            self.refused[spec.rid] = refusal[0]
            return
        self._index[spec.rid] = len(self.specs)
        self.specs.append(spec)
        self.view.submit(spec)
        self.last_input = self.t
        ready = spec.ready_at()
        if ready is not None and ready > self.t:   # its grammar compiled then: an input to come
            self.inputs_until = max(self.inputs_until, ready)
        for c in list(self.checks):   # (a check may switch itself off: `_run_check`)
            self._run_check(c, lambda c=c: c.on_input(self, "add", spec.rid), self.t)

    def abort(self, rid: str) -> None:
        """Abort a request at this step, finished or not, as a real API takes an
        abort of a request that already finished (no effect once already
        aborted: a workload records one abort a request; none for a request the
        system refused)."""
        self.raise_failure()
        if rid in self.refused:
            return   # (it was never submitted)
        index = self._index[rid]
        if self.specs[index].abort_at is not None:
            return
        self._call("abort", lambda: self.sut.abort(rid))
        self.specs[index] = replace(self.specs[index], abort_at=self.t)
        self.last_input = self.t
        for c in list(self.checks):   # (a check may switch itself off: `_run_check`)
            self._run_check(c, lambda c=c: c.on_input(self, "abort", rid), self.t)

    def stop_with(self, rids: frozenset[str]) -> None:
        """For the next step: of the requests given a token, those in `rids` are
        given their stop token (a system that claims `stop_choices`)."""
        self.raise_failure()
        if not self.caps.stop_choices:
            raise WorkloadError("stop choices: the system does not let the explorer choose stop tokens "
                                "(capabilities.stop_choices)")
        self._call("stop_with", lambda: self.sut.stop_with(rids))  # type: ignore[attr-defined]
        self.chose_stops = True

    # ----- stepping ----------------------------------------------------------------------
    def step(self) -> list[Event]:
        """One step of the SUT, validated, recorded and checked (OutOfTime once
        the run's deadline has passed)."""
        self.raise_failure()
        if self.deadline is not None:
            self.deadline.check()
        events = check_events(self._call("step", self.sut.step), self.view.requests)
        self.obs = check_observation(self._call("observe", self.sut.observe), self.view.requests)
        self.view.fold(events)
        for e in events:
            load = self.view.requests[e.rid].load if isinstance(e, Load) else None
            if load is not None:   # (it ends then: an input to come, as a grammar's compilation is)
                self.inputs_until = max(self.inputs_until, load.ends_at)
        registered = self.obs.registered_pages if self.view.keep_pages else []   # (judged against computed pages)
        uncomputed = [page for page in registered if hash(page) not in self.view.computed_pages]
        cached = set(self.obs.cached_pages) if uncomputed else set()   # (a set of the cache only when needed)
        self.uncomputed_registrations.append(tuple(sorted(page in cached for page in uncomputed)))
        self.t += 1
        self.trace.append(events)
        self.counters.fold(events)
        if self.on_step:
            self.on_step(events, self.obs)
        for c in list(self.checks):   # (a check may switch itself off: `_run_check`)
            self._run_check(c, lambda c=c: c.after_step(self, events, self.obs), self.t - 1)
        return events

    def drained(self) -> bool:
        """Every submitted request finished, by the events and by the SUT's own
        word, and no KV load in flight (a finished request's blocks are held
        until it ends), but those that wait for an input that never comes (`never_ready`):
        while one waits, the events alone say, and only after a step with no
        event since the last input (the system left them waiting)."""
        waiting = self.never_ready()
        if not set(self.view.open) <= waiting or self.view.loading(self.t):
            return False
        return not self.obs.unfinished if not waiting else self.t > self.last_input and not self.trace[-1]

    def never_ready(self) -> set[str]:
        """The unfinished requests whose grammar is never compiled: they may wait
        for ever without a system at fault (a client would time out and abort
        them), so a run drains without them."""
        return {rid for rid in self.view.open if self.specs[self._index[rid]].ready_at() is None}

    def default_cap(self) -> int:
        """A work-based step cap: the last input (or the end of a pause), then four
        steps per unit of work."""
        return max(self.last_input, self.cfg.pause_end) + 4 * sum(work_units(self.workload())) + 50

    def run_to_drain(self, max_steps: int | None = None) -> bool:
        """Step until drained or `max_steps` steps in all, or, unless
        `past_repeats`, until a finding the checks ignore showed the state
        repeating with no input to come (a stall or livelock with its cycle: the
        system does nothing new, though a rule that judges by elapsed steps may
        still break); True if drained."""
        cap = max_steps if max_steps is not None else self.default_cap()
        while not self.drained() and self.t < cap and (self.past_repeats or not self.repeating()):
            self.step()
        return self.drained()

    def repeating(self) -> bool:
        """Whether an ignored finding of this run showed the state repeating (a
        violation with its `cycle`) in a step after the last input."""
        last = max(self.last_input, self.inputs_until)
        return any(v.cycle is not None and v.step is not None and v.step > last for _, v in ignored(self.checks))

    def finish(self, max_steps: int | None = None) -> None:
        """Drain within the checks' step cap, or `max_steps` if given (else a
        liveness violation), then run every check's end-of-run test."""
        self.raise_failure()
        caps = [c for c in (c.step_cap(self) for c in self.checks) if c is not None]
        cap = max_steps if max_steps is not None else min(caps, default=self.default_cap())
        drained = self.run_to_drain(cap)
        last = max(self.t - 1, 0)   # the last step run
        if not drained:
            self._fail(Violation("liveness", f"not drained after {self.t} steps (cap {cap}); "
                                             f"unfinished: {', '.join(r.spec.rid for r in self.view.unfinished())}"),
                       last)
        for c in list(self.checks):   # (a check may switch itself off: `_run_check`)
            self._run_check(c, lambda c=c: c.at_end(self, self.obs), last)

    @property
    def caps(self) -> Capabilities:
        return self.sut.capabilities

    def reference(self, workload: Workload, max_steps: int) -> Reference:
        """The run of `workload` on a fresh system of this run's factory, without
        checks, to `max_steps`; the same workload again (systems are
        deterministic) is not run again while it is among the last
        REFERENCE_RUNS_KEPT."""
        key = (self.factory, workload, max_steps)
        found = _reference_runs.pop(key, None)
        if found is None:
            run = run_workload(workload, self.factory, (), max_steps=max_steps)
            found = Reference(run.violation, run.drained, run.observation)
            if len(_reference_runs) >= REFERENCE_RUNS_KEPT:
                del _reference_runs[next(iter(_reference_runs))]
        _reference_runs[key] = found
        return found

    def internals(self) -> Internals:
        """The SUT's `Internals` now (only for SUTs whose capabilities say internals)."""
        return check_internals(self._call("internals", self.sut.internals))  # type: ignore[attr-defined]

    # ----- records -----------------------------------------------------------------------
    def workload(self) -> Workload:
        """What was submitted so far, as a replayable workload; where the run
        chose stop tokens (`stop_with`), each request with a stop token scripts
        the tokens it was given (`script_tokens`), so that a replay gives them
        again (the model's environment takes them; docs/exploring.md)."""
        if not self.chose_stops:
            return Workload(self.cfg, tuple(self.specs))
        given = {rid: out.token_ids for rid, out in self.obs.outputs.items() if out.token_ids}
        return Workload(self.cfg, tuple(replace(s, script_tokens=tuple(given[s.rid]))
                                        if s.stop_token is not None and s.rid in given else s for s in self.specs))

    def raise_failure(self) -> None:
        """Raise the violation found so far, if any (a crash while building the SUT
        included), or RunEnded if an ignored finding ended the run, or OutOfTime
        if the deadline passed while the SUT was being built."""
        if self.out_of_time:
            raise OutOfTime
        if self.ended_by is not None:
            raise RunEnded(self.ended_by.signature)
        if self.failure is not None:
            raise self.failure

    def _fail(self, violation: Violation, step: int) -> None:
        """Keep and raise `violation`, pinned to `step` unless it names its own."""
        if violation.step is None:
            violation.step = step
        if (violation.prop in DRIVER_PROPERTIES and matches(violation, self.ignore)) or ignored(self.checks):
            self.ended_by = violation
            raise RunEnded(violation.signature)
        self.failure = violation
        raise violation

    def _run_check(self, check: Check, hook: Callable[[], None], step: int) -> None:
        """Run a check's hook; a violation it raises, and those it met and the run
        ignores, are pinned to `step`. A check that fails in a hook after an
        ignored violation of that hook is switched off for the rest of the run
        (the rule it ignored left it a state it cannot judge from), and says so
        in `skipped`."""
        met = len(check.ignored)
        try:
            hook()
        except Violation as v:
            self._fail(v, step)
        except Exception as exc:  # noqa: BLE001 - only after an ignored violation; else a bug of loopcheck's
            if len(check.ignored) == met:
                raise
            self.checks.remove(check)
            self.skipped[check.label] = (f"switched off after an ignored {check.ignored[met].signature}, which left "
                                         f"it unable to judge ({type(exc).__name__}: {exc})")
        finally:
            for v in check.ignored[met:]:
                v.step = step if v.step is None else v.step

    def _call(self, verb: str, fn: Callable[[], Any], watched: bool = True) -> Any:
        """Call into the SUT; any exception it raises is a crash violation, and,
        `watched`, a call that runs past CALL_TIMEOUT seconds a hang; one still
        running when the run's deadline passes is cut short (OutOfTime)."""
        seconds, by_deadline = _timer(self.deadline, CALL_TIMEOUT if watched else None)
        try:
            with watchdog(seconds), self.coverage or nullcontext():
                return fn()
        except (ProtocolError, WorkloadError, Violation, RunEnded):
            raise
        except GenericEventError as err:
            raise ProtocolError("event fields", str(err)) from None
        except Overran as stopped:
            if by_deadline:
                raise OutOfTime from None
            self._fail(hang(verb, stopped, self.own), self.t)   # inputs of, or the run of, step t
        except Exception as exc:  # noqa: BLE001 - any exception inside the SUT is a finding
            self._fail(crash(verb, exc, self.own), self.t)


@dataclass
class Run:
    """A recorded workload driven once: the violation found (if any), the driver."""

    driver: Driver
    violation: Violation | None
    drained: bool
    out_of_time: bool = False   # ended by the run's wall-clock bound (`OutOfTime`)

    @property
    def observation(self) -> Observation:
        return self.driver.obs


def run_workload(workload: Workload, factory: SutFactory, checks: Sequence[Check] = (),
                 max_steps: int | None = None, on_step: OnStep | None = None,
                 coverage: EdgeCoverage | None = None, past_repeats: bool = False,
                 deadline: Deadline | None = None) -> Run:
    """Drive a recorded workload (arrivals and aborts by step). With checks, drain
    within their cap (or `max_steps`) and run their end tests; without, run until
    drained or `max_steps`. A run an ignored finding ended (`Driver.ended_by`)
    has no violation and has not drained; nor has one that `deadline` ended
    (`Run.out_of_time`)."""
    driver = Driver(factory, workload.config, checks, on_step, coverage, past_repeats, deadline)
    last = max((max(s.arrival, s.abort_at or 0) for s in workload.requests), default=0)
    driver.inputs_until = max(driver.inputs_until, last)
    inputs = InputSchedule(workload.requests)
    try:
        for t in range(last + 1):
            if max_steps is not None and t >= max_steps:
                break
            inputs.submit_due(t, driver.add, driver.abort)
            driver.step()
        if checks:
            driver.finish(max_steps)
        else:
            driver.run_to_drain(max_steps)
    except Violation as v:
        return Run(driver, v, False)
    except RunEnded:
        return Run(driver, None, False)
    except OutOfTime:
        return Run(driver, None, False, out_of_time=True)
    return Run(driver, None, driver.drained())
