"""A scoped exploration's certificate as text (stdout) and as OUT/report.md, with
each finding's file, replay command and timeline."""

from __future__ import annotations

import json
import os
from pathlib import Path

from loopcheck.campaign_report import picture_of, timelines_unavailable
from loopcheck.checks.suite import CheckSet
from loopcheck.explorer.certificate import Certificate
from loopcheck.sut.protocol import SutFactory

REPORT = "report.md"


def verdict(cert: Certificate) -> str:
    """One line: clean, findings, or what the certificate does not cover."""
    scope = cert.scope["name"]
    if cert.findings:
        return f"FOUND {len(cert.findings)} finding{'s' if len(cert.findings) != 1 else ''} in scope {scope}"
    if not cert.tally.complete:
        return f"INCOMPLETE: a limit (--max-states or --max-seconds) cut the exploration of scope {scope} short"
    if not cert.whole:
        return (f"PART {','.join(map(str, cert.covered))} of {cert.parts}: no finding in these parts of scope "
                f"{scope}; combine all parts (loopcheck combine) for the certificate")
    return f"CERTIFICATE: no finding in any workload of scope {scope}"


def certificate_lines(cert: Certificate) -> list[str]:
    """The certificate, a fact a line."""
    t = cert.tally
    rate = t.transitions / cert.seconds if cert.seconds else 0.0
    lines = [verdict(cert),
             f"  system: {cert.system} ({cert.system_version}; adapter file sha256 {cert.adapter_sha256[:16]}), "
             f"{cert.loopcheck_version}, checks: {' '.join(cert.checks)}",
             f"  covered: {t.units:,} units, {t.workloads:,} workloads, {t.states:,} distinct states "
             f"(and {t.drained_states:,} drained), "
             f"{t.transitions:,} transitions, {t.steps:,} system steps (replays included) in {cert.seconds:.1f} s "
             f"({rate:,.0f} transitions/s)",
             "  judged: " + (", ".join(f"{label} on {n:,}" for label, n in sorted(t.judged.items())) or "nothing")]
    if t.not_run:
        lines.append("  not run: " + "; ".join(f"{label} ({why})" for label, why in sorted(t.not_run.items())))
    if cert.refused_configs:
        lines.append(f"  configs the system refuses ({len(cert.refused_configs)}, not explored): "
                     + "; ".join(sorted({r['why'] for r in cert.refused_configs})))
    if cert.refused_shapes:
        shapes = len(cert.refused_shapes)
        configs = len({json.dumps(r["config"], sort_keys=True) for r in cert.refused_shapes})
        lines.append(f"  request shapes the system refuses at add ({shapes} on {configs} configs, never drawn): "
                     + "; ".join(sorted({r['why'] for r in cert.refused_shapes})))
    if t.ignored:
        lines.append("  ignored: " + "; ".join(f"{sig} on {n:,} transitions" for sig, n in sorted(t.ignored.items()))
                     + " (the check that met it judges no more of that run)")
    lines.append(f"  worst cases: longest wait {t.longest_wait} steps, most steps to drain {t.most_steps_to_drain}, "
                 f"most blocks held {t.most_blocks_held}")
    if t.merges_checked:
        lines.append(f"  key checked: {t.merges_checked} merged states replayed from the root, no divergence")
    for f in cert.findings:
        lines += [f"FINDING {f['signature']}: {f['message']}",
                  f"  {f['requests']} requests, {f['steps']} steps{met_after(f)}: {f['file']}",
                  f"  replay: {f['replay']}"]
    return lines


def met_after(finding: dict) -> str:
    """', met after N s' (the seconds into its part's exploration), where the
    certificate says."""
    return f", met after {finding['seconds']:.1f} s" if finding.get("seconds") is not None else ""


def write_report(out: Path, command: str, cert: Certificate, factory: SutFactory, checks: CheckSet) -> Path:
    """OUT/report.md: the command, the certificate and each finding's timeline
    (drawn beside its file by replaying it; needs matplotlib, else said)."""
    report = out / REPORT
    drawable = timelines_unavailable()
    lines = [f"# loopcheck explore: {cert.system}, scope {cert.scope['name']}", "", f"    {command}", "", "```",
             *certificate_lines(cert), "```", ""]
    for number, f in enumerate(cert.findings, 1):
        here = os.path.relpath(f["file"], out)
        lines += [f"## {number}. `{f['signature']}`", "", f["message"], "",
                  f"- file: [{here}]({here}), {f['requests']} requests, {f['steps']} steps (the fewest of any "
                  "workload in the scope that shows it)", f"- replay: `{f['replay']}`", ""]
        if drawable:
            lines += [f"(no timeline: {drawable})", ""]
        else:
            picture = picture_of(Path(f["file"]), factory, checks, cert.system)
            lines += [f"![timeline of {here}]({os.path.relpath(picture, out)})", ""]
    report.write_text("\n".join(lines))
    return report
