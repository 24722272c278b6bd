"""A campaign can share Hypothesis' example database through Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings

redis = pytest.importorskip("redis")


@pytest.fixture
def redis_url(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(50):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_a_failing_example_is_saved_to_redis(redis_url, tmp_path) -> None:
    result = run_campaign(CampaignSettings(
        "unguarded", 600, 2, tmp_path, db=redis_url, max_examples=200, max_replays=20))
    assert result.violation is not None
    assert redis.Redis.from_url(redis_url).dbsize() > 0
