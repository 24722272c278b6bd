"""One bug, one finding: a campaign's findings grouped by cause, on evidence the
tool gathers itself.

A finding's *first departure* is what its counterexample shows first when it
is replayed with every check on, only the campaign's own `--ignore` kept (the
signatures keep-going added are dropped): the signatures of every rule broken at
the earliest step any is, the step at which the run leaves what the checks
allow. A crash or a hang departs at its own site. Two groups of findings (at
first one finding each) are one cause when their first departures share a rule,
when one group's counterexample departs first at the other's signature (it
shows the other's bug at its first step), or when a counterexample of each
group, run on past what it shows (each violation ignored in turn), shows a
signature of the other group; groups merge until no two are related. Two
crashes or hangs at different sites are never one cause, even through other
findings.

Limits: two bugs whose counterexamples break the same rule first are one group
(a leak and a double free that both first show as the same kv-conservation
rule), and so are two bugs that show at the same first step of one
counterexample. One bug whose counterexamples break different rules, neither
showing the other's, is two groups (a rule broken only later, as a livelock a
leak leads to, is not linked back). A flaky finding (not deterministic) shows
only its own signature. `python -m benchmarks.grouping` measures the rule on
planted bugs.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopcheck.checks.base import matches
from loopcheck.checks.signatures import PLACED
from loopcheck.checks.suite import CheckSet
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import Finding
from loopcheck.model.workload import load_workload
from loopcheck.sut.protocol import SutFactory


@dataclass(frozen=True)
class Group:
    """Findings of one cause: the rules their files break first (`cause`, the
    signatures, comma-separated) and the findings, in the order found."""

    cause: str
    findings: tuple[Finding, ...]

    @property
    def signatures(self) -> list[str]:
        return [f.violation.signature for f in self.findings]


@dataclass(frozen=True)
class Shown:
    """What a finding's file shows, replayed with the campaign's checks: `first`,
    the signatures of every violation at the earliest step any comes (its first
    departure); `all`, those it shows when run on past each one found (ignored in
    turn)."""

    first: frozenset[str]
    all: frozenset[str]


def shown_by(finding: Finding, factory: SutFactory, checks: CheckSet, most: int = 8) -> Shown:
    """Replay the finding's file with `checks`, each violation found ignored in
    the next replay (at most `most` replays), on past an ignored state that
    repeats (a rule that judges by elapsed steps may break later); a flaky
    finding, or a file that shows nothing, shows its own signature alone."""
    own = finding.violation.signature
    if finding.flaky:
        return Shown(frozenset({own}), frozenset({own}))
    workload, found, first, step = load_workload(finding.counterexample), [], set(), None
    for _ in range(most):
        run = run_workload(workload, factory, checks.ignoring(*found).build(), past_repeats=True)
        ended = run.driver.ended_by
        shown = run.violation or (ended if ended is not None and not matches(ended, checks.ignore) else None)
        if shown is None or shown.signature in found:
            break
        step = shown.step if step is None else step
        if shown.step == step:
            first.add(shown.signature)
        found.append(shown.signature)
    return Shown(frozenset(first or {own}), frozenset(found or [own]))


def group_findings(findings: list[Finding], factory: SutFactory, checks: CheckSet) -> list[Group]:
    """The findings in groups of one cause each (the module's rule), in the
    order of each group's first finding. Groups are merged until no two are
    related: a rule in both groups' first departures, a group's own signature in
    the other's first departures, or each group's files, run on, showing an own
    signature of the other."""
    shown = [shown_by(f, factory, checks) for f in findings]
    groups = [[i] for i in range(len(findings))]

    def own(group: list[int]) -> set[str]:
        return {findings[k].violation.signature for k in group}

    def firsts(group: list[int]) -> frozenset[str]:
        return frozenset().union(*(shown[k].first for k in group))

    def all_shown(group: list[int]) -> frozenset[str]:
        return frozenset().union(*(shown[k].all for k in group))

    def sites(group: list[int]) -> set[str]:   # the crash and hang signatures of the group
        return {s for s in own(group) if s.partition("@")[0] in PLACED}

    def related(a: list[int], b: list[int]) -> bool:
        return (bool(firsts(a) & firsts(b)) or bool(own(a) & firsts(b)) or bool(own(b) & firsts(a))
                or bool(own(a) & all_shown(b)) and bool(own(b) & all_shown(a)))

    merged = True
    while merged:
        merged = False
        for j, later in enumerate(groups):
            earlier = next((g for g in groups[:j] if len(sites(g) | sites(later)) <= 1 and related(g, later)), None)
            if earlier is not None:
                earlier.extend(later)
                earlier.sort()
                del groups[j]
                merged = True
                break
    return [Group(", ".join(sorted(firsts(g))), tuple(findings[k] for k in g)) for g in groups]
