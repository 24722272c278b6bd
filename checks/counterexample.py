"""Counterexample files: a workload with the violation it shows, the trace that
shows it and, for a livelock, the cycle; written by fuzz and explore, read by
replay."""

from __future__ import annotations

from pathlib import Path

from loopcheck.checks.base import Violation
from loopcheck.checks.signatures import current, parsed
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Event
from loopcheck.model.workload import Workload, save_workload


def counterexample_path(out: Path, prop: str, number: int = 1) -> Path:
    """Where a campaign's `number`th distinct finding of `prop` is written."""
    return out / f"counterexample-{prop}{'' if number == 1 else f'-{number}'}.json"


def numbered_paths(out: Path, props: list[str]) -> list[Path]:
    """Where the distinct findings of these properties, in this order, are
    written: each the next of its property."""
    return [counterexample_path(out, prop, 1 + props[:i].count(prop)) for i, prop in enumerate(props)]


def write_counterexample(path: Path, workload: Workload, violation: Violation,
                         trace: list[list[Event]], source: str) -> Path:
    """A replayable counterexample file at `path`: the workload, the property, its
    signature, message and step, the trace, and for a livelock the cycle."""
    extra = {"property": violation.prop, "signature": violation.signature, "message": violation.message,
             "step": violation.step, "source": source, "trace": [[e.to_json() for e in evs] for evs in trace]}
    if violation.cycle:
        extra["cycle"] = violation.cycle
    path.parent.mkdir(parents=True, exist_ok=True)
    save_workload(Workload(workload.config, workload.requests, extra), path)
    return path


def recorded_violation(found: Workload) -> Violation:
    """The violation a counterexample file records."""
    extra = found.extra
    try:
        signature = current(extra["signature"], "the counterexample's signature")
    except WorkloadError:   # (an older crash or hang signature by line, of a system not installed: as written)
        signature = extra["signature"]
    _, rule, where = parsed(signature)
    return Violation(extra["property"], extra["message"], extra.get("cycle"), extra.get("step"), where=where,
                     rule=rule)
