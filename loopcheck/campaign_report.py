"""A campaign's report: OUT/report.md lists what `loopcheck fuzz` found, by bug
(findings of one cause, `fuzz.grouping`), each finding with its message, file,
replay command, the command that writes the same file again, and its timeline
(`loopcheck.timeline`, drawn beside the file as counterexample-PROPERTY.png by
replaying it; needs matplotlib, else the report says so)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loopcheck.checks.suite import CheckSet
from loopcheck.fuzz.campaign import Finding
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import load_workload
from loopcheck.replayed import replay
from loopcheck.sut.protocol import SutFactory
from loopcheck.timeline import check_matplotlib, draw

REPORT = "report.md"


def picture_of(counterexample: Path, factory: SutFactory, checks: CheckSet, system: str) -> Path:
    """Replay a counterexample file with `checks` and draw its timeline beside it;
    the PNG's path."""
    path = counterexample.with_suffix(".png")
    workload = load_workload(counterexample)
    draw(replay(workload, factory, checks).timeline(workload, system), path)
    return path


def timelines_unavailable() -> str:
    """Why timelines cannot be drawn here ("" when they can)."""
    try:
        check_matplotlib("timelines")
    except WorkloadError as exc:
        return str(exc)
    return ""


def write_report(out: Path, command: str, summary: dict[str, Any], findings: list[Finding],
                 factory: SutFactory) -> Path:
    """Write OUT/report.md for a campaign run by `command` (its summary as
    `loopcheck fuzz --json` prints it, and its distinct findings); its path."""
    out.mkdir(parents=True, exist_ok=True)
    report = out / REPORT
    drawable = timelines_unavailable()
    lines = [f"# loopcheck fuzz: {summary['adapter']}", "", f"    {command}", "",
             f"{summary['examples']} examples, {summary['steps']} steps, {summary['check']} checks, "
             f"policy {summary['policy']}, seed {summary['seed']}"
             f"{' (interrupted: this covers the run until then)' if summary['interrupted'] else ''}.", ""]
    lines += [f"- ignored: `{c['signature']}` in {c['runs']} runs" for c in summary["ignored"]]
    lines += [""] if summary["ignored"] else []
    bugs = summary["bugs"]
    lines += [f"## {len(bugs)} bug{'s' if len(bugs) != 1 else ''}, {len(findings)} "
              f"finding{'s' if len(findings) != 1 else ''}", ""]
    if not findings:
        lines.append("No counterexample.")
    shown = 0
    for number, (finding, entry) in enumerate(zip(findings, summary["counterexamples"], strict=True), 1):
        if entry["bug"] != shown:
            shown = entry["bug"]
            bug = bugs[shown - 1]
            lines += [f"### Bug {shown}: first departs at `{bug['cause']}`", "",
                      "Signatures: " + ", ".join(f"`{s}`" for s in bug["signatures"]), ""]
        here = os.path.relpath(finding.counterexample, out)
        lines += [f"#### {number}. `{entry['signature']}`{' (flaky)' if entry['flaky'] else ''}", "",
                  entry["message"], "",
                  f"- file: [{here}]({here}), {entry['requests']} requests"
                  + (f", found after {entry['time_to_failure']:.1f} s" if entry["time_to_failure"] is not None
                     else "") + "".join(f"; {note}" for note in entry["notes"]),
                  f"- replay: `{entry['replay']}`", f"- this file again, byte for byte: `{entry['reproduce']}`", ""]
        if drawable:
            lines += [f"(no timeline: {drawable})", ""]
        else:
            drawn = picture_of(finding.counterexample, factory, finding.checks, summary["adapter"])
            picture = os.path.relpath(drawn, out)
            lines += [f"![timeline of {here}]({picture})", ""]
    report.write_text("\n".join(lines))
    return report
