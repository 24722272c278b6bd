"""What a fuzz run's campaigns share on a Ray cluster (fuzz/share.py, docs/cluster.md):
one actor, the hub, on the driver's machine and in its working folder. It holds the
run's example database (the one `--db` names, opened there: Hypothesis' examples,
the corpus, directed failures), the signatures found and which campaign claimed
each, and it writes each finding's files into the run's output folder the moment
a campaign sends them, wherever the campaign runs."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis.database import ExampleDatabase

from loopcheck.checks.suite import CheckSet
from loopcheck.fuzz.campaign import Finding, open_database
from loopcheck.fuzz.machine import LAST_FAILURE


class Hub:
    """The state of the hub actor (one per run): the database, the claims, each
    campaign's published findings and the checks of the one it is shrinking."""

    def __init__(self, cwd: str, db: str | None, out: str) -> None:
        os.chdir(cwd)   # (the campaigns name their files relative to the driver's working folder)
        self.database = open_database(db, Path(out))
        self.claims: dict[str, str] = {}               # signature -> the campaign that found it first
        self.shrinking: dict[str, CheckSet] = {}       # campaign -> checks of the finding it shrinks
        self.findings: dict[str, list[Finding]] = {}   # campaign -> its findings, shrunk and written

    def save(self, key: bytes, value: bytes) -> None:
        self.database.save(key, value)

    def fetch(self, key: bytes) -> list[bytes]:
        return list(self.database.fetch(key))

    def delete(self, key: bytes, value: bytes) -> None:
        self.database.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.database.move(src, dest, value)

    def claim(self, signature: str, campaign: str, checks: CheckSet, found: str, data: bytes) -> str | None:
        """None, with the file as found written at `found`, if `campaign` is the
        first to claim `signature`; else the campaign that claimed it."""
        if signature in self.claims:
            return self.claims[signature]
        self.claims[signature] = campaign
        self.shrinking[campaign] = checks
        write(Path(found), data)
        return None

    def publish(self, campaign: str, finding: Finding, data: bytes, found: str) -> None:
        """Write the finding's counterexample file (its bytes `data`) in place of
        its file as found (`found`) and keep the finding."""
        write(finding.counterexample, data)
        Path(found).unlink(missing_ok=True)
        self.findings.setdefault(campaign, []).append(finding)
        self.shrinking.pop(campaign, None)

    def left(self, campaign: str) -> tuple[list[Finding], CheckSet | None]:
        """What a lost campaign left: its findings, and the checks of the one it
        was shrinking (its file as found is in its folder) or None."""
        return self.findings.get(campaign, []), self.shrinking.get(campaign)


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def open_hub(ray: Any, db: str | None, out: Path) -> Any:
    """A hub actor for a run writing in `out` with the database `db`, started on
    this (the driver's) node and taking no CPU slot from the campaigns."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0, scheduling_strategy=here)(Hub).remote(os.getcwd(), db, str(out))


class HubDatabase(ExampleDatabase):
    """The hub's database as a campaign's example database: saves, deletions and
    moves are sent without waiting (the hub runs one caller's calls in the order
    sent, so a later fetch sees them); a fetch waits for the answer. `calls`
    counts them (and the bytes fetches bring)."""

    def __init__(self, hub: Any, calls: Counter[str]) -> None:
        super().__init__()
        self.hub, self.calls = hub, calls

    def save(self, key: bytes, value: bytes) -> None:
        self.calls["save"] += 1
        self.hub.save.remote(key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        import ray

        values = ray.get(self.hub.fetch.remote(key))
        self.calls["fetch"] += 1
        self.calls["fetched bytes"] += sum(len(v) for v in values)
        yield from values

    def delete(self, key: bytes, value: bytes) -> None:
        self.calls["delete"] += 1
        self.hub.delete.remote(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.calls["move"] += 1
        self.hub.move.remote(src, dest, value)


@dataclass
class ClusterShare:
    """Campaign `campaign`'s handle on the hub (fuzz/share.py's Share), counting
    its calls by kind (`calls`). With `redis`, a Redis URL every node reaches,
    the campaign uses that database itself, not through the hub (a Redis server
    serves far more calls a second than one actor)."""

    hub: Any
    campaign: str
    redis: str | None = None
    calls: Counter[str] = field(default_factory=Counter)

    def database(self) -> ExampleDatabase:
        return HubDatabase(self.hub, self.calls) if self.redis is None else open_database(self.redis, Path())

    def claim(self, signature: str, checks: CheckSet, found: Path) -> str | None:
        import ray

        self.calls["claim"] += 1
        return ray.get(self.hub.claim.remote(signature, self.campaign, checks, str(found), found.read_bytes()))

    def publish(self, finding: Finding) -> None:
        import ray

        self.calls["publish"] += 1
        ray.get(self.hub.publish.remote(self.campaign, finding, finding.counterexample.read_bytes(),
                                        str(finding.counterexample.parent / LAST_FAILURE)))
