"""The documentation says what the code does: the command reference's usage
blocks are the commands' own --help, every command has one, and the README
stays short enough to read in five minutes."""

from __future__ import annotations

import re
from pathlib import Path

from loopcheck.cli import help_texts
from scripts.command_reference import REFERENCE, regenerated

ROOT = Path(__file__).parent.parent


def test_the_command_reference_is_the_help_of_every_command() -> None:
    text = REFERENCE.read_text()
    assert regenerated(text) == text, "docs/commands.md is out of date: run python scripts/command_reference.py"
    documented = re.findall(r"<!-- usage: (loopcheck(?: [\w-]+)?) -->", text)
    assert sorted(documented) == sorted(help_texts())


def test_a_drifted_block_is_noticed() -> None:
    text = REFERENCE.read_text().replace("usage: loopcheck fuzz [-h]", "usage: loopcheck fuzz [-x]", 1)
    assert regenerated(text) != text


def test_the_readme_is_at_most_120_lines() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 120
