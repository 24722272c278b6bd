"""What a fuzz run's campaigns share on a Ray cluster (fuzz/share.py, docs/cluster.md):
one actor, the hub, on the driver's node (where the driver is one; in the driver's
working folder where that node has it). It holds the run's example database (the
one `--db` names, opened there: Hypothesis' examples, the corpus, directed
failures), the signatures found and which campaign claimed each, and each
finding's files until the driver takes them (`Hub.take`, asked twice a second),
so that they reach the run's output folder here as they are written, wherever
the campaign runs."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis.database import ExampleDatabase

from loopcheck.checks.suite import CheckSet
from loopcheck.cluster import put
from loopcheck.fuzz.campaign import Finding, open_database


@dataclass(frozen=True)
class AsFound:
    """A claimed failure not yet published: the checks it was found with, the
    path of its file as found and that file's bytes."""

    checks: CheckSet
    path: str
    data: bytes


class Hub:
    """The state of the hub actor (one per run): the database, the claims, each
    campaign's published findings and the checks of the one it is shrinking."""

    def __init__(self, cwd: str, db: str | None, out: str) -> None:
        if Path(cwd).is_dir():   # (a folder database named relative to the driver's working folder)
            os.chdir(cwd)
        self.database = open_database(db, Path(out))
        self.claims: dict[str, str] = {}               # signature -> the campaign that found it first
        self.shrinking: dict[str, AsFound] = {}        # campaign -> the finding it shrinks, as found
        self.findings: dict[str, list[Finding]] = {}   # campaign -> its findings, shrunk and written
        self.untaken: list[tuple[str, bytes]] = []     # files for the driver: path, bytes

    def save(self, key: bytes, value: bytes) -> None:
        self.database.save(key, value)

    def fetch(self, key: bytes) -> list[bytes]:
        return list(self.database.fetch(key))

    def delete(self, key: bytes, value: bytes) -> None:
        self.database.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.database.move(src, dest, value)

    def claim(self, signature: str, campaign: str, checks: CheckSet, found: str, data: bytes) -> str | None:
        """None, with the file as found (its path `found`, its bytes `data`) and
        its checks kept until the campaign publishes it, if `campaign` is the
        first to claim `signature`; else the campaign that claimed it."""
        if signature in self.claims:
            return self.claims[signature]
        self.claims[signature] = campaign
        self.shrinking[campaign] = AsFound(checks, found, data)
        return None

    def publish(self, campaign: str, finding: Finding, data: bytes) -> None:
        """The finding's counterexample file (its bytes `data`) for the driver;
        the finding kept."""
        self.untaken.append((str(finding.counterexample), data))
        self.findings.setdefault(campaign, []).append(finding)
        self.shrinking.pop(campaign, None)

    def take(self) -> list[tuple[str, bytes]]:
        """The files sent since the driver last took them, in the order sent:
        (path, bytes)."""
        taken, self.untaken = self.untaken, []
        return taken

    def left(self, campaign: str) -> tuple[list[Finding], AsFound | None]:
        """What a lost campaign left: its findings, and the one it was
        shrinking, as found, or None."""
        return self.findings.get(campaign, []), self.shrinking.get(campaign)


def open_hub(ray: Any, db: str | None, out: Path) -> Any:
    """A hub actor for a run writing in `out` with the database `db`, taking no
    CPU slot from the campaigns, on the driver's node where the driver is one
    (through Ray Client, the node that serves it)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return ray.remote(num_cpus=0, scheduling_strategy=here)(Hub).remote(os.getcwd(), db, str(out))


def deliver(ray: Any, hub: Any) -> None:
    """Write here the files the hub holds for the driver (`Hub.take`), each at
    the path its campaign named, relative to this working folder (`cluster.put`)."""
    for name, data in ray.get(hub.take.remote()):
        put(Path(name), data)


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
        ray.get(self.hub.publish.remote(self.campaign, finding, finding.counterexample.read_bytes()))
