"""`loopcheck new-adapter` (write a commented skeleton that runs) and `loopcheck
check-adapter` (protocol conformance of an adapter on a few fixed workloads)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from loopcheck.adapters import skeleton
from loopcheck.adapters.loader import capabilities_of
from loopcheck.checks.counterexample import counterexample_path, write_counterexample
from loopcheck.conformance import judge
from loopcheck.model.errors import WorkloadError
from loopcheck.options import add_adapter, factory_of
from loopcheck.report import banner, table
from loopcheck.sut.code import code_paths

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
DEFAULT_OUT = "loopcheck-check-adapter"


def register_new(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the engine's name, lower case (letters, digits, _): writes NAME_adapter.py")
    p.add_argument("--out", default=".", help="the folder to write it in (default: here)")


def run_new(args: argparse.Namespace) -> int:
    """Write NAME_adapter.py: a commented adapter skeleton around a placeholder
    scheduler, which runs and passes check-adapter as written; replace the
    placeholder with your engine."""
    if not NAME.match(args.name):
        raise WorkloadError(f"NAME: expected lower-case letters, digits and _, starting with a letter, got "
                            f"{args.name!r}")
    path = Path(args.out) / f"{args.name}_adapter.py"
    if path.exists():
        raise WorkloadError(f"{path} exists: not overwritten")
    camel = "".join(part.capitalize() for part in args.name.split("_"))
    text = Path(skeleton.__file__).read_text().replace("Skeleton", camel).replace("skeleton", args.name)
    path.write_text(text)
    factory = f"{path}:{camel}SUT"
    print(f"wrote {path}\nnext: loopcheck check-adapter --adapter {factory}")
    return 0


def register_check(p: argparse.ArgumentParser) -> None:
    add_adapter(p, None, "none: required")
    p.add_argument("--out", default=None,
                   help=f"where the counterexample of a broken property is written (default {DEFAULT_OUT})")


def run_check(args: argparse.Namespace) -> int:
    """Check an adapter: it builds, keeps the protocol, breaks no property and is
    deterministic on a few fixed workloads on the default and a small config
    (exit 1 if not); its capabilities and what `code` resolves to are listed."""
    if args.adapter is None:
        raise WorkloadError("--adapter: required (NAME or MODULE:FACTORY)")
    factory = factory_of(args)
    caps = capabilities_of(factory)
    banner(None, ["check-adapter", "--adapter", args.adapter, *(["--out", args.out] if args.out else [])])
    claims = [name for name in ("kv", "state_key", "fingerprints", "priorities", "block_tables", "cached_pages",
                                "internals", "looped") if getattr(caps, name)]
    print(f"claims: {', '.join(claims) or 'none'}; aborts {'taken' if caps.abort else 'not taken'}; "
          f"semantics {caps.semantics or 'its own'}")
    print(f"pinned: {', '.join(f'{k}={v}' for k, v in sorted(caps.pinned.items()))}")
    if caps.refuses:
        print(f"refuses: {', '.join(caps.refuses)}")
    if caps.features:
        print(f"features: {', '.join(caps.features)}")
    unresolved = [m for m in caps.code if not code_paths((m,))]
    print(f"code: {', '.join(caps.code) or 'none (no coverage guidance; crashes named outside the stdlib)'}"
          + (f"; WARNING: not found: {', '.join(unresolved)}" if unresolved else ""))
    outcomes = judge(factory, caps)
    rows = [(o.config, o.workload, o.steps, o.problem or "ok") for o in outcomes]
    print(table(["config", "workload", "steps", "result"], rows))
    failed = [o for o in outcomes if o.problem]
    for number, o in enumerate((o for o in failed if o.violation is not None and o.run is not None), 1):
        path = counterexample_path(Path(args.out or DEFAULT_OUT), o.violation.prop, number)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_counterexample(path, o.run.driver.workload(), o.violation, o.run.driver.trace, "loopcheck check-adapter")
        print(f"counterexample: {path}\n  replay: loopcheck replay {path} --adapter {args.adapter}")
    if failed:
        print(f"check-adapter: FAIL ({len(failed)} of {len(outcomes)} runs: a broken property is a bug of the engine "
              "or of the adapter: replay it)")
        return 1
    if unresolved:
        print(f"check-adapter: warning: capabilities.code names modules not found: {', '.join(unresolved)}",
              file=sys.stderr)
    print(f"check-adapter: PASS ({len(outcomes)} runs, each twice)")
    return 0
