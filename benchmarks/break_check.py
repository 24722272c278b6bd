"""A pytest plugin that breaks one check: with LOOPCHECK_BROKEN_CHECK set to a
class name in loopcheck.checks (e.g. "KvTables"), that class's hooks return at
once (after_step and at_end do nothing, step_cap has no opinion), so a suite run
under it shows which tests notice the check is gone. Used by
benchmarks.broken_checks; loaded with `-p benchmarks.break_check`."""

from __future__ import annotations

import os

from benchmarks.broken_checks import check_classes

VARIABLE = "LOOPCHECK_BROKEN_CHECK"


def pytest_configure(config) -> None:
    name = os.environ.get(VARIABLE)
    if not name:
        return
    broken = check_classes()[name]
    broken.after_step = lambda self, driver, events, obs: None
    broken.at_end = lambda self, driver, obs: None
    broken.step_cap = lambda self, driver: None
