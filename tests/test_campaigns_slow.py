"""Long campaigns, behind the `slow` marker: python -m pytest -m slow"""

from __future__ import annotations

import pytest

from loopcheck.fuzz.campaign import run_campaign


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["regression", "random"])
def test_guarded_policy_runs_ten_minutes_clean(tmp_path, mode) -> None:
    result = run_campaign("guarded", 600, 20261202, tmp_path, mode)
    assert result.violation is None, f"{result.violation} -> {result.counterexample}"
    assert result.stats.examples > 100
