"""The loaders, fuzzed: damaged copies of valid files (a workload, a
counterexample, a scope, an exploration's certificate, a fuzz corpus entry; a
value removed, retyped or out of range, the text truncated, re-encoded or cut
by a NUL) are either refused with one WorkloadError line, or loaded as valid
(and a certificate then combined): never another exception, never a hang.
Refused files are refused by the command that reads them (`simulate`,
`combine`) with exit 2 and one error line too; a corpus entry that does not
load is skipped with one warning line. Files that load are run by the commands
that take them, each within a small bound: a verdict (exit 0 or 1), or one
error line and exit 2, never a traceback. The default run draws a few dozen
files; `-m slow` draws thousands."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from loopcheck.cli import main
from loopcheck.explorer.certificate import certificate_from_json
from loopcheck.explorer.scope import PRESETS, load_scope
from loopcheck.fuzz.corpus import stored
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import load_workload

EXAMPLES = Path(__file__).parent.parent / "examples"
MINISCHED = str(EXAMPLES / "adapter" / "minisched_adapter.py") + ":MiniSchedSUT"
VALID: dict[str, Any] = {   # kind -> a valid document of it (and "certificate", made by a fixture)
    "workload": json.loads((EXAMPLES / "livelock_min.json").read_text()),
    "corpus entry": load_workload(EXAMPLES / "sglang" / "idle_stall.json").to_json(),   # (as a campaign saves it)
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


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """VALID and a certificate: part 1 of 2 of minisched's tiny exploration."""
    out = tmp_path_factory.mktemp("certificate")
    # (exit 1: a part's certificate does not cover the whole scope)
    assert main(["explore", "--adapter", MINISCHED, "--scope", "tiny", "--part", "1/2", "--out", str(out)]) == 1
    return {**VALID, "certificate": json.loads((out / "certificate.json").read_text())}


@st.composite
def damaged_files(draw: st.DrawFn, valid: dict[str, Any], kinds: Iterable[str] | None = None) -> tuple[str, bytes]:
    """A kind of file (of `kinds`, default any) and the bytes of a damaged copy of
    its valid document."""
    kind = draw(st.sampled_from(sorted(kinds or valid)))
    doc = valid[kind]
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
    if kind == "certificate":
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:   # (what `combine` refuses so, in one line)
            raise WorkloadError(f"{path}: cannot read a certificate ({exc})") from None
        return certificate_from_json(data, str(path))
    return load_scope(str(path)) if kind == "scope" else load_workload(path)


COMMANDS = {"workload": ["simulate"], "counterexample": ["simulate"], "certificate": ["combine", "--out"]}


def check_entry(data: bytes, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corpus entry, as a campaign reads it from its example database: loaded,
    or skipped with one warning line."""
    database = DirectoryBasedExampleDatabase(tempfile.mkdtemp(dir=tmp))   # (a fresh one: tmp serves every example)
    database.save(b"loopcheck:corpus:test", data)
    capsys.readouterr()
    loaded = stored(database, b"loopcheck:corpus:test")
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(loaded) + len(warning) == 1, (loaded, warning)
    assert all(line.startswith("loopcheck: warning: skipped 1 saved entry") for line in warning), warning


RUN = {   # kind -> the commands that take a file of it, each bounded (a verdict within a few seconds)
    "workload": [["simulate", "--max-steps", "40", "--max-seconds", "3"],
                 ["replay", "--max-steps", "40", "--max-seconds", "3", "--runs", "1"]],
    "counterexample": [["replay", "--max-steps", "40", "--max-seconds", "3", "--runs", "1"]],
    "scope": [["explore", "--max-states", "300", "--max-seconds", "3", "--scope"]],
}


def run_loaded(kind: str, path: Path, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each command that takes a file of this kind, on one that loaded: a verdict
    (exit 0 or 1), or exit 2 with one error line (a scope the system takes no
    request of), never a traceback."""
    for command in RUN.get(kind, []):
        capsys.readouterr()
        out = ["--out", str(tmp / "explored")] if command[0] == "explore" else []
        code = main([*command, str(path), *out])
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        if code == 2:
            errors = [line for line in err.splitlines() if ": error: " in line]
            assert len(errors) == 1, err
        else:
            assert code in (0, 1), (command, code, err)


def check_file(kind: str, data: bytes, tmp: Path, capsys: pytest.CaptureFixture[str], run: bool = False) -> None:
    """Loaded (and, with `run`, run by the commands that take it) or refused in one line."""
    if kind == "corpus entry":
        check_entry(data, tmp, capsys)
        return
    path = tmp / f"{kind}.json"
    path.write_bytes(data)
    try:
        load(kind, path)
        if kind == "certificate":   # (one that loads is combined: a verdict, or one error line)
            assert main(["combine", "--out", str(tmp / "out"), str(path)]) in (0, 1, 2)
        if run:
            run_loaded(kind, path, tmp, capsys)
    except WorkloadError as exc:
        assert str(exc) and "\n" not in str(exc), repr(exc)
        if kind in COMMANDS:
            capsys.readouterr()
            extra = [str(tmp / "out")] if kind == "certificate" else []   # (combine's --out)
            assert main([*COMMANDS[kind], *extra, str(path)]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and ": error: " in err[0], err


def damaged_files_test(examples: int, run: bool, slow: bool = False) -> Callable[..., None]:
    """A test of `examples` damaged files (`check_file`; `run`: of the kinds that
    commands run, and those that load are run), in the default suite or, `slow`,
    with -m slow."""
    @settings(max_examples=examples, derandomize=True, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.data())
    def test(tmp_path: Path, capsys: pytest.CaptureFixture[str], valid: dict[str, Any], data: st.DataObject) -> None:
        check_file(*data.draw(damaged_files(valid, RUN if run else None)), tmp_path, capsys, run=run)
    return pytest.mark.slow(test) if slow else test


test_a_damaged_file_is_refused_in_one_line_or_loaded = damaged_files_test(60, run=False)
test_a_damaged_file_that_loads_is_run_to_a_verdict = damaged_files_test(60, run=True)
test_thousands_of_damaged_files = damaged_files_test(3000, run=False, slow=True)
test_hundreds_of_damaged_files_run = damaged_files_test(1000, run=True, slow=True)
