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


def words_per_sentence(text: str) -> float:
    """The mean words per sentence of a page's prose: code blocks, tables and
    headings left out; a sentence ends at . ! ? ; or : before a capital, a code
    span or a bracket, and each list item is one."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = "\n".join(line for line in text.splitlines() if not line.startswith(("|", "#")))
    prose = re.sub(r"\n\s*- ", "\n. ", prose).replace("\n", " \n")
    sentences = [s for s in re.split(r"(?<=[.!?;:])\s+(?=[A-Z`(\[])|\n\. ", prose) if len(s.split()) > 2]
    return sum(len(s.split()) for s in sentences) / len(sentences)


def test_the_checking_guide_and_engine_chapters_keep_short_sentences() -> None:
    pages = [ROOT / "docs" / "checking.md", *sorted((ROOT / "docs" / "engines").glob("*.md"))]
    means = {page.name: round(words_per_sentence(page.read_text()), 1) for page in pages}
    assert {name: mean for name, mean in means.items() if mean > 20} == {}, means
