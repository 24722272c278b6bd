"""Plain-text tables and the run banner every command prints."""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def checks_not_run(not_run: Counter) -> list[dict]:
    """Campaign statistics' (check, why) -> runs, as JSON entries in a fixed order."""
    return [{"check": check, "why": why, "runs": runs} for (check, why), runs in sorted(not_run.items())]


def not_run_line(entries: list[dict], runs: int) -> str:
    """`checks_not_run` entries as one line of text, out of `runs` runs."""
    return "checks not run: " + "; ".join(f"{c['check']} in {c['runs']} of {runs} runs ({c['why']})"
                                          for c in entries)


def command_line(argv: Sequence[str]) -> str:
    return "loopcheck " + " ".join(shlex.quote(a) for a in argv)


def reproduce_line(argv: Sequence[str]) -> str:
    return "reproduce: " + command_line(argv)


LAST_REPRODUCE: list[str] = []   # the reproduce line of the running command, for interrupts


def banner(seed: int | None, argv: Sequence[str], stream=None) -> None:
    """Print the seed (None: the run draws nothing at random, so the same input
    gives the same run) and the one command that reproduces this run (to stderr
    when stdout carries JSON)."""
    out = stream or sys.stdout
    LAST_REPRODUCE[:] = [reproduce_line(argv)]
    print(f"seed: {seed}" if seed is not None else "seed: none (deterministic: same input, same run)", file=out)
    print(LAST_REPRODUCE[0], file=out, flush=True)


