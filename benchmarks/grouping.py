"""One bug, one finding: keep-going campaigns on schedulers with known planted
bugs, and how many groups (`fuzz.grouping`) their findings make against how
many causes were planted. Each row is one campaign: the bugs planted (one cause
each), the distinct signatures found, the groups, and whether the groups equal
the causes found. The hashsched rows plant one bug each; the toy rows plant one
or two.

Usage: python -m benchmarks.grouping [--budget 20] [--seed 3] [--max-examples 600] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.subjects import hashsched
from loopcheck.checks.suite import CheckSet
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.grouping import group_findings
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.report import table
from tests.toy_scheduler import toy

TOY = [("leak",), ("slot-cap",), ("no-reject",), ("keep-on-preempt",), ("short-alloc",), ("leak", "slot-cap"),
       ("no-reject", "slot-cap"), ("budget", "leak")]


def campaign(factory, budget: float, seed: int, max_examples: int) -> tuple[list[str], list[list[str]]]:
    """One keep-going campaign: the signatures found, and their groups."""
    checks = CheckSet("property")
    with tempfile.TemporaryDirectory() as out:
        result = run_campaign(CampaignSettings("guarded", budget, seed, Path(out), "random", factory=factory,
                                               checks=checks, keep_going=True, max_examples=max_examples,
                                               max_replays=40))
        groups = group_findings(result.findings, factory, checks)
    return [f.violation.signature for f in result.findings], [g.signatures for g in groups]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=20.0, help="seconds a campaign")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--max-examples", type=int, default=600)
    parser.add_argument("--only", help="comma-separated names (hashsched bug names, or toy bugs joined by +)")
    args = parser.parse_args()
    subjects = [(f"hashsched {bug}", (bug,), hashsched.factory(bug)) for bug in hashsched.BUGS]
    subjects += [(f"toy {'+'.join(bugs)}", bugs, toy(*bugs)) for bugs in TOY]
    wanted = set(args.only.split(",")) if args.only else None
    rows, right = [], 0
    for name, bugs, factory in subjects:
        if wanted and name.split(" ", 1)[1] not in wanted:
            continue
        signatures, groups = campaign(factory, args.budget, args.seed, args.max_examples)
        ok = len(groups) == len(bugs) if signatures else None
        right += ok is True
        rows.append([name, len(bugs), len(signatures), len(groups), {True: "yes", False: "NO", None: "none found"}[ok],
                     " | ".join(", ".join(g) for g in groups)])
        print(f"  {name}: {len(signatures)} signatures, {len(groups)} groups", file=sys.stderr, flush=True)
    print(table(["planted", "causes", "signatures", "groups", "groups = causes", "groups (signatures)"], rows))
    found = sum(row[2] > 0 for row in rows)
    print(f"groups equal the causes in {right} of {found} campaigns that found something (budget {args.budget:g} s, "
          f"seed {args.seed}, at most {args.max_examples} examples)")


if __name__ == "__main__":
    main()
