"""Signatures: how a finding is named so that one bug keeps one name across
runs, machines and upgrades. A check's finding is named by its property and the
rule that broke (`Violation.rule`): PROPERTY where the property has one rule,
PROPERTY.RULE where it has several (`RULES`); the driver's own findings by the
place in the system: crash@FILE:FUNCTION:TYPE:SHAPE, hang@FILE:FUNCTION
(sut/driver.py). An `--ignore` entry names a property, a signature, or a
signature cut at one of its ':' (crash@FILE:FUNCTION: every crash there).

Signatures of loopcheck 0.1.0 before this naming carried the line that built the
finding (PROPERTY@checks/FILE:LINE); `current` reads them, and the crash and
hang signatures by line of an installed system, with a warning naming the new
signature."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from loopcheck.model.errors import WorkloadError
from loopcheck.sut.code import function_at

PLACED = ("crash", "hang")   # the findings named by their place in the system, not by a rule

# every rule of each property with more than one (a property not listed has one rule, named by the property)
RULES: dict[str, tuple[str, ...]] = {
    "abort": ("not-ended", "wrong-finish"),
    "futility-guard": ("entry-dropped", "entry-stays", "entry-without-futility", "futile-unrecorded",
                       "policy-keeps-entries"),
    "grammar": ("holds-blocks-unready", "ready-idle", "token-before-ready"),
    "kv-load": ("before-loaded", "past-known", "ready-idle", "unasked"),
    "kv-conservation": ("held-after-drain", "held-after-finish", "held-out-of-range", "lockstep", "reported-errors"),
    "kv-tables": ("block-twice", "block-two-pages", "listed-counted-free", "page-blocks", "page-count",
                  "shared-differ", "shared-unwritten"),
    "lifecycle": ("length-short", "past-max-tokens", "stop-not-finished", "stop-without-token", "transition"),
    "output-equivalence": ("bits", "tokens"),
    "pause": ("admitted", "running-held", "scheduled"),
    "prefix-hits": ("cached-page", "caching-off", "past-positions", "uncomputed-hit"),
    "stall": ("quiet-steps", "state-repeats"),
    "work": ("chunk-depths", "depth-order", "exit-depth", "prefill-past-known", "prefill-skipped",
             "prompt-not-computed", "restore-past-snapshot", "token-index", "token-uncomputed", "twice-in-step"),
}

# the signatures by line of the last release that wrote them, and their names now
BY_LINE: dict[str, str] = {
    "abort@checks/lifecycle.py:192": "abort.not-ended",
    "abort@checks/lifecycle.py:195": "abort.wrong-finish",
    "bypass-count@checks/rules.py:89": "bypass-count",
    "bypass-limit@checks/rules.py:161": "bypass-limit",
    "conformance@checks/lockstep.py:70": "conformance",
    "fit-rejected@checks/liveness.py:79": "fit-rejected",
    "futile-preemption@checks/futility.py:51": "futile-preemption",
    "futility-guard@checks/rules.py:176": "futility-guard.futile-unrecorded",
    "futility-guard@checks/rules.py:180": "futility-guard.entry-without-futility",
    "futility-guard@checks/rules.py:184": "futility-guard.entry-stays",
    "futility-guard@checks/rules.py:187": "futility-guard.entry-dropped",
    "futility-guard@checks/rules.py:190": "futility-guard.policy-keeps-entries",
    "kv-conservation@checks/lockstep.py:70": "kv-conservation.lockstep",
    "kv-conservation@checks/safety.py:55": "kv-conservation.reported-errors",
    "kv-conservation@checks/safety.py:57": "kv-conservation.held-out-of-range",
    "kv-conservation@checks/safety.py:60": "kv-conservation.held-after-finish",
    "kv-conservation@checks/safety.py:79": "kv-conservation.held-after-drain",
    "kv-coverage@checks/safety.py:69": "kv-coverage",
    "kv-excess@checks/safety.py:73": "kv-excess",
    "kv-hit-blocks@checks/safety.py:233": "kv-hit-blocks",
    "kv-tables@checks/safety.py:109": "kv-tables.page-count",
    "kv-tables@checks/safety.py:114": "kv-tables.page-blocks",
    "kv-tables@checks/safety.py:118": "kv-tables.block-twice",
    "kv-tables@checks/safety.py:125": "kv-tables.listed-counted-free",
    "kv-tables@checks/safety.py:134": "kv-tables.block-two-pages",
    "kv-tables@checks/safety.py:137": "kv-tables.shared-unwritten",
    "kv-tables@checks/safety.py:141": "kv-tables.shared-differ",
    "lifecycle@checks/lifecycle.py:42": "lifecycle.transition",
    "lifecycle@checks/lifecycle.py:52": "lifecycle.past-max-tokens",
    "lifecycle@checks/lifecycle.py:54": "lifecycle.length-short",
    "lifecycle@checks/lifecycle.py:58": "lifecycle.stop-not-finished",
    "lifecycle@checks/lifecycle.py:63": "lifecycle.stop-without-token",
    "livelock@checks/liveness.py:49": "livelock",
    "liveness@sut/driver.py:268": "liveness",
    "lone-preemption@checks/lifecycle.py:45": "lone-preemption",
    "never-fit-not-rejected@checks/liveness.py:87": "never-fit-not-rejected",
    "one-victim@checks/rules.py:107": "one-victim",
    "output-equivalence@checks/outputs.py:82": "output-equivalence.tokens",
    "output-equivalence@checks/outputs.py:84": "output-equivalence.bits",
    "preemption-bound@checks/lockstep.py:88": "preemption-bound",
    "prefix-hits@checks/lifecycle.py:216": "prefix-hits.caching-off",
    "prefix-hits@checks/lifecycle.py:219": "prefix-hits.past-positions",
    "prefix-hits@checks/lifecycle.py:222": "prefix-hits.uncomputed-hit",
    "prefix-hits@checks/lifecycle.py:279": "prefix-hits.cached-page",
    "priority-inversion@checks/liveness.py:132": "priority-inversion",
    "priority-victim@checks/liveness.py:155": "priority-victim",
    "reported-outputs@checks/outputs.py:102": "reported-outputs",
    "safety@checks/lockstep.py:73": "safety",
    "seq-cap@checks/safety.py:33": "seq-cap",
    "snapshots@checks/rules.py:97": "snapshots",
    "stall@checks/liveness.py:45": "stall.state-repeats",
    "stall@checks/liveness.py:55": "stall.quiet-steps",
    "token-cap@checks/safety.py:36": "token-cap",
    "victim-order@checks/rules.py:144": "victim-order",
    "work@checks/lifecycle.py:102": "work.twice-in-step",
    "work@checks/lifecycle.py:109": "work.prefill-past-known",
    "work@checks/lifecycle.py:113": "work.prefill-skipped",
    "work@checks/lifecycle.py:118": "work.token-index",
    "work@checks/lifecycle.py:123": "work.token-uncomputed",
    "work@checks/lifecycle.py:127": "work.exit-depth",
    "work@checks/lifecycle.py:137": "work.restore-past-snapshot",
    "work@checks/lifecycle.py:143": "work.chunk-depths",
    "work@checks/lifecycle.py:159": "work.depth-order",
    "work@checks/lifecycle.py:249": "work.prompt-not-computed",
}
_OLD_CHECK = re.compile(r"^[\w-]+@(checks/\w+\.py|sut/driver\.py):\d+$")
_OLD_PLACE = re.compile(r"^(crash|hang)@(.+\.py):(\d+)((?::\w+)?)$")
_warned: set[str] = set()


def signature_of(prop: str, rule: str, where: str) -> str:
    """The signature of a finding (see the module's doc)."""
    if where:
        return f"{prop}@{where}"
    return f"{prop}.{rule}" if rule else prop


def parsed(signature: str) -> tuple[str, str, str]:
    """(property, rule, place) of a signature as `signature_of` writes it."""
    prop, at, where = signature.partition("@")
    if at:
        return prop, "", where
    prop, _, rule = prop.partition(".")
    return prop, rule, ""


def current(entry: str, read_in: str = "--ignore") -> str:
    """`entry` (a property or a signature, read in `read_in`: a flag or a file)
    as this loopcheck names it: a signature by line of an older one is
    translated, with a warning on stderr naming the new one; WorkloadError for
    one it cannot translate."""
    new = BY_LINE.get(entry)
    if new is None and _OLD_CHECK.match(entry):
        raise WorkloadError(f"{read_in}: {entry!r} is a signature by line of an older loopcheck that this one does "
                            "not know; name the rule instead (docs/checking.md lists every rule)")
    old_place = _OLD_PLACE.match(entry)
    if new is None and old_place:
        prop, file, line, kind = old_place.groups()
        function = _installed_function(file, int(line))
        if function is None:
            raise WorkloadError(f"{read_in}: {entry!r} is a signature by line of an older loopcheck, and no installed "
                                f"file {file} has a function at line {line}; name the function instead "
                                f"({prop}@FILE:FUNCTION{':TYPE' if prop == 'crash' else ''})")
        new = f"{prop}@{file}:{function}{kind}"
    if new is None:
        return entry
    if entry not in _warned:
        _warned.add(entry)
        print(f"loopcheck: warning: {read_in}: {entry} is a signature by line of an older loopcheck; it is now "
              f"{new}", file=sys.stderr)
    return new


def _installed_function(file: str, line: int) -> str | None:
    """The function at `line` of the installed file named `file` (from its
    package down), found on sys.path; None if there is none."""
    for folder in sys.path:
        path = Path(folder or ".") / file
        if path.is_file():
            return function_at(str(path), line)
    return None
