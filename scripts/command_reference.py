"""Write the usage blocks of docs/commands.md from the command line's own help
(`loopcheck.cli.help_texts`), so the reference cannot drift from `--help`: each
block follows a marker line `<!-- usage: loopcheck COMMAND -->`. With --check,
change nothing and exit 1 when a block differs (tests/test_docs.py runs that).

Usage: python scripts/command_reference.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from loopcheck.cli import help_texts

REFERENCE = Path(__file__).parent.parent / "docs" / "commands.md"
BLOCK = re.compile(r"(<!-- usage: (loopcheck(?: [\w-]+)?) -->\n)```text\n.*?```\n", re.S)


def regenerated(text: str) -> str:
    """`text` with every usage block rewritten from the current help."""
    helps = help_texts()
    return BLOCK.sub(lambda m: f"{m.group(1)}```text\n{helps[m.group(2)]}```\n", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is out of date; write nothing")
    args = parser.parse_args()
    text = REFERENCE.read_text()
    new = regenerated(text)
    if args.check:
        sys.exit(0 if new == text else 1)
    REFERENCE.write_text(new)


if __name__ == "__main__":
    main()
