"""`loopcheck simulate`: exit codes, JSON shape, banner, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from loopcheck.cli import main
from loopcheck.driver import driver as sut_driver

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "livelock.json")


def test_livelock_exits_1_and_guarded_exits_0(capsys) -> None:
    assert main(["simulate", EXAMPLE]) == 1
    out = capsys.readouterr().out
    assert "NOT drained after 500 steps" in out and "reproduce: loopcheck simulate" in out
    assert main(["simulate", EXAMPLE, "--policy", "guarded", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    for key in ("finished", "total", "steps", "preemptions", "resumptions", "kv_blocks_held",
                "drained", "requests"):
        assert key in data
    assert data["drained"] and data["finished"] == data["total"] == 10
    assert set(data["requests"]["r0"]) == {"token_ids", "exit_depths", "finish_reason"}
    assert "seed: none (deterministic" in captured.err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    bad = tmp_path / "w.json"
    bad.write_text(json.dumps({"schema": "loopcheck/workload@1", "config": {"num_blocks": -3},
                               "requests": []}))
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["loopcheck simulate: error: config.num_blocks: must be in [1, 1048576], got -3"]
    assert main(["simulate", str(tmp_path / "nope.json")]) == 2
    assert main(["simulate", EXAMPLE, "--max-steps", "0"]) == 2


def test_oversized_request_is_rejected_not_hung(tmp_path, capsys) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"schema": "loopcheck/workload@1", "config": {},
                                "requests": [{"id": "big", "prompt": [1] * 30, "max_tokens": 20},
                                             {"id": "ok", "prompt": [1], "max_tokens": 2}]}))
    assert main(["simulate", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"]["big"]["finish_reason"] == "rejected"
    assert data["requests"]["ok"]["finish_reason"] == "length"


def test_torch_engine_same_json_shape_and_no_preemption_reference(capsys) -> None:
    assert main(["simulate", EXAMPLE, "--adapter", "torch", "--policy", "guarded", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert main(["simulate", EXAMPLE, "--adapter", "torch", "--no-preemption", "--json"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert run["engine"] == "torch" and run["drained"] and run["kv_blocks_held"] == 0
    assert run["preemptions"] >= 1 and ref["preemptions"] == 0
    assert run["requests"] == ref["requests"]
    assert main(["simulate", EXAMPLE, "--adapter", "torch", "--max-steps", "100"]) == 1


def test_a_system_that_does_not_return_is_a_hang_exit_1(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sut_driver, "CALL_TIMEOUT", 0.2)
    spins = f"{Path(__file__).parent / 'broken_adapters.py'}:Spins"
    assert main(["simulate", EXAMPLE, "--adapter", spins]) == 1
    assert "HANG at step 0: step() did not return within 0.2 s (stopped at " in capsys.readouterr().out
    assert main(["simulate", EXAMPLE, "--adapter", spins, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["crash"] is None and data["hang"].startswith("step() did not return within 0.2 s")


def test_max_seconds_ends_a_long_run_incomplete(capsys) -> None:
    """A livelock given a million steps stops at --max-seconds: INCOMPLETE, exit 1,
    what ran so far reported (its steps, in the text and the JSON); a bound of 0
    is bad input."""
    assert main(["simulate", EXAMPLE, "--policy", "unguarded", "--max-steps", "1000000", "--max-seconds", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "INCOMPLETE: --max-seconds 0.5 passed" in out and "NOT drained" not in out
    assert main(["simulate", EXAMPLE, "--policy", "unguarded", "--max-steps", "1000000", "--max-seconds", "0.2",
                 "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    # (stopped long before its million steps: at about 8,000 steps a second here)
    assert data["incomplete"] == "INCOMPLETE: --max-seconds 0.2 passed" and 0 < data["steps"] < 1_000_000
    assert main(["simulate", EXAMPLE, "--policy", "guarded", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["incomplete"] is None
    assert main(["simulate", EXAMPLE, "--max-seconds", "0"]) == 2
    assert "--max-seconds: must be > 0" in capsys.readouterr().err


def test_max_seconds_cuts_a_step_or_a_build_that_never_ends(capsys) -> None:
    """--max-seconds ends the run inside a call into the system: a step that spins
    (long before the 10 s hang timeout) or a build that never ends is cut at the
    bound, INCOMPLETE, exit 1, not a hang; simulate and replay alike. (Neither
    would end otherwise: wall times are measured in docs/files.md, not here.)"""
    broken = Path(__file__).parent / "broken_adapters.py"
    for adapter, steps in ((f"{broken}:Spins", 0), (f"{broken}:BuildsForever", 0)):
        for command in (["simulate", "--json"], ["replay", "--json"]):
            assert main([*command, EXAMPLE, "--adapter", adapter, "--max-seconds", "0.5"]) == 1
            data = json.loads(capsys.readouterr().out)
            assert data["steps"] == steps and data["incomplete"], (command, data)   # (else it would never end)
            assert data.get("hang") is None and data.get("violation") is None


def test_a_costly_config_is_warned_about_before_the_run(tmp_path, capsys) -> None:
    """The torch engine says a config whose steps compute many tokens is slow:
    one warning line before simulate starts; none for the default config."""
    workload = json.loads(Path(EXAMPLE).read_text())
    workload["config"].update(max_num_batched_tokens=512, prefill_chunk_size=512)
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(workload))
    assert main(["simulate", str(path), "--adapter", "torch", "--max-steps", "1"]) == 1
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["loopcheck: warning: the torch engine: max_num_batched_tokens 512 lets one step compute that "
                        "many tokens, seconds a step (a call past 10 s is reported as a hang; --max-seconds bounds "
                        "the run)"]
    assert main(["simulate", EXAMPLE, "--adapter", "torch", "--max-steps", "1"]) == 1
    assert "warning" not in capsys.readouterr().err
