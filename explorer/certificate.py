"""What a scoped exploration covered, as a certificate: which system (its version
and the hash of its adapter's file), which loopcheck, which scope and checks,
which part of the work, the tallies, the findings, and the time. Certificates of
the parts 1..N of one exploration combine into the one a single run gives
(`combine`); stored as JSON under schema `loopcheck/certificate@1`."""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from loopcheck.checks.suite import MODES
from loopcheck.explorer.scope import scope_from_json
from loopcheck.explorer.scoped import Result, Tally
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import check_keys
from loopcheck.sut.protocol import Capabilities, SutFactory

SCHEMA = "loopcheck/certificate@1"
IDENTITY = ("system", "system_version", "loopcheck_version", "adapter_sha256", "scope", "checks", "keep_going",
            "parts")


def system_version(caps: Capabilities) -> str:
    """The version of the package that holds the system's own code (its first
    `Capabilities.code` module), or loopcheck's for a system without one."""
    package = caps.code[0].split(".")[0] if caps.code else "loopcheck"
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} (no installed version)"


def adapter_sha256(factory: SutFactory) -> str:
    """The sha256 of the file that defines the adapter's factory."""
    try:
        source = inspect.getsourcefile(factory)
    except TypeError:
        source = None
    if source is None:
        return "unknown"
    with open(source, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


@dataclass
class Certificate:
    """One exploration's (or one part's) certificate; `parts` are the parts of N
    it covers (all of 1..N: the whole scope)."""

    system: str
    system_version: str
    loopcheck_version: str
    adapter_sha256: str
    scope: dict[str, Any]
    checks: list[str]
    keep_going: bool
    parts: int
    covered: list[int]
    tally: Tally
    findings: list[dict[str, Any]] = field(default_factory=list)   # signature, message, steps, unit, file
    refused_configs: list[dict[str, Any]] = field(default_factory=list)   # config, why
    refused_shapes: list[dict[str, Any]] = field(default_factory=list)    # config, prompt, max_tokens, why
    seconds: float = 0.0

    @property
    def whole(self) -> bool:
        return sorted(self.covered) == list(range(1, self.parts + 1))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tally"] = tally_json(self.tally)
        return {"schema": SCHEMA, **data}


def tally_json(tally: Tally) -> dict[str, Any]:
    data = asdict(tally)
    for name in ("judged", "ignored", "met"):
        data[name] = dict(sorted(getattr(tally, name).items()))
    data["not_run"] = dict(sorted(tally.not_run.items()))
    return data


def _check_flags(flags: Any) -> bool:
    """Whether `flags` are what `CheckSet.flags` writes: --check MODE, then
    --ignore and its signatures, if any."""
    if not isinstance(flags, list) or len(flags) % 2 or not all(isinstance(f, str) for f in flags):
        return False
    values = dict(zip(flags[::2], flags[1::2], strict=True))
    return values.get("--check") in MODES and set(values) <= {"--check", "--ignore"}


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_finding(finding: Any) -> bool:
    """Whether `finding` is a certificate's finding (scoped_cmd.finding_entry)."""
    return (isinstance(finding, dict)
            and all(_is_text(finding.get(k)) for k in ("signature", "property", "message", "file", "replay"))
            and all(_is_count(finding.get(k)) for k in ("steps", "unit", "requests")))


def _is_refusal(refusal: Any, *keys: str) -> bool:
    """Whether `refusal` is a refused config or shape: a `why`, and `keys`."""
    return isinstance(refusal, dict) and _is_text(refusal.get("why")) and all(k in refusal for k in keys)


# what each field of a certificate's JSON holds: (a field's test, what it must be)
COUNT = (_is_count, "a count (0 or more)")
TEXT = (_is_text, "a string")
COUNTS = (lambda v: isinstance(v, dict) and all(map(_is_count, v.values())), "an object of counts")
FLAG = (lambda v: isinstance(v, bool), "true or false")
FIELDS = {
    "system": TEXT, "system_version": TEXT, "loopcheck_version": TEXT, "adapter_sha256": TEXT,
    "scope": (lambda v: isinstance(v, dict) and _is_text(v.get("name")), "an object with a name"),
    "checks": (_check_flags, "the flags of a check set (--check MODE [--ignore SIGNATURES])"),
    "keep_going": FLAG,
    "parts": (lambda v: _is_count(v) and v >= 1, "a count of 1 or more"),
    "covered": (lambda v: isinstance(v, list) and all(_is_count(k) and k >= 1 for k in v), "a list of part numbers"),
    "findings": (lambda v: isinstance(v, list) and all(map(_is_finding, v)),
                 "a list of findings (signature, property, message, file, replay, steps, unit, requests)"),
    "refused_configs": (lambda v: isinstance(v, list) and all(_is_refusal(r) for r in v),
                        "a list of objects with why"),
    "refused_shapes": (lambda v: isinstance(v, list) and all(_is_refusal(r, "config") for r in v),
                       "a list of objects with config and why"),
    "seconds": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0, "seconds (0 or more)"),
}
TALLY_FIELDS = {**{name: COUNT for name in ("units", "workloads", "states", "drained_states", "transitions", "edges",
                                            "steps",
                                            "longest_wait",
                                            "most_steps_to_drain", "most_blocks_held", "merges_checked")},
                "judged": COUNTS, "ignored": COUNTS, "met": COUNTS, "complete": FLAG,
                "not_run": (lambda v: isinstance(v, dict) and all(map(_is_text, v.values())), "an object of strings")}


def _check_fields(data: dict[str, Any], fields_: dict[str, tuple], required: tuple[str, ...], where: str,
                  prefix: str = "certificate.") -> None:
    """Each field of `data` one of `fields_` and what it must be, the `required`
    ones present (the others have defaults; WorkloadError naming the first
    field that is not so)."""
    check_keys(f"{where}: {prefix.rstrip('.')}", data, fields_, required, "certificate")
    for name, value in data.items():
        test, what = fields_[name]
        if not test(value):
            raise WorkloadError(f"{where}: {prefix}{name}: must be {what}, got {value!r:.80}")


def certificate_from_json(data: Any, where: str) -> Certificate:
    """A certificate from its JSON, each field checked (WorkloadError naming
    `where` and the field if it is not one)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise WorkloadError(f"{where}: not a certificate (schema {SCHEMA!r} expected)")
    if not isinstance(data.get("tally"), dict):
        raise WorkloadError(f"{where}: tally: must be an object")
    _check_fields({k: v for k, v in data.items() if k not in ("schema", "tally")}, FIELDS, IDENTITY + ("covered",),
                  where)
    _check_fields(data["tally"], TALLY_FIELDS, (), where, "tally.")
    if any(k > data["parts"] for k in data["covered"]):
        raise WorkloadError(f"{where}: covered: parts {data['covered']} of {data['parts']}")
    scope_from_json(data["scope"], data["scope"]["name"])   # (WorkloadError naming the scope's field)
    try:
        raw = dict(data["tally"])
        tally = Tally(**{**raw, **{name: Counter(raw[name]) for name in ("judged", "ignored", "met")}})
        fields_ = {k: v for k, v in data.items() if k not in ("schema", "tally")}
        return Certificate(**fields_, tally=tally)
    except (KeyError, TypeError) as exc:
        raise WorkloadError(f"{where}: a malformed certificate ({type(exc).__name__}: {exc})") from None


def certificate_of(result: Result, system: str, factory: SutFactory, caps: Capabilities, scope: dict[str, Any],
                   checks: list[str], keep_going: bool, part: tuple[int, int], refused: list[dict[str, Any]],
                   refused_shapes: list[dict[str, Any]], findings: list[dict[str, Any]]) -> Certificate:
    return Certificate(system, system_version(caps), f"loopcheck {importlib.metadata.version('loopcheck')}",
                       adapter_sha256(factory), scope, checks, keep_going, part[1], [part[0]], result.tally,
                       findings, refused, refused_shapes, round(result.seconds, 3))


def combine(certificates: list[Certificate]) -> Certificate:
    """The certificates of parts of one exploration as one (WorkloadError if they
    differ in what they explored or cover a part twice): the tallies added, the
    findings chosen as a single run chooses (keep-going: each signature's first
    in unit order; else the shortest, then the first unit), the seconds added."""
    if not certificates:
        raise WorkloadError("combine: no certificates given")
    first = certificates[0]
    for other in certificates[1:]:
        for name in IDENTITY:
            if getattr(other, name) != getattr(first, name):
                raise WorkloadError(f"combine: the certificates differ in {name} ({getattr(first, name)!r} vs "
                                    f"{getattr(other, name)!r}): they are not parts of one exploration")
    covered = [k for c in certificates for k in c.covered]
    if len(set(covered)) != len(covered):
        raise WorkloadError(f"combine: a part is given twice (parts {sorted(covered)})")
    tally = Tally()
    for c in certificates:
        tally.add(c.tally)
    ordered = sorted((f for c in certificates for f in c.findings), key=lambda f: f["unit"])
    if first.keep_going:
        chosen: dict[str, dict[str, Any]] = {}
        for f in ordered:
            chosen.setdefault(f["signature"], f)
        findings = list(chosen.values())
    else:
        findings = sorted(ordered, key=lambda f: f["steps"])[:1]
    return Certificate(first.system, first.system_version, first.loopcheck_version, first.adapter_sha256,
                       first.scope, first.checks, first.keep_going, first.parts, sorted(covered), tally, findings,
                       first.refused_configs, first.refused_shapes, round(sum(c.seconds for c in certificates), 3))
