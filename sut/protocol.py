"""The system-under-test protocol: what loopcheck needs from any scheduler.

A system under test (SUT) is built by a factory from a `Config` and answers four
verbs:

- `add(spec)`: submit a request; it arrives at the start of the next step;
- `abort(rid)`: abort it at the start of the next step, after that step's
  arrivals (ignored once finished);
- `step()`: run one scheduler step and return its events, a list of
  `model.events.Event` in the vocabulary of model/events.py;
- `observe()`: an `Observation` of what the SUT can report;

and, where `capabilities.internals` says so, a fifth: `internals()`, the
`Internals` behind rules the events do not show (the futility guard, bypass counts,
CPU snapshots), read only by the checks that need them.

It also carries `capabilities`, saying what it reports and claims, so that each
check runs only where its inputs exist, and the report says which did not run.

Every verb must return: a call that runs past `sut.driver.CALL_TIMEOUT`
seconds is stopped and reported as a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from loopcheck.model.config import Config
from loopcheck.model.events import BY_KIND, FINISH_REASONS, KINDS, Event, Finish, RequestOutput
from loopcheck.model.workload import FEATURES, RequestSpec


class ProtocolError(Exception):
    """The SUT broke the protocol (not a scheduling bug): names the rule broken."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"adapter broke the protocol: rule '{rule}': {detail}")
        self.rule, self.detail = rule, detail

    def __reduce__(self) -> tuple:
        return ProtocolError, (self.rule, self.detail)   # (raised in a worker process, re-raised in the parent)


class Refused(Exception):  # noqa: N818 - what the system answers, not an error of loopcheck's
    """Raised by a SUT's `add` for a request its API refuses, as a server answers
    a request it will not take with an error (a prompt longer than the system's
    maximum length, a parameter it does not allow): the request is not
    submitted, nothing judges it, and the run goes on without it. The message
    says why; the driver counts it (`Driver.refused`)."""


@dataclass(frozen=True)
class VictimOrder:
    """The order a system documents for the running requests it preempts without
    naming a requester (a retraction when KV memory runs out): of the
    candidates (running when the step starts, with at least one token: those
    decoding, but any aborted in the step), each one preempted in a step has a
    `key` at least that of every candidate kept. `key(prompt_len, tokens,
    priority)` is comparable, larger preempted first (ties in any order);
    `source` says where the order is written (the engine's function), for the
    message of a violation. A module-level function keeps it picklable."""

    key: Callable[[int, int, int], Any]
    source: str


# The config fields of looped models, at the values of an engine without them (the plain-engine profile).
PLAIN_ENGINE: dict[str, Any] = {"num_loops": 1, "min_loops": 1, "kv_layout": "shared", "wcpb": False,
                                "snapshots": False}


@dataclass(frozen=True)
class Capabilities:
    """What a SUT reports and claims.

    kv: `Observation.blocks_held` and `kv_errors` are meaningful (KV checks run).
    state_key: `Observation.state_key` identifies the whole scheduling state, so a
      repeat with work left is a livelock (else only stall and step-cap checks run).
    fingerprints: `Observation.fingerprints` hold exact output bits per request.
    abort: `abort()` works (else the fuzzer submits no aborts).
    priorities: the SUT claims priority scheduling with preemption, so a waiting
      request strictly more urgent than a running one must not wait behind it.
    semantics: "loopcheck" when the SUT implements docs/semantics.md, so it can run
      in lockstep with the reference model; None for any other scheduler.
    pinned: config fields the SUT supports only at these values (for example
      {"num_loops": 1} for a non-looped engine); loopcheck draws configs with them
      and refuses workloads that contradict them.
    internals: the SUT has an `internals()` verb returning `Internals` (with
      semantics "loopcheck": the documented rules on them are checked).
    block_tables: `Observation.block_tables` lists the blocks each request holds
      (the `kv-tables` checks run).
    code: the modules (dotted names, packages included with what is under them)
      of the system's own scheduling, cache and pool code, for example
      ("vllm.v1.core",): a crash is named by its innermost function there, and
      the fuzzer's coverage guidance measures lines only there. Empty: a crash is
      named by its innermost function outside the standard library, and no
      coverage is measured.
    refuses: workload features (`loopcheck.fuzz.strategies.Shape` fields, for
      example ("prompt_only",) for an API that refuses max_tokens 0) the system's
      API refuses: they are never drawn for it (a request it refuses anyway is
      `Refused` at `add`).
    cached_pages: `Observation.cached_pages` lists what the prefix cache holds
      (the cached-page rule of `prefix-hits` runs after every step, not only
      when a page is hit).
    victim_order: the `VictimOrder` the system claims for the requests it
      retracts (the victim-order rule then judges it; a system with semantics
      "loopcheck" has the documented order of docs/semantics.md instead).
    looped: the system runs looped (depth-recurrent) models, as loopcheck's own
      model and engine do. Left False (the plain-engine profile), the config
      fields only looped models have are pinned to what a plain engine runs
      (PLAIN_ENGINE: one loop, one KV plane, no WCPB chunks, no CPU snapshots),
      so its adapter never mentions them.
    features: the deployment features the system runs (`FEATURES`: "lora",
      requests served with LoRA adapters, at most `Config.max_loras` a step;
      "grammar", structured-output requests that wait for their grammar;
      "kv_transfer", requests whose prompt's KV it loads from an external
      store, reporting each load's start with a `Load` event; "spec",
      speculative decoding, `Config.spec_tokens` drafts a decoding request a
      step, reported with a `Draft` event; "pause", an operator pausing the
      engine as the config's `pause` fields say, which the system does itself
      at those steps; "async_scheduling", asynchronous scheduling when the
      config's field of that name is on: a step's tokens are the previous step's
      batch's). Only these are drawn for it, and a workload using another is
      refused. Without "lora", `max_loras` is pinned to 1; without "spec",
      `spec_tokens` to 0; without "pause", `pause` to "off"; without
      "async_scheduling", `async_scheduling` to False.
    stop_choices: the system has a `stop_with(rids)` verb: before a step, the
      explorer chooses which requests are given their stop token in it (of
      those given a token then: the others are given one that is not their stop
      token), so that exploring a given workload covers every way its requests
      with a stop token can stop (docs/exploring.md, "A workload as a scope").
    """

    kv: bool = False
    state_key: bool = False
    fingerprints: bool = False
    abort: bool = True
    priorities: bool = False
    semantics: str | None = None
    pinned: dict[str, Any] = field(default_factory=dict)
    internals: bool = False
    block_tables: bool = False
    code: tuple[str, ...] = ()
    refuses: tuple[str, ...] = ()
    cached_pages: bool = False
    victim_order: VictimOrder | None = None
    looped: bool = False
    features: tuple[str, ...] = ()
    stop_choices: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.pinned, dict):
            plain = {} if self.looped else PLAIN_ENGINE
            unclaimed = {**({} if "lora" in self.features else {"max_loras": 1}),
                         **({} if "spec" in self.features else {"spec_tokens": 0}),
                         **({} if "pause" in self.features else {"pause": "off"}),
                         **({} if "async_scheduling" in self.features else {"async_scheduling": False})}
            object.__setattr__(self, "pinned", {**plain, **unclaimed, **self.pinned})


@dataclass
class Observation:
    """What a SUT reports after a step.

    blocks_held: KV blocks not free (cache-only prefix blocks count as free).
    kv_errors: the SUT's own accounting problems (conservation, ref counts).
    outputs: per request, tokens, exit depths and finish reason so far.
    fingerprints: per request, a digest of the exact output bits (optional).
    unfinished: requests are queued, waiting, running or preempted.
    state_key: a hashable value equal exactly when the scheduling states are equal.
    block_tables: per request holding KV blocks, its pages in position order (page k
      holds positions k * block_size onwards), each the ids of its blocks (one per
      plane); ids name blocks of the pool, any ints.
    cached_pages: the pages the prefix cache holds (held or cache-only), each as
      the tokens at positions 0 to its end that it stands for (a page of a
      prefix cache keyed by prefix stands for its whole prefix).
    registered_pages: the pages the prefix cache registered during the step, as
      `cached_pages` (whether or not it still holds them after it; optional, for
      guidance: a page registered for work the step then did not do and dropped
      again in it is the near miss of one left cached).
    """

    blocks_held: int = 0
    kv_errors: list[str] = field(default_factory=list)
    outputs: dict[str, RequestOutput] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    unfinished: bool = False
    state_key: Hashable | None = None
    block_tables: dict[str, list[list[int]]] = field(default_factory=dict)
    cached_pages: list[tuple[int, ...]] = field(default_factory=list)
    registered_pages: list[tuple[int, ...]] = field(default_factory=list)


@dataclass(frozen=True)
class Internals:
    """Scheduler state, after a step, that docs/semantics.md has rules about and
    events do not show.

    guard: the futility guard's (request, free-block budget) entries.
    bypasses: per waiting or preempted request, how often a less urgent request
      was freshly admitted past it since it last ran.
    snapshots: the requests holding a CPU snapshot.
    """

    guard: frozenset[tuple[str, int]] = frozenset()
    bypasses: dict[str, int] = field(default_factory=dict)
    snapshots: frozenset[str] = frozenset()


class SystemUnderTest(Protocol):
    """A scheduler as loopcheck drives it. Built by a `SutFactory` from a Config
    (raise `loopcheck.model.errors.WorkloadError` for a config it cannot run);
    every verb returns within `sut.driver.CALL_TIMEOUT` seconds, and an exception
    it raises is reported as a crash of the system."""

    capabilities: Capabilities
    """What the system reports and claims; read once, after it is built."""

    def add(self, spec: RequestSpec) -> None:
        """Submit a request; it arrives at the start of the next step.

        Args:
            spec: the request: `rid` (unique in the run), `prompt` (token ids),
                `max_tokens`, `priority` (lower is more urgent), `stop_token`.

        Raises:
            Refused: the system's API would refuse this request (the run goes
                on without it).
        """

    def abort(self, rid: str) -> None:
        """Abort a request at the start of the next step, after that step's
        arrivals; ignored once it finished.

        Args:
            rid: the id of a request given to `add`.
        """

    def step(self) -> list[Event]:
        """Run one scheduler step: arrivals and aborts, then scheduling, then the
        batch.

        Returns:
            What the step did, in the order it did it: events of
            model/events.py (`Arrive`, `Admit`, `Prefill`, `Token`, `Preempt`,
            `Finish`, ...), each about a request given to `add`.
        """

    def observe(self) -> Observation:
        """Report the state after the last step.

        Returns:
            An `Observation`; fields the capabilities do not claim keep their
            defaults.
        """


SutFactory = Callable[[Config], SystemUnderTest]
CONFIG_FIELDS = frozenset(f.name for f in fields(Config))

REQUEST = "a submitted request's id, or None"
# What each annotated field type of an event (model/events.py) must hold: int (not a bool), bool, str, or REQUEST.
_FIELD_TYPES: dict[str, object] = {"int": int, "bool": bool, "str": str, "str | None": REQUEST}
_WANTED = {cls: tuple((f.name, _FIELD_TYPES[str(f.type)]) for f in fields(cls)[1:]) for cls in BY_KIND.values()}


def check_sut(sut: object) -> SystemUnderTest:
    """The SUT itself, if it has the four verbs and capabilities; else ProtocolError."""
    for verb in ("add", "abort", "step", "observe"):
        if not callable(getattr(sut, verb, None)):
            raise ProtocolError("verbs", f"{type(sut).__name__} has no method {verb}()")
    caps = getattr(sut, "capabilities", None)
    if not isinstance(caps, Capabilities):
        raise ProtocolError("capabilities", f"{type(sut).__name__}.capabilities must be a "
                                            "loopcheck.sut.protocol.Capabilities")
    if not isinstance(caps.pinned, dict):
        raise ProtocolError("capabilities.pinned maps config fields to values", f"got {caps.pinned!r}")
    if not (isinstance(caps.code, tuple) and all(isinstance(m, str) and m for m in caps.code)):
        raise ProtocolError("capabilities.code is a tuple of module names", f"got {caps.code!r}")
    if not CONFIG_FIELDS.issuperset(caps.pinned):
        raise ProtocolError("capabilities.pinned maps config fields to values",
                            f"not config fields: {sorted(set(caps.pinned) - CONFIG_FIELDS)}")
    if not (isinstance(caps.features, tuple) and set(caps.features) <= set(FEATURES)):
        raise ProtocolError(f"capabilities.features is a tuple of {', '.join(FEATURES)}", f"got {caps.features!r}")
    looped_only = {name: caps.pinned[name] for name, plain in PLAIN_ENGINE.items()
                   if caps.pinned.get(name, plain) != plain}
    if not caps.looped and looped_only:
        raise ProtocolError("a system without looped models (capabilities.looped False) runs "
                            + ", ".join(f"{k}={v!r}" for k, v in PLAIN_ENGINE.items()), f"it pins {looped_only}")
    return sut  # type: ignore[return-value]


def check_events(events: object, known: Container[str]) -> list[Event]:
    """step()'s result, validated: a list of events of the kinds of
    model/events.py, about submitted requests, each field of its declared type;
    else ProtocolError naming the rule."""
    if not isinstance(events, list):
        raise ProtocolError("step returns a list of events", f"got {type(events).__name__}")
    for e in events:
        if not isinstance(e, Event):
            raise ProtocolError("events are model.events.Event", f"got {e!r}")
        wanted = _WANTED.get(type(e))
        if wanted is None:
            raise ProtocolError("event kinds", f"{type(e).__name__} {e.kind!r} is not an event kind of "
                                               f"loopcheck.model.events (known: {', '.join(KINDS)})")
        if e.rid not in known:
            raise ProtocolError("events name submitted requests", f"{e} names unknown request {e.rid!r}")
        for name, kind in wanted:
            value = getattr(e, name)
            if not ((value is None or value in known) if kind is REQUEST else type(value) is kind):
                wanted_type = kind if kind is REQUEST else kind.__name__   # type: ignore[attr-defined]
                raise ProtocolError("event field types", f"{e}: {name} is {value!r}, not {wanted_type}")
        if isinstance(e, Finish) and e.reason not in FINISH_REASONS:
            raise ProtocolError("finish reasons", f"{e}: reason must be one of {', '.join(FINISH_REASONS)}")
    return events


def check_observation(obs: object, known: Container[str]) -> Observation:
    """observe()'s result, validated: an Observation whose fields have their
    documented types, with outputs and fingerprints only of submitted requests
    (`known`); else ProtocolError naming the rule."""
    if not isinstance(obs, Observation):
        raise ProtocolError("observe returns an Observation", f"got {type(obs).__name__}")
    if type(obs.blocks_held) is not int:   # (out of the pool's range is a KV bug: kv-conservation)
        raise ProtocolError("blocks_held is an int", f"got {obs.blocks_held!r}")
    if not isinstance(obs.kv_errors, list) or not all(isinstance(e, str) for e in obs.kv_errors):
        raise ProtocolError("kv_errors is a list of str", f"got {obs.kv_errors!r}")
    if type(obs.unfinished) is not bool:
        raise ProtocolError("unfinished is a bool", f"got {obs.unfinished!r}")
    for name, wanted, kind in (("outputs", RequestOutput, "RequestOutput"), ("fingerprints", str, "str")):
        per_request = getattr(obs, name)
        if not isinstance(per_request, dict):
            raise ProtocolError(f"{name} maps request ids to {kind}", f"got {type(per_request).__name__}")
        for rid, value in per_request.items():
            if rid not in known:
                raise ProtocolError(f"{name} name submitted requests", f"{name} has unknown request {rid!r}")
            if not isinstance(value, wanted):
                raise ProtocolError(f"{name} maps request ids to {kind}", f"{rid!r}: got {value!r}")
    if not isinstance(obs.block_tables, dict) or not all(
            isinstance(pages, list) and all(_ints(page) for page in pages) for pages in obs.block_tables.values()):
        raise ProtocolError("block_tables maps request ids to lists of pages, each a list of int block ids",
                            f"got {obs.block_tables!r}")
    unknown = [rid for rid in obs.block_tables if rid not in known]
    if unknown:
        raise ProtocolError("block_tables name submitted requests", f"block_tables has unknown request {unknown[0]!r}")
    for rid, out in obs.outputs.items():
        if not (_ints(out.token_ids) and _ints(out.exit_depths)) or out.finish_reason not in (None, *FINISH_REASONS):
            raise ProtocolError("outputs hold lists of int token ids and exit depths and a finish reason",
                                f"{rid!r}: got {out!r}")
    if obs.state_key is not None:
        try:
            hash(obs.state_key)
        except TypeError:
            raise ProtocolError("state_key is hashable", f"got {obs.state_key!r}") from None
    return obs


def _ints(values: object) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


def check_internals(found: object) -> Internals:
    if not isinstance(found, Internals):
        raise ProtocolError("internals returns an Internals", f"got {type(found).__name__}")
    return found
