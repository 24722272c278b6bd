"""Typed events: one frozen dataclass per kind, read by field name everywhere;
the generic `Event(kind, rid, args)` of earlier releases still runs, with a
warning naming the class that replaces it."""

from __future__ import annotations

import ast
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from loopcheck.checks.suite import checks_for
from loopcheck.driver.driver import run_workload
from loopcheck.model.events import BY_KIND, KINDS, Admit, Event, Finish, Preempt, Prefill, Token
from loopcheck.model.workload import load_workload
from loopcheck.sut.model_sut import ModelSUT
from tests.broken_adapters import GenericEvents

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "livelock_min.json"


def test_each_kind_is_a_frozen_class_printed_and_stored_as_before() -> None:
    assert KINDS == ("arrive", "reject", "abort", "admit", "resume", "preempt", "rewind", "prefill", "token",
                     "publish", "finish", "load", "draft")
    e = Token("a", 3, 17, 2)
    assert (e.index, e.token_id, e.exit_depth) == (3, 17, 2)
    assert str(e) == "token(a, 3, 17, 2)" and e.to_json() == ["token", "a", 3, 17, 2]
    with pytest.raises(FrozenInstanceError):
        e.index = 4   # type: ignore[misc]
    assert all(issubclass(cls, Event) and cls.kind == kind and fields(cls)[0].name == "rid"
               for kind, cls in BY_KIND.items())


def test_a_plain_engine_leaves_depths_and_defaults_out() -> None:
    """Without looped models a prefill and a token run the one loop; a preemption
    that does not name its cause keeps the tokens (a recompute)."""
    assert Prefill("a", 0, 4) == Prefill("a", 0, 4, 1) and Token("a", 0, 5).exit_depth == 1
    assert Preempt("a") == Preempt("a", None, True) and Admit("a") == Admit("a", 0)


def test_generic_events_of_earlier_releases_run_with_a_warning_naming_the_class() -> None:
    w = load_workload(str(EXAMPLE))
    with pytest.warns(DeprecationWarning, match=r"use loopcheck\.model\.events\.Preempt\(rid, by, keeps_tokens\)"):
        generic = run_workload(w, GenericEvents, checks_for("property"))
    typed = run_workload(w, ModelSUT, checks_for("property"))
    assert generic.driver.trace == typed.driver.trace and generic.violation == typed.violation
    assert any(isinstance(e, Preempt) for step in generic.driver.trace for e in step)


def test_a_generic_event_builds_its_typed_class() -> None:
    with pytest.warns(DeprecationWarning, match="Finish"):
        e = Event("finish", "a", ("stop",))
    assert e == Finish("a", "stop") and type(e) is Finish


def test_no_event_is_read_by_position_outside_the_shim() -> None:
    """No `.args` read anywhere in loopcheck's code, examples or benchmarks: events
    are read by field name (model/events.py, the shim, takes the generic call)."""
    offenders = []
    for folder in ("checks", "sut", "model", "fuzz", "explorer", "loopcheck", "proofs", "engine", "kernels",
                   "benchmarks", "examples", "scripts", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "events.py" and path.parent.name == "model":
                continue
            tree = ast.parse(path.read_text())
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                          if isinstance(node, ast.Attribute) and node.attr == "args"
                          and not (isinstance(node.value, ast.Name) and node.value.id in ("call", "node", "ns"))]
    assert offenders == []

