"""The worked example of docs/checking.md: minisched, a small scheduler with its
own API (examples/adapter/minisched.py), behind the adapter
examples/adapter/minisched_adapter.py. It fuzzes clean, and a prefix-cache bug
planted in minisched's own code is found."""

from __future__ import annotations

from pathlib import Path

from loopcheck.adapters.loader import load_factory
from loopcheck.checks.suite import CheckSet
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.pytest_plugin import run_machine
from loopcheck.fuzz.settings import CampaignSettings

ADAPTER = str(Path(__file__).parent.parent / "examples/adapter/minisched_adapter.py")


def test_the_worked_example_adapter_fuzzes_clean(tmp_path) -> None:
    factory = load_factory(f"{ADAPTER}:MiniSchedSUT")
    stats = run_machine(factory, max_examples=300, out_dir=tmp_path)
    assert stats.examples >= 300
    assert stats.branches["preempt+again"] and stats.branches["admit+prefix-hit"] and stats.branches["reject"]


def test_a_block_that_keeps_its_hash_when_reused_is_found(tmp_path, monkeypatch) -> None:
    """The bug planted in minisched: a free cached block taken for new content
    keeps its entry in the hash table, so a later prompt with the old prefix
    hits a block that now holds other tokens."""
    factory = load_factory(f"{ADAPTER}:MiniSchedSUT")
    import minisched

    def take(self, block: int) -> int:
        self.free_ids.remove(block)
        self.hash_of[block] = None    # (the table entry stays)
        self.ref_count[block] = 1
        return block
    monkeypatch.setattr(minisched.BlockManager, "_take", take)
    # (a second holder's table shows the block too: kv-tables, ignored as a user would --ignore it)
    result = run_campaign(CampaignSettings("guarded", 600, 1, tmp_path, "random", factory=factory,
                          checks=CheckSet("property", frozenset({"kv-tables"})), max_examples=2000, max_replays=50))
    assert result.violation is not None and result.violation.prop == "kv-hit-blocks", result.violation
