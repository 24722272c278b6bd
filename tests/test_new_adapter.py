"""An adapter in an hour: `loopcheck new-adapter` writes a skeleton that runs and
passes `loopcheck check-adapter`; check-adapter fails an adapter that breaks the
protocol, a property or determinism; the plain-engine profile pins the looped
fields; and turnsched, a scheduler loopcheck had never seen, has an adapter of
under 150 lines made from the skeleton, which fuzz and explore run."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest

from loopcheck.cli import main
from loopcheck.model.workload import load_workload
from loopcheck.sut.code import code_paths
from loopcheck.sut.protocol import PLAIN_ENGINE, Capabilities, ProtocolError, check_sut

ROOT = Path(__file__).parent.parent
TURNSCHED = ROOT / "examples" / "plain" / "turnsched_adapter.py"
LOOPED_WORDS = re.compile(r"loops?\b|depth|rewind|frontier|wcpb|snapshot", re.IGNORECASE)


def looped_vocabulary(path: Path) -> list[str]:
    """Lines that speak of looped models (`loopcheck` itself is not such a word)."""
    return [line for line in path.read_text().splitlines() if LOOPED_WORDS.search(line.replace("loopcheck", ""))]


def test_the_skeleton_is_written_and_passes_check_adapter(tmp_path, capsys) -> None:
    assert main(["new-adapter", "my_engine", "--out", str(tmp_path)]) == 0
    path = tmp_path / "my_engine_adapter.py"
    assert "next: loopcheck check-adapter --adapter" in capsys.readouterr().out
    assert "class MyEngineSUT" in path.read_text() and looped_vocabulary(path) == []
    assert main(["check-adapter", "--adapter", f"{path}:MyEngineSUT", "--out", str(tmp_path / "found")]) == 0
    out = capsys.readouterr().out
    assert "check-adapter: PASS (16 runs, each twice)" in out and "never fits" in out
    assert not (tmp_path / "found").exists() or not any((tmp_path / "found").iterdir())


@pytest.mark.parametrize("name,words", [("My-Engine", "NAME: expected lower-case"),
                                        ("taken", "exists: not overwritten")])
def test_new_adapter_refuses_a_bad_name_or_an_existing_file(tmp_path, capsys, name, words) -> None:
    (tmp_path / "taken_adapter.py").write_text("# mine\n")
    assert main(["new-adapter", name, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert (tmp_path / "taken_adapter.py").read_text() == "# mine\n"


def adapter_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "adapter_under_test.py"
    path.write_text(body)
    return str(path)


def test_check_adapter_fails_a_broken_protocol(tmp_path, capsys) -> None:
    code = main(["check-adapter", "--adapter", f"{ROOT / 'tests' / 'broken_adapters.py'}:NoneStep",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "protocol: step returns a list of events" in out and "check-adapter: FAIL" in out


def test_check_adapter_fails_a_broken_property_with_a_counterexample_that_replays(tmp_path, capsys) -> None:
    """The toy scheduler leaking a block: a kv-conservation finding, written, and
    the file replays to it."""
    spec = adapter_file(tmp_path, "from functools import partial\nfrom tests.toy_scheduler import ToyScheduler\n"
                                  "leaky = partial(ToyScheduler, bugs=frozenset({'leak'}))\n")
    assert main(["check-adapter", "--adapter", f"{spec}:leaky", "--out", str(tmp_path / "found")]) == 1
    out = capsys.readouterr().out
    assert "check-adapter: FAIL" in out and "kv-" in out
    written = sorted((tmp_path / "found").glob("*.json"))
    assert written and load_workload(written[0]).extra["property"].startswith("kv-")
    assert main(["replay", str(written[0]), "--adapter", f"{spec}:leaky"]) == 1
    assert "REPRODUCED" in capsys.readouterr().out


def test_check_adapter_fails_a_system_that_is_not_deterministic(tmp_path, capsys) -> None:
    """A skeleton whose fake LM answers from a counter that lives across runs."""
    main(["new-adapter", "drifty", "--out", str(tmp_path)])
    path = tmp_path / "drifty_adapter.py"
    text = path.read_text().replace("token = int(hashlib.sha256(repr(job[\"tokens\"]).encode()).hexdigest(), 16) % 64",
                                    "token = next(DRIFT) % 64")
    path.write_text(text.replace("import hashlib\n", "import hashlib\nimport itertools\n")
                    .replace("\nclass DriftyEngine", "\nDRIFT = itertools.count()\n\n\nclass DriftyEngine"))
    assert main(["check-adapter", "--adapter", f"{path}:DriftySUT", "--out", str(tmp_path / "found")]) == 1
    assert "not deterministic: the two runs differ from step" in capsys.readouterr().out


def test_the_plain_engine_profile_pins_the_looped_fields() -> None:
    # (what a system without "lora", "spec", "pause" and "async_scheduling" runs)
    no_features = {"max_loras": 1, "spec_tokens": 0, "pause": "off", "async_scheduling": False}
    assert Capabilities().pinned == {**PLAIN_ENGINE, **no_features}
    assert Capabilities(pinned={"block_size": 16}).pinned == {**PLAIN_ENGINE, **no_features, "block_size": 16}
    assert Capabilities(looped=True).pinned == no_features
    assert Capabilities(looped=True, features=("lora", "spec", "pause", "async_scheduling")).pinned == {}
    system = types.SimpleNamespace(add=id, abort=id, step=id, observe=id,
                                   capabilities=Capabilities(pinned={"num_loops": 2}))
    with pytest.raises(ProtocolError, match="capabilities.looped False"):
        check_sut(system)


def test_code_names_a_module_loaded_without_a_spec(tmp_path, monkeypatch) -> None:
    """An engine run from its source tree under a stub package (no __spec__)."""
    (tmp_path / "engine_src").mkdir()
    stub = types.ModuleType("stub_engine_pkg")
    stub.__path__ = [str(tmp_path / "engine_src")]
    stub.__spec__ = None
    monkeypatch.setitem(sys.modules, "stub_engine_pkg", stub)
    assert code_paths(("stub_engine_pkg",)) == (str((tmp_path / "engine_src").resolve()) + "/",)


def test_turnsched_has_a_short_plain_adapter_that_passes_and_runs(tmp_path, capsys) -> None:
    """The adapter of a scheduler loopcheck had never seen: under 150 lines, no
    looped vocabulary, passes check-adapter; a fuzz campaign and a tiny-scope
    exploration run on it and find nothing."""
    assert len(TURNSCHED.read_text().splitlines()) < 150 and looped_vocabulary(TURNSCHED) == []
    factory = f"{TURNSCHED}:TurnschedSUT"
    assert main(["check-adapter", "--adapter", factory, "--out", str(tmp_path / "check")]) == 0
    assert main(["fuzz", "--adapter", factory, "--budget-seconds", "8", "--seed", "1",
                 "--out", str(tmp_path / "fuzz")]) == 0
    assert main(["explore", "--adapter", factory, "--scope", "tiny", "--out", str(tmp_path / "explore")]) == 0
    out = capsys.readouterr().out
    assert "CERTIFICATE: no finding in any workload of scope tiny" in out
    certificate = json.loads((tmp_path / "explore" / "certificate.json").read_text())
    assert certificate["findings"] == [] and certificate["scope"]["name"] == "tiny"
