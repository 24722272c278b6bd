"""The event vocabulary shared by the reference model, the engine and every adapter.

A step reports what happened as a list of events, one frozen dataclass per kind,
each naming the request it is about (`rid`) and, by field name, what it carries
(docs/semantics.md gives the rules they follow). A system without looped models
leaves the depth fields at their default (1, the one loop it runs).

Files store an event as `[kind, rid, *fields]` (`to_json`), and
`str(event)` prints it as `kind(rid, field, ...)`.

`Event(kind, rid, args)`, the generic event of earlier releases, still builds
the typed event of that kind, with a DeprecationWarning naming the class to use
instead; it will be removed in the next release.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple


class GenericEventError(TypeError):
    """A generic `Event(kind, rid, args)` names no event kind, or has the wrong
    number of arguments for its kind (the driver reports it as a broken protocol)."""


class _EventType(type):
    """Lets the generic `Event(kind, rid, args)` of earlier releases build the
    typed event (the compatibility shim; only the base class takes that call)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Event:
            return _from_generic(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class _KindType(_EventType):
    """The metaclass of the kinds below: a plain construction (the shim's test
    would cost a Python call on every event)."""

    __call__ = type.__call__


@dataclass(frozen=True)
class Event(metaclass=_EventType):
    """What one step did to one request. Subclasses are the event kinds; `kind`
    is the name files and messages use, `names` its fields after `rid`."""

    rid: str
    kind: ClassVar[str] = ""
    names: ClassVar[tuple[str, ...]] = ()

    def values(self) -> tuple[Any, ...]:
        """The fields after `rid`, in declaration order."""
        return tuple(getattr(self, name) for name in self.names)

    def to_json(self) -> list[Any]:
        return [self.kind, self.rid, *self.values()]

    def __str__(self) -> str:
        return f"{self.kind}({self.rid}{''.join(', ' + str(v) for v in self.values())})"


@dataclass(frozen=True)
class Arrive(Event, metaclass=_KindType):
    """The request arrived and waits."""

    kind: ClassVar[str] = "arrive"


@dataclass(frozen=True)
class Reject(Event, metaclass=_KindType):
    """The request can never fit the pool; a `Finish("rejected")` follows."""

    reason: str
    kind: ClassVar[str] = "reject"


@dataclass(frozen=True)
class Abort(Event, metaclass=_KindType):
    """The request was aborted; everything it held is released. A `Finish("abort")` follows."""

    kind: ClassVar[str] = "abort"


@dataclass(frozen=True)
class Admit(Event, metaclass=_KindType):
    """Fresh admission: the request starts running with `hit_pages` prefix-cache hits."""

    hit_pages: int = 0
    kind: ClassVar[str] = "admit"


@dataclass(frozen=True)
class Resume(Event, metaclass=_KindType):
    """A preempted request runs again with `hit_pages` prefix-cache hits;
    `restored`: the positions taken back from its CPU snapshot past the hit pages
    (0 without snapshots)."""

    hit_pages: int = 0
    restored: int = 0
    kind: ClassVar[str] = "resume"


@dataclass(frozen=True)
class Preempt(Event, metaclass=_KindType):
    """The request was evicted from the running set, for request `by` (None: the
    system does not say). `keeps_tokens`: it keeps the tokens it generated (a CPU
    snapshot, or a recompute of prompt and tokens, as most engines do); False: it
    drops them and starts over."""

    by: str | None = None
    keeps_tokens: bool = True
    kind: ClassVar[str] = "preempt"


@dataclass(frozen=True)
class Rewind(Event, metaclass=_KindType):
    """Looped models only: an unfinished WCPB chunk was rolled back to `frontier`."""

    frontier: int
    kind: ClassVar[str] = "rewind"


@dataclass(frozen=True)
class Prefill(Event, metaclass=_KindType):
    """Prompt positions [start, end) were computed, at depth `depth` (1-based; a
    system without looped models runs its one loop: 1)."""

    start: int
    end: int
    depth: int = 1
    kind: ClassVar[str] = "prefill"


@dataclass(frozen=True)
class Load(Event, metaclass=_KindType):
    """The request, waiting or preempted, started loading the KV of positions
    [start, end) from an external store (a KV connector): it holds blocks for
    positions 0..end from now on. The load ends `RequestSpec.kv_load_steps`
    steps later, the step it started in counted: its positions are valid from
    the next step on, or, for a load that fails (`kv_load_fails`), none of them
    is; the request is then admitted or resumed to compute what it lacks."""

    start: int
    end: int
    kind: ClassVar[str] = "load"


@dataclass(frozen=True)
class Draft(Event, metaclass=_KindType):
    """Speculative decoding: the request's decode this step also verified
    `count` draft tokens (positions past its input, each taking a slot of the
    token budget and of its KV). The right ones, up to the first wrong one,
    are kept: its tokens of the step follow, one more than the drafts kept."""

    count: int
    kind: ClassVar[str] = "draft"


@dataclass(frozen=True)
class Token(Event, metaclass=_KindType):
    """The request's token number `index` (0-based) was sampled: `token_id`, exiting
    at depth `exit_depth` (1 without looped models)."""

    index: int
    token_id: int
    exit_depth: int = 1
    kind: ClassVar[str] = "token"


@dataclass(frozen=True)
class Publish(Event, metaclass=_KindType):
    """The request's full prompt page number `page` entered the prefix cache."""

    page: int
    kind: ClassVar[str] = "publish"


@dataclass(frozen=True)
class Finish(Event, metaclass=_KindType):
    """The request finished: `reason` is one of FINISH_REASONS."""

    reason: str
    kind: ClassVar[str] = "finish"


FINISH_REASONS = ("length", "stop", "abort", "rejected")
BY_KIND: dict[str, type[Event]] = {cls.kind: cls for cls in (
    Arrive, Reject, Abort, Admit, Resume, Preempt, Rewind, Prefill, Token, Publish, Finish, Load, Draft)}
KINDS = tuple(BY_KIND)
for _cls in BY_KIND.values():
    _cls.names = tuple(f.name for f in fields(_cls))[1:]


def _from_generic(kind: str, rid: str, args: tuple[Any, ...] = ()) -> Event:
    """The typed event a generic `Event(kind, rid, args)` stands for (deprecated)."""
    cls = BY_KIND.get(kind)
    if cls is None:
        raise GenericEventError(f"Event({kind!r}, ...): unknown event kind (known: {', '.join(KINDS)})")
    if len(args) != len(cls.names):
        raise GenericEventError(f"Event({kind!r}, {rid!r}, {tuple(args)!r}): {kind} carries "
                        f"{len(cls.names)} fields ({', '.join(cls.names) or 'none'})")
    warnings.warn(f"Event({kind!r}, rid, args) is deprecated and goes in the next release: use "
                  f"loopcheck.model.events.{cls.__name__}(rid{''.join(', ' + n for n in cls.names)})",
                  DeprecationWarning, stacklevel=3)
    return cls(rid, *args)


class TokenOutcome(NamedTuple):
    """What the LM produced for one decoded token: its ID and exit depth."""

    token_id: int
    exit_depth: int


@dataclass
class RequestOutput:
    """What a user sees of one request at the end of a run. `exit_depths`: one per
    token; left out (None), every token exited at depth 1, as without looped models."""

    rid: str
    token_ids: list[int]
    exit_depths: list[int] | None = None
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        if self.exit_depths is None:
            self.exit_depths = [1] * len(self.token_ids) if isinstance(self.token_ids, list) else []

    def to_json(self) -> dict[str, Any]:
        return {"token_ids": self.token_ids, "exit_depths": self.exit_depths,
                "finish_reason": self.finish_reason}
