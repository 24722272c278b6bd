"""The corpus: workloads whose runs showed something no earlier run of the
campaign showed (fuzz/features.py), and rounds of structured mutations of them
(fuzz/mutate.py), aimed at what is new and rare: every entry has half a round
of mutants to itself (as every AFL queue entry gets its turn), the newest first
(depth first: a deep window is reached through a chain of entries, each a step
further than the last); once every entry had its turn, each round picks a kind
of feature (code edges, or one kind of event pattern) and a target among its
rarest features seen so far (counted over every run; among the as rare, the
newest), and mutates entries whose runs showed it, so that the search stays near
the rare state and goes a step further from there (as FairFuzz aims AFL at rare
branches); a share of each round mutates entries picked by energy, the rarity of
what they showed first. Half of the mutants that do not splice two entries are
one edit read off the parent's own run (`Corpus.run_edits`). A campaign runs as
many mutants of the corpus as fresh examples (fuzz/campaign.py).

Guidance from the system itself, with no model of it: it works for any system
behind the protocol. Entries are kept in the example database under a key of
the system's, so campaigns on several machines (a shared Redis database) grow
one corpus; a campaign runs the entries it finds there first.
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis.database import ExampleDatabase

from loopcheck.fuzz.features import NOVELTY_ONLY, Feature
from loopcheck.fuzz.mutate import (
    Limits,
    RunNotes,
    abort_after_preemption,
    arrive_mid_prompt,
    follow_up,
    mutate,
    regeometry_preemption,
    splice,
    stop_at_output,
)
from loopcheck.fuzz.strategies import ON
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import Workload, workload_from_json

LOADED = 200   # entries a campaign takes from the database at most (the first, in sorted order)
RAREST = 4     # a round's target is one of this many rarest features of a kind
SPLICED = 0.25  # the share of mutants that start from a parent spliced with another entry
READ_OFF = 0.5  # the share of the others that are one edit read off the parent's run (`run_edits`)


def stored(database: ExampleDatabase, key: bytes, most: int | None = None) -> list[Workload]:
    """The workloads saved under `key` (the first `most`, in sorted order): each
    value a workload file's JSON (loopcheck/workload@1, docs/checking.md);
    one that does not load (damaged, or written by another version) is
    skipped, and one warning line on stderr says how many and why the first."""
    return loaded(sorted(database.fetch(key))[:most], key)


def loaded(values: list[bytes], key: bytes) -> list[Workload]:
    """The workloads of values saved under `key` (`stored`), in their order."""
    out, skipped = [], []
    for value in values:
        try:
            out.append(workload_from_json(json.loads(value)))
        except (WorkloadError, ValueError) as exc:   # (ValueError: not JSON, or not UTF-8)
            skipped.append(str(exc))
    if skipped:
        print(f"loopcheck: warning: skipped {len(skipped)} saved entr{'y' if len(skipped) == 1 else 'ies'} of "
              f"{key.decode(errors='replace')} that {'is' if len(skipped) == 1 else 'are'} not a valid workload "
              f"(the first: {skipped[0]})", file=sys.stderr)
    return out


@dataclass
class Entry:
    workload: Workload
    new: frozenset[Feature]                       # the features its run showed first
    run: RunNotes                                 # what its run did, for the edits read off it


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
        self.of_kind: dict[str, list[Feature]] = {}   # kind -> its aimable features, in the order first seen
        self.rng = random.Random(seed)
        self.rounds = 0
        self.unserved: list[int] = []                 # entries that have not had their turn, oldest first
        self.known: set[bytes] = set()                # entries in the database this campaign saved or took

    def note(self, workload: Workload, features: set[Feature], run: RunNotes | None = None) -> bool:
        """Count a run's features; keep its workload, with what its run did, if
        it showed a new one (and save it in the database). Whether it was kept."""
        new = frozenset(f for f in features if f not in self.counts)
        self.counts.update(features)
        if not new:
            return False
        index = len(self.entries)
        self.entries.append(Entry(workload, new, run or RunNotes()))
        self.unserved.append(index)
        aimable = [f for f in features if f[0] not in NOVELTY_ONLY]
        for f in sorted((f for f in aimable if f not in self.showing), key=repr):   # (the same order in any process)
            self.showing[f] = []
            self.of_kind.setdefault(f[0], []).append(f)
        for f in aimable:
            self.showing[f].append(index)
        if self.database is not None and self.key is not None:
            value = json.dumps(workload.to_json(), sort_keys=True).encode()
            self.known.add(value)
            self.database.save(self.key, value)
        return True

    def saved(self) -> list[Workload]:
        """The workloads earlier campaigns kept for this system (at most LOADED;
        those that are not valid workloads skipped, with a warning: `stored`;
        those outside this campaign's limits left out)."""
        if self.database is None or self.key is None:
            return []
        values = sorted(self.database.fetch(self.key))
        self.known.update(values)   # (those past the first LOADED are not arrivals either)
        return self.taken(values[:LOADED])

    def arrived(self) -> list[Workload]:
        """The entries other campaigns saved for this system (in the shared
        database) since this one last looked (at most LOADED, the first in
        sorted order; as `saved`): what every other campaign's runs showed first
        guides this one too. None where nothing came."""
        if self.database is None or self.key is None:
            return []
        return self.taken(sorted(set(self.database.fetch(self.key)) - self.known)[:LOADED])

    def taken(self, values: list[bytes]) -> list[Workload]:
        """The workloads of database `values`, noted as known, within the limits."""
        self.known.update(values)
        assert self.key is not None
        return [w for w in loaded(values, self.key) if self.limits.allows(w)]

    def energy(self, entry: Entry) -> float:
        """How much an entry is worth mutating: the rarity of what it showed first."""
        return math.fsum(1.0 / self.counts[f] for f in entry.new)   # (exact: the same in any order)

    def target(self) -> Feature | None:
        """A kind of feature at random (code edges, each kind of event pattern:
        each gets the same share of rounds, however many features it has), then
        one of its RAREST aimable features by how many runs showed them (among
        the as rare, the newest); None before any."""
        if not self.of_kind:
            return None
        kind = self.rng.choice(sorted(self.of_kind))
        features = self.of_kind[kind][::-1]   # newest first: a stable sort keeps them first among the as rare
        return self.rng.choice(sorted(features, key=self.counts.__getitem__)[:RAREST])

    def next_round(self) -> list[Workload]:
        """`per_round` mutants (fewer where mutation keeps failing): half of
        the newest entry that has not had its turn, or, where every entry had
        it, of entries that showed the round's target; half of entries
        picked by energy; a share SPLICED of them spliced with another entry
        picked by energy, then mutated; of the others a share READ_OFF one edit
        read off the parent's run (`run_edits`), the rest mutated; none while
        the corpus is empty. The same for the same seed, entries and counts."""
        self.rounds += 1
        if not self.entries:
            return []
        aimed = [self.unserved.pop()] if self.unserved else self.showing.get(self.target(), [])
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
                child = self.rng.choice(edits)() if edits else None
                if child is None or child == parent.workload or not self.limits.allows(child):
                    child = mutate(parent.workload, self.rng, self.limits)
            if child is not None:
                out.append(child)
        return out

    def run_edits(self, parent: Entry) -> list[Callable[[], Workload]]:
        """The edits that read what the parent's run did and the shape allows: a
        stop token it produced, a next turn of a request (its prompt and outputs),
        an arrival while a prompt was half done, a preemption of a half-done
        prompt with other page and chunk numbers, an abort the step after a
        preemption. Each is a mutant by itself (random edits on top would move
        the run away from what it read)."""
        rng, shape, run, w = self.rng, self.limits.shape, parent.run, parent.workload
        edits: list[Callable[[], Workload]] = []
        if run.outputs and shape.stop_tokens == ON:
            edits.append(lambda: stop_at_output(w, run.outputs, rng))
        if run.outputs and shape.prefixes == ON:
            edits.append(lambda: follow_up(w, run.outputs, rng))
        if run.mid_prompt:
            edits.append(lambda: arrive_mid_prompt(w, run.mid_prompt, run.held, rng, self.limits))
        if run.mid_prompt_preemptions:
            edits.append(lambda: regeometry_preemption(w, run.mid_prompt_preemptions, rng, self.limits))
        if run.preemptions and shape.aborts == ON and self.limits.can_abort:
            edits.append(lambda: abort_after_preemption(w, run.preemptions, rng))
        return edits
