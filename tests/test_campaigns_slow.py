"""Long campaigns, behind the `slow` marker: python -m pytest -m slow"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["regression", "random"])
def test_guarded_policy_runs_ten_minutes_clean(tmp_path, mode) -> None:
    result = run_campaign(CampaignSettings("guarded", 600, 20261202, tmp_path, mode))
    assert result.violation is None, f"{result.violation} -> {result.counterexample}"
    assert result.stats.examples > 100


@pytest.mark.slow
def test_breaking_any_check_makes_a_test_fail() -> None:
    """benchmarks.broken_checks: each check class broken in turn (its hooks return
    at once) fails at least one test of the check-judging files; breaking none
    fails none. About an hour on 2 cores."""
    root = Path(__file__).parent.parent
    done = subprocess.run([sys.executable, "-m", "benchmarks.broken_checks"], capture_output=True, text=True,
                          cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
