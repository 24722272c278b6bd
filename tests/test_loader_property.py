"""The loaders, fuzzed: damaged copies of valid files (a value removed,
retyped or out of range, the text truncated, re-encoded or cut by a NUL) are
either refused with one WorkloadError line, or loaded as valid: never another
exception, never a hang. Refused workload and counterexample files are refused
by `simulate` with exit 2 and one error line too. The default run draws a few
dozen files; `-m slow` draws thousands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopcheck.cli import main
from loopcheck.explorer.scope import PRESETS, load_scope
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import load_workload

EXAMPLES = Path(__file__).parent.parent / "examples"
VALID: dict[str, Any] = {   # kind -> a valid document of it
    "workload": json.loads((EXAMPLES / "livelock_min.json").read_text()),
    "counterexample": json.loads((EXAMPLES / "vllm" / "queue_head_stall.json").read_text()),
    "scope": PRESETS["small"].to_json(),
}
ODD_VALUES = (None, "x", "", -1, 0, 2**70, 0.5, True, [], {}, [[]], {"start": 0})


def value_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) to a value inside `doc`."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    paths = []
    for key, value in items:
        paths += [(*prefix, key), *value_paths(value, (*prefix, key))]
    return paths


def damaged(doc: Any, path: tuple, value: Any, remove: bool) -> Any:
    """A copy of `doc` with the value at `path` removed or replaced by `value`."""
    copy = json.loads(json.dumps(doc))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return copy


@st.composite
def damaged_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """A kind of file and the bytes of a damaged copy of its valid document."""
    kind = draw(st.sampled_from(sorted(VALID)))
    doc = VALID[kind]
    damage = draw(st.sampled_from(("value", "value", "value", "truncate", "utf-16", "nul")))
    text = json.dumps(doc)
    if damage == "value":
        path = draw(st.sampled_from(value_paths(doc)))
        text = json.dumps(damaged(doc, path, draw(st.sampled_from(ODD_VALUES)), draw(st.booleans())))
    data = text.encode()
    if damage == "truncate":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif damage == "utf-16":
        data = text.encode("utf-16")
    elif damage == "nul":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + b"\x00" + data[at:]
    return kind, data


def load(kind: str, path: Path) -> object:
    return load_scope(str(path)) if kind == "scope" else load_workload(path)


def check_file(kind: str, data: bytes, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp / f"{kind}.json"
    path.write_bytes(data)
    try:
        load(kind, path)
    except WorkloadError as exc:
        assert str(exc) and "\n" not in str(exc), repr(exc)
        if kind != "scope":
            capsys.readouterr()
            assert main(["simulate", str(path)]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and ": error: " in err[0], err


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damaged_files())
def test_a_damaged_file_is_refused_in_one_line_or_loaded(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        file: tuple[str, bytes]) -> None:
    check_file(*file, tmp_path, capsys)


@pytest.mark.slow
@settings(max_examples=3000, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damaged_files())
def test_thousands_of_damaged_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    file: tuple[str, bytes]) -> None:
    check_file(*file, tmp_path, capsys)
