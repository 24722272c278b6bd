"""Does the suite notice a check that stopped checking? For every check class in
loopcheck.checks, run the tests with that check's hooks returning at once
(benchmarks/break_check.py) and report the first test that fails; a check no
test notices is a hole in the suite. A control run breaks nothing and must pass.

Usage: python -m benchmarks.broken_checks [--only KvTables,...] [--tests tests/test_x.py ...]
Exit status 1 when a broken check goes unnoticed or the control fails.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import time

import loopcheck.checks
from loopcheck.checks.base import Check
from loopcheck.report import table

# the files whose tests judge checks; each stops at its first failure (-x)
TESTS = ("tests/test_property_checks.py", "tests/test_rules.py", "tests/test_lockstep.py", "tests/test_fuzz.py",
         "tests/test_sut_protocol.py", "tests/test_engine_api.py", "tests/test_directed.py",
         "tests/test_keep_going.py", "tests/test_examples.py", "tests/test_resume_watermark.py",
         "tests/test_engine_livelock.py", "tests/test_vllm_adapter.py", "tests/test_features.py",
         "tests/test_vllm_kv_transfer.py")
CONTROL = "(nothing broken)"


def check_classes() -> dict[str, type[Check]]:
    """Every concrete check class in loopcheck.checks, by class name."""
    found: dict[str, type[Check]] = {}
    for info in pkgutil.iter_modules(loopcheck.checks.__path__):
        module = importlib.import_module(f"loopcheck.checks.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Check) and cls is not Check and cls.__module__ == module.__name__:
                found[name] = cls
    return dict(sorted(found.items()))


def first_failure(broken: str | None, tests: list[str]) -> tuple[str | None, float, bool]:
    """Run `tests` with `broken` (a class name; None: nothing) broken: the first
    failing test's id (None: all passed), the seconds, and whether pytest ran."""
    env = dict(os.environ, **({"LOOPCHECK_BROKEN_CHECK": broken} if broken else {}))
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "benchmarks.break_check",
                           "-p", "no:cacheprovider", *tests], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in done.stdout.splitlines()
              if line.startswith(("FAILED ", "ERROR "))]
    return (failed[0] if failed else None), seconds, done.returncode in (0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated check class names")
    parser.add_argument("--tests", nargs="+", default=list(TESTS))
    args = parser.parse_args()
    classes = list(check_classes())
    chosen = args.only.split(",") if args.only else classes
    unknown = sorted(set(chosen) - set(classes))
    if unknown:
        print(f"loopcheck: unknown check class {', '.join(unknown)} (known: {', '.join(classes)})", file=sys.stderr)
        sys.exit(2)
    rows, holes = [], []
    for name in [CONTROL, *chosen]:
        failing, seconds, ran = first_failure(None if name == CONTROL else name, args.tests)
        if name == CONTROL:
            verdict = "passes" if failing is None and ran else f"FAILS: {failing}"
            ok = failing is None and ran
        else:
            verdict = failing or "NOT NOTICED"
            ok = failing is not None
        holes += [] if ok else [name]
        rows.append([name, verdict, f"{seconds:.0f}"])
        print(f"  {name}: {verdict} ({seconds:.0f} s)", file=sys.stderr, flush=True)
    print(table(["check broken", "first failing test", "s"], rows))
    sys.exit(1 if holes else 0)


if __name__ == "__main__":
    main()
