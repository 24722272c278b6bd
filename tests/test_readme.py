"""Every command in README.md is run by a test: the install, vLLM-extra and test
commands are the ones CI runs (.ci/run), and each `loopcheck` line is run here as
written, expecting the exit status its comment gives (`# exits N`; else 0), from the
repository's root. `loopcheck verify` alone gets a seed and a work bound added
(--seed 1 --max-examples 60), so that its verdict does not depend on the machine's
speed, and runs under `-m slow` only (it takes about 3.5 minutes on 2 cores; the
default suite runs its proofs in `loopcheck prove`'s test, tests/test_proofs.py, and
verify's table and verdict with an adapter). Lines that need an engine's extra
(vLLM, LMDeploy, SGLang) skip, visibly, without it."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from loopcheck.cli import main

ROOT = Path(__file__).parent.parent
EXITS = re.compile(r"\s+#\s*exits (\d+)\s*$")
WORK_BOUND = ["--seed", "1", "--max-examples", "60"]
MAIN_JOB = "loopcheck verify"   # README's second line, as written
ENGINES = ("vllm", "lmdeploy", "sglang")   # the shipped adapters of real engines, each with its extra


def readme_commands() -> list[str]:
    """The lines of README.md's ```sh blocks, in order."""
    text = (ROOT / "README.md").read_text()
    return [line.strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S)
            for line in block.splitlines() if line.strip()]


def ci_commands() -> set[str]:
    """What .ci/run runs, with its quiet flags and `bash ` prefixes dropped."""
    lines = (ROOT / ".ci/run").read_text().splitlines()
    return {re.sub(r"^bash ", "", line.replace(" -q", "")).split(" 2>&1")[0].strip() for line in lines}


def test_the_readme_has_the_commands_this_file_runs() -> None:
    commands = readme_commands()
    assert commands[:3] == ["python3 -m pip install -c constraints.txt -e '.[dev]'", MAIN_JOB,
                            "python3 -m pytest -q"]
    assert sum(c.startswith("loopcheck ") for c in commands) >= 8


@pytest.mark.parametrize("line", [c for c in readme_commands() if not c.startswith("loopcheck ")])
def test_the_install_and_test_commands_are_what_ci_runs(line: str) -> None:
    assert line.replace(" -q", "") in ci_commands()


@pytest.mark.parametrize("line", [pytest.param(c, marks=pytest.mark.slow) if c == MAIN_JOB else c
                                  for c in readme_commands() if c.startswith("loopcheck ")])
def test_each_loopcheck_command_of_the_readme_runs(line: str, monkeypatch, capsys) -> None:
    for engine in ENGINES:
        if f"--adapter {engine}" in line and importlib.util.find_spec(engine) is None:
            pytest.skip(f"{engine} is not installed (scripts/install-engine.sh {engine})")
    found = EXITS.search(line)
    expected = int(found.group(1)) if found else 0
    argv = shlex.split(EXITS.sub("", line))[1:]
    argv += WORK_BOUND if line == MAIN_JOB else []
    monkeypatch.chdir(ROOT)
    code = main(argv)
    out = capsys.readouterr()
    assert code == expected, out.out[-3000:] + out.err[-2000:]
