"""The record a counterexample file carries beside its workload (written by
fuzz, explore and prove; read by replay, grouping and reports), validated field
by field when the file is loaded.

Every field is optional (a proof's lasso has no message, an older file no
signature); a field present has its type and range, and agrees with the rest of
the file: the trace's events are of known kinds with their fields, about the
file's requests, none before its request arrives; the step and the cycle lie
within the trace. Other keys are
kept as they are (files from a later release may add some)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import BY_KIND

TEXT_FIELDS = ("property", "signature", "message", "source")


def check_record(extra: dict[str, Any], arrivals: Mapping[str, int]) -> None:
    """Raise WorkloadError naming the first field of `extra` (a counterexample
    file's keys beside schema, config and requests) that is malformed or
    inconsistent with the file's requests (`arrivals`: each one's arrival step)."""
    for name in TEXT_FIELDS:
        if name in extra and not (isinstance(extra[name], str) and extra[name]):
            raise WorkloadError(f"{name}: must be a non-empty string, got {extra[name]!r}")
    steps = _trace_length(extra["trace"], arrivals) if "trace" in extra else None
    step = extra.get("step")
    if step is not None:
        if not _is_int(step) or step < 0:
            raise WorkloadError(f"step: must be a step number (0 or more) or null, got {step!r}")
        if steps is not None and step > steps:
            raise WorkloadError(f"step: {step} lies past the trace, which has {steps} steps")
    if extra.get("cycle") is not None:
        _check_cycle(extra["cycle"], steps)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _trace_length(trace: Any, arrivals: Mapping[str, int]) -> int:
    """The steps of a valid trace: a list of steps, each a list of events
    `[kind, rid, field...]` of a known kind about a request of the file that
    has arrived by that step."""
    if not isinstance(trace, list):
        raise WorkloadError(f"trace: must be a list of steps, got {type(trace).__name__}")
    for t, events in enumerate(trace):
        if not isinstance(events, list):
            raise WorkloadError(f"trace[{t}]: must be a list of events, got {type(events).__name__}")
        for i, event in enumerate(events):
            where = f"trace[{t}][{i}]"
            if not isinstance(event, list) or len(event) < 2:
                raise WorkloadError(f"{where}: must be an event [kind, request, field...], got {event!r}")
            kind, rid, values = event[0], event[1], event[2:]
            cls = BY_KIND.get(kind) if isinstance(kind, str) else None
            if cls is None:
                raise WorkloadError(f"{where}: unknown event kind {kind!r} (known: {', '.join(BY_KIND)})")
            if not isinstance(rid, str) or rid not in arrivals:
                raise WorkloadError(f"{where}: request {rid!r} is not one of the file's requests")
            if len(values) != len(cls.names):
                raise WorkloadError(f"{where}: {kind} carries {len(cls.names)} fields "
                                    f"({', '.join(cls.names) or 'none'}), got {len(values)}")
            if any(isinstance(v, (dict, list)) for v in values):
                raise WorkloadError(f"{where}: {kind}'s fields are numbers, strings, booleans or null")
            if arrivals[rid] > t:
                raise WorkloadError(f"{where}: {kind} of request {rid!r} at step {t}, before it arrives "
                                    f"(step {arrivals[rid]})")
    return len(trace)


def _check_cycle(cycle: Any, steps: int | None) -> None:
    """A livelock's cycle: its first step and its length (1 or more), within
    the trace where the file has one."""
    if not isinstance(cycle, dict) or set(cycle) != {"start", "length"}:
        raise WorkloadError(f"cycle: must be an object with exactly start and length, got {cycle!r}")
    start, length = cycle["start"], cycle["length"]
    if not _is_int(start) or start < 0:
        raise WorkloadError(f"cycle.start: must be a step number (0 or more), got {start!r}")
    if not _is_int(length) or length < 1:
        raise WorkloadError(f"cycle.length: must be 1 or more steps, got {length!r}")
    if steps is not None and start + length > steps:
        raise WorkloadError(f"cycle: steps {start}..{start + length} lie past the trace, which has {steps} steps")
