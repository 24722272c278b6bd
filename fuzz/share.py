"""What campaigns running at once on several machines share besides their example
database (docs/cluster.md): the signatures found, so that one bug is shrunk by one
campaign only, and each finding's files, so that they reach the run's output
folder the moment they are written. A campaign without a share (one machine, or
worker processes sharing a folder) finds, shrinks and keeps its findings itself."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hypothesis.database import ExampleDatabase

from loopcheck.checks.suite import CheckSet

if TYPE_CHECKING:
    from loopcheck.fuzz.campaign import Finding


class Share(Protocol):
    """One campaign's handle on what the run's campaigns share; `calls` counts
    what the campaign asked of it (by kind, and the bytes its fetches brought)."""

    calls: Counter[str]

    def database(self) -> ExampleDatabase:
        """The run's example database (Hypothesis' examples, the corpus, directed
        failures), the same for every campaign."""

    def claim(self, signature: str, checks: CheckSet, found: Path) -> str | None:
        """None if this campaign is the first of the run to find `signature` (it
        then shrinks it; its file as found, `found`, and the `checks` it was found
        with are kept for the run should this campaign be lost before it is
        done); else the name of the campaign that found it first."""

    def publish(self, finding: Finding) -> None:
        """The claimed finding, shrunk and written (its counterexample file with
        it), for the run's summary and output folder."""
