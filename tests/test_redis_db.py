"""A campaign can share Hypothesis' example database through Redis."""

from __future__ import annotations

import pytest

from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings

redis = pytest.importorskip("redis")


def test_a_failing_example_is_saved_to_redis(redis_url, tmp_path) -> None:
    result = run_campaign(CampaignSettings(
        "unguarded", 600, 2, tmp_path, db=redis_url, max_examples=200, max_replays=20))
    assert result.violation is not None
    assert redis.Redis.from_url(redis_url).dbsize() > 0
