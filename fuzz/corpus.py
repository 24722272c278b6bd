"""The corpus: workloads whose runs showed something no earlier run of the
campaign showed (fuzz/features.py), and rounds of structured mutations of them
(fuzz/mutate.py), aimed at what is rare: each round picks a target among the
rarest features seen so far (code edges and event patterns, counted over every
run), and mutates entries whose runs showed it, so that the search stays near
the rare state and goes a step further from there (as FairFuzz aims AFL at
rare branches); a share of each round mutates entries picked by energy, the
rarity of what they showed first.

Guidance from the system itself, with no model of it: it works for any system
behind the protocol. Entries are kept in the example database under a key of
the system's, so campaigns on several machines (a shared Redis database) grow
one corpus; a campaign runs the entries it finds there first.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis.database import ExampleDatabase

from loopcheck.fuzz.features import NOVELTY_ONLY, Feature
from loopcheck.fuzz.mutate import Limits, arrive_mid_prompt, follow_up, mutate, splice, stop_at_output
from loopcheck.fuzz.strategies import ON
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import Workload, workload_from_json

LOADED = 200   # entries a campaign takes from the database at most (the first, in sorted order)
RAREST = 16    # a round's target is one of this many rarest features
SPLICED = 0.25  # the share of mutants that start from a parent spliced with another entry
READ_OFF = 0.5  # the share of the others that are one edit read off the parent's run (`run_edits`)


@dataclass
class Entry:
    workload: Workload
    new: frozenset[Feature]                       # the features its run showed first
    outputs: dict[str, tuple[int, ...]]           # the tokens its run gave each request
    mid_prompt: list[tuple[int, str]]             # (step, request) where its run had a prompt half done
    held: list[int]                               # the blocks its run held after each step


class Corpus:
    """Entries in the order found; over every run noted, how many showed each
    feature; and, per feature one can aim at, the entries whose runs showed it.
    `key` names the system's entries in `database` (None: kept only in memory).
    Nothing depends on the order of a set of features (string hashes differ
    from process to process): the same seed and runs give the same rounds."""

    def __init__(self, limits: Limits, seed: int, database: ExampleDatabase | None = None,
                 key: bytes | None = None, per_round: int = 12) -> None:
        self.limits, self.database, self.key, self.per_round = limits, database, key, per_round
        self.entries: list[Entry] = []
        self.counts: Counter[Feature] = Counter()
        self.showing: dict[Feature, list[int]] = {}   # aimable feature -> entries whose runs showed it
        self.rng = random.Random(seed)
        self.rounds = 0

    def note(self, workload: Workload, features: set[Feature],
             outputs: dict[str, tuple[int, ...]] | None = None,
             mid_prompt: list[tuple[int, str]] | None = None, held: list[int] | None = None) -> bool:
        """Count a run's features; keep its workload, with the tokens its run gave
        each request, if it showed a new one (and save it in the database).
        Whether it was kept."""
        new = frozenset(f for f in features if f not in self.counts)
        self.counts.update(features)
        if not new:
            return False
        index = len(self.entries)
        self.entries.append(Entry(workload, new, outputs or {}, mid_prompt or [], list(held or ())))
        aimable = [f for f in features if f[0] not in NOVELTY_ONLY]
        for f in sorted((f for f in aimable if f not in self.showing), key=repr):   # (the same order in any process)
            self.showing[f] = []
        for f in aimable:
            self.showing[f].append(index)
        if self.database is not None and self.key is not None:
            self.database.save(self.key, json.dumps(workload.to_json(), sort_keys=True).encode())
        return True

    def saved(self) -> list[Workload]:
        """The workloads earlier campaigns kept for this system (at most LOADED;
        those no longer valid are skipped)."""
        if self.database is None or self.key is None:
            return []
        out = []
        for value in sorted(self.database.fetch(self.key))[:LOADED]:
            try:
                w = workload_from_json(json.loads(value))
            except (WorkloadError, ValueError):
                continue
            if self.limits.allows(w):
                out.append(w)
        return out

    def energy(self, entry: Entry) -> float:
        """How much an entry is worth mutating: the rarity of what it showed first."""
        return math.fsum(1.0 / self.counts[f] for f in entry.new)   # (exact: the same in any order)

    def target(self) -> Feature | None:
        """One of the RAREST aimable features by how many runs showed them (ties in
        the order first seen), chosen at random; None before any."""
        if not self.showing:
            return None
        rarest = sorted(self.showing, key=self.counts.__getitem__)[:RAREST]
        return self.rng.choice(rarest)

    def next_round(self) -> list[Workload]:
        """`per_round` mutants (fewer where mutation keeps failing): half of
        entries that showed the round's target, half of entries picked by
        energy, a share SPLICED of them first spliced with another entry picked
        by energy; none while the corpus is empty. The same for the same seed,
        entries and counts."""
        self.rounds += 1
        if not self.entries:
            return []
        aimed = self.showing.get(self.target(), [])
        parents = [self.entries[self.rng.choice(aimed)] for _ in range(self.per_round // 2)] if aimed else []
        weights = [self.energy(e) for e in self.entries]
        parents += self.rng.choices(self.entries, weights=weights, k=self.per_round - len(parents))
        out: list[Workload] = []
        for parent in parents:
            if self.rng.random() < SPLICED and len(self.entries) > 1:
                spliced = splice(parent.workload, self.rng.choices(self.entries, weights=weights)[0].workload, self.rng)
                child = mutate(spliced, self.rng, self.limits)
            else:
                edits = self.run_edits(parent) if self.rng.random() < READ_OFF else []
                child = self.rng.choice(edits)(parent) if edits else None
                if child is None or child == parent.workload or not self.limits.allows(child):
                    child = mutate(parent.workload, self.rng, self.limits)
            if child is not None:
                out.append(child)
        return out

    def run_edits(self, parent: Entry) -> list[Callable[[Entry], Workload]]:
        """The edits that read what the parent's run did and the shape allows: a
        stop token it produced, a next turn of a request (its prompt and outputs),
        an arrival while a prompt was half done. Each is a mutant by itself (random
        edits on top would move the run away from what it read)."""
        rng, shape = self.rng, self.limits.shape
        edits: list[Callable[[Entry], Workload]] = []
        if parent.outputs and shape.stop_tokens == ON:
            edits.append(lambda e: stop_at_output(e.workload, e.outputs, rng))
        if parent.outputs and shape.prefixes == ON:
            edits.append(lambda e: follow_up(e.workload, e.outputs, rng))
        if parent.mid_prompt:
            edits.append(lambda e: arrive_mid_prompt(e.workload, e.mid_prompt, e.held, rng, self.limits))
        return edits
