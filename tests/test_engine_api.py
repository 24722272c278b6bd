"""LLMEngine's API: abort anywhere frees everything; bad input is refused cleanly."""

from __future__ import annotations

import pytest

from loopcheck.engine.llm_engine import LLMEngine
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import RequestSpec

CFG = Config(num_blocks=16, block_size=2, num_loops=3, kv_layout="last_exited", wcpb=True,
             max_num_batched_tokens=8, prefill_chunk_size=4, prefix_caching=True)


def spec(rid: str, n: int = 6, max_tokens: int = 3, priority: int = 0) -> RequestSpec:
    return RequestSpec(rid, tuple(range(1, n + 1)), max_tokens, priority=priority)


def run_until(engine: LLMEngine, predicate, limit: int = 50) -> None:
    for _ in range(limit):
        if predicate():
            return
        engine.step()
        assert engine.conservation_errors() == []
    raise AssertionError("state never reached")


def seq(engine: LLMEngine, rid: str):
    return next(s for s in engine.scheduler.seqs if s.rid == rid)


@pytest.mark.parametrize("where", ["waiting", "mid_wcpb_depth", "decoding", "preempted"])
def test_abort_anywhere_frees_everything(where: str) -> None:
    cfg = CFG if where != "preempted" else Config(**{**CFG.to_json(), "num_blocks": 9})
    engine = LLMEngine(cfg)
    if where == "waiting":
        engine.add_request(spec("a"))                           # 4 pages x 3 planes = 12
        engine.add_request(spec("x", n=4, priority=1))          # 9 blocks, 4 free
        engine.step()
        target = "x"
        assert seq(engine, "x").status == "waiting"
    elif where == "mid_wcpb_depth":
        engine.add_request(spec("x"))
        engine.step()
        target = "x"
        assert seq(engine, "x").chunk_depth == 1
    elif where == "decoding":
        engine.add_request(spec("x", n=4, max_tokens=5))
        run_until(engine, lambda: seq(engine, "x").generated >= 2)
        target = "x"
    else:
        engine.add_request(spec("v", n=2, max_tokens=3, priority=5))
        engine.step()
        engine.add_request(spec("w", n=4, max_tokens=3, priority=0))
        run_until(engine, lambda: seq(engine, "v").status == "preempted")
        assert seq(engine, "v").snapshot is not None
        target = "v"
    engine.abort_request(target)
    events = engine.step()
    assert [str(e) for e in events if e.rid == target][:2] == [f"abort({target})",
                                                              f"finish({target}, abort)"]
    assert seq(engine, target).pages == [] and seq(engine, target).snapshot is None
    assert engine.conservation_errors() == []
    run_until(engine, lambda: not engine.has_unfinished(), limit=200)
    assert engine.blocks_held() == 0


@pytest.mark.parametrize("bad, message", [
    (RequestSpec("t", (1, 99), 2), "token id 99 outside vocab"),
    (RequestSpec("t", (), 2), "prompt must not be empty"),
    (RequestSpec("t", (1,), -1), "max_tokens must be >= 0"),
    (RequestSpec("a", (1,), 2), "duplicate request id"),
])
def test_bad_requests_are_refused_without_disturbing_others(bad, message) -> None:
    engine = LLMEngine(CFG)
    engine.add_request(spec("a"))
    engine.step()
    before = [(s.rid, s.status, s.frontier, s.chunk_depth) for s in engine.scheduler.seqs]
    with pytest.raises(WorkloadError, match=message):
        engine.add_request(bad)
    assert [(s.rid, s.status, s.frontier, s.chunk_depth) for s in engine.scheduler.seqs] == before
    run_until(engine, lambda: not engine.has_unfinished())
    assert seq(engine, "a").finish_reason == "length"


def test_request_larger_than_the_pool_is_rejected_and_others_run() -> None:
    engine = LLMEngine(CFG)
    engine.add_request(spec("huge", n=30, max_tokens=5))
    engine.add_request(spec("ok"))
    events = engine.step()
    assert "finish(huge, rejected)" in [str(e) for e in events]
    run_until(engine, lambda: not engine.has_unfinished())
    assert seq(engine, "ok").finish_reason == "length" and engine.blocks_held() == 0
