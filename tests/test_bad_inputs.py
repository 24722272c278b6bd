"""The bad-input corpus: every command, given a bad file or flag, answers with one
error line naming what is wrong and exit 2: no traceback, no hang, no silent pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopcheck.cli import main

EXAMPLE = Path(__file__).parent.parent / "examples" / "livelock_min.json"
GOOD = json.loads(EXAMPLE.read_text())
LATE = max(GOOD["requests"], key=lambda r: r.get("arrival", 0))   # (a request that arrives after step 0)


def doc(config: dict | None = None, request: dict | None = None, **top) -> str:
    data = json.loads(json.dumps(GOOD))
    data["config"].update(config or {})
    data["requests"][0].update(request or {})
    data.update(top)
    return json.dumps(data)


FILES = {  # name -> (file text or bytes, words the error line must contain)
    "binary": (b"\xff\xfe\x00", "not UTF-8"),
    "latin1": ("caf\xe9".encode("latin-1"), "not UTF-8"),
    "deep": ("[" * 100_000, "nested too deeply"),
    "not-json": ("{", "not valid JSON"),
    "duplicate-key": ('{"schema": "loopcheck/workload@1", "schema": "x"}', "appears twice"),
    "nan": (doc({"exit_threshold": 0.5}).replace("0.5", "NaN"), "NaN"),
    "array": ("[]", "document: must be a JSON object"),
    "schema": (doc(schema="loopcheck/workload@9"), "schema"),
    "unknown-config-key": (doc({"blocks": 3}), "config.blocks"),
    "huge-pool": (doc({"num_blocks": 10**30}), "config.num_blocks"),
    "string-size": (doc({"block_size": "2"}), "config.block_size"),
    "bool-threshold": (doc({"exit_threshold": True}), "config.exit_threshold"),
    "huge-vocab": (doc({"vocab_size": 10**30}), "config.vocab_size"),
    "stop-token": (doc(request={"stop_token": 1_000_000}), "stop_token"),
    "token-range": (doc(request={"prompt": [1, 64]}), "prompt[1]"),
    "far-arrival": (doc(request={"arrival": 10**12}), "arrival"),
    "abort-before-arrival": (doc(request={"arrival": 5, "abort_at": 2}), "abort_at"),
    "negative-tokens": (doc(request={"max_tokens": -1}), "max_tokens"),
    "huge-priority": (doc(request={"priority": 2**40}), "priority"),
    "empty-prompt": (doc(request={"prompt": []}), "prompt"),
    "duplicate-id": (doc(request={"id": GOOD["requests"][1]["id"]}), "duplicate request id"),
    "unknown-request-key": (doc(request={"colour": 1}), "colour"),
    # a counterexample's record (model/record.py): each field typed, and within the file's trace and requests
    "cycle-string": (doc(property="livelock", cycle="x"), "cycle: must be an object"),
    "cycle-negative": (doc(cycle={"start": -1, "length": 1}), "cycle.start"),
    "cycle-empty": (doc(cycle={"start": 0, "length": 0}), "cycle.length"),
    "cycle-past-trace": (doc(trace=[[], []], cycle={"start": 1, "length": 2}), "past the trace"),
    "step-string": (doc(step="3"), "step: must be a step number"),
    "step-past-trace": (doc(trace=[[]], step=4), "step: 4 lies past the trace"),
    "trace-not-list": (doc(trace={"0": []}), "trace: must be a list"),
    "trace-unknown-kind": (doc(trace=[[["teleport", GOOD["requests"][0]["id"]]]]), "trace[0][0]: unknown event kind"),
    "trace-stranger": (doc(trace=[[["arrive", "nobody"]]]), "request 'nobody' is not one of"),
    "trace-rid-list": (doc(trace=[[["arrive", []]]]), "request [] is not one of"),
    "trace-arity": (doc(trace=[[["admit", GOOD["requests"][0]["id"]]]]), "admit carries 1 fields"),
    "trace-before-arrival": (doc(trace=[[["arrive", LATE["id"]]]]), f"before it arrives (step {LATE['arrival']})"),
    "property-number": (doc(property=7), "property: must be a non-empty string"),
}
COMMANDS = (["simulate"], ["simulate", "--adapter", "torch"], ["replay"], ["explore"])


def one_error_line(capsys, words: str) -> None:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("loopcheck "), err
    assert ": error: " in lines[0] and words in lines[0], lines[0]


@pytest.mark.parametrize("name", sorted(FILES))
def test_bad_files(name, tmp_path, capsys) -> None:
    content, words = FILES[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for command in COMMANDS:
        assert main([command[0], str(path), *command[1:]]) == 2
        one_error_line(capsys, words)


def test_missing_files_and_folders(tmp_path, capsys) -> None:
    for path, words in ((tmp_path / "none.json", "no such file"), (tmp_path, "not a regular file")):
        assert main(["simulate", str(path)]) == 2
        one_error_line(capsys, words)


def test_a_pool_too_large_for_the_torch_engine(tmp_path, capsys) -> None:
    path = tmp_path / "big.json"
    path.write_text(doc({"num_blocks": 2**19, "kv_layout": "shared"}))
    assert main(["simulate", str(path), "--adapter", "torch"]) == 2
    one_error_line(capsys, "at most 65536 token positions")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_does_not_hang(tmp_path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "loopcheck.cli", "simulate", str(fifo)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "not a regular file" in done.stderr


def flag_cases(tmp: Path) -> list[tuple[list[str], str]]:
    regular = tmp / "file.txt"
    regular.write_text("x")
    ex = str(EXAMPLE)
    return [
        (["simulate", ex, "--max-steps", "0"], "--max-steps"),
        (["simulate", ex, "--trace"], "--trace"),
        (["replay", ex, "--max-steps", "0"], "--max-steps"),
        (["replay", ex, "--plot", str(tmp / "nowhere" / "p.png")], "--plot"),
        (["replay", ex, "--plot", str(tmp / "p.txt")], "--plot"),
        (["fuzz", "--budget-seconds", "nan"], "--budget-seconds"),
        (["fuzz", "--budget-seconds", "inf"], "--budget-seconds"),
        (["fuzz", "--budget-seconds", "0"], "--budget-seconds"),
        (["fuzz", "--workers", "0"], "--workers"),
        (["fuzz", "--out", str(regular / "sub")], "--out"),
        (["fuzz", "--out", str(regular)], "--out"),
        (["fuzz", "--db", str(regular)], "--db"),
        (["fuzz", "--db", "redis://127.0.0.1:1/0"], "--db"),
        (["fuzz", "--db", "redis://:x:y:z/abc"], "--db"),
        (["fuzz", "--shape", "colour=on"], "--shape"),
        (["fuzz", "--shape", "aborts=7"], "--shape"),
        (["fuzz", "--adapter", "nonsense"], "--adapter"),
        (["verify", "--fuzz-seconds", "nan"], "--fuzz-seconds"),
        (["prove", "--requests", "1"], "--requests"),
        (["prove", "--steps", "0"], "--steps"),
        (["prove", "--junit", str(tmp)], "--junit"),
        (["explore", ex, "--spread", "-1"], "--spread"),
        (["explore", ex, "--out", str(regular)], "--out"),
        (["explore", ex, "--merge", "--workers", "2"], "--merge"),
    ]


def test_bad_flags(tmp_path, capsys) -> None:
    for argv, words in flag_cases(tmp_path):
        assert main(argv) == 2, argv
        one_error_line(capsys, words)


def test_every_flag_has_help_and_every_command_its_exit_codes() -> None:
    import argparse

    from loopcheck.cli import _parser

    parser, _ = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert command.description and "exit codes" in (command.epilog or ""), name
        assert command.description.endswith("."), f"{name}: a whole sentence, not its first line"
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest}"
