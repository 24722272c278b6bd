"""A loopcheck adapter for turnsched (examples/plain/turnsched.py), made from the
skeleton `loopcheck new-adapter turnsched` wrote: its placeholder engine removed,
turnsched's calls put in its place. turnsched's code is unchanged.

    loopcheck check-adapter --adapter examples/plain/turnsched_adapter.py:TurnschedSUT
    loopcheck fuzz --adapter examples/plain/turnsched_adapter.py:TurnschedSUT
    loopcheck explore --adapter examples/plain/turnsched_adapter.py:TurnschedSUT --scope tiny
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import (
    Abort,
    Admit,
    Arrive,
    Event,
    Finish,
    Preempt,
    Prefill,
    Reject,
    RequestOutput,
    Resume,
    Token,
)
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import Capabilities, Observation


def _load_turnsched():
    """turnsched as an installed package would be imported (here from its file, beside this one)."""
    if "turnsched" not in sys.modules:
        spec = importlib.util.spec_from_file_location("turnsched", Path(__file__).with_name("turnsched.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["turnsched"] = module
        spec.loader.exec_module(module)
    return sys.modules["turnsched"]


turnsched = _load_turnsched()

# turnsched takes pages just before it writes them, has no priorities, no prefix cache and no watermark.
PINNED = {"allocation": "incremental", "priority_preemption": False, "prefix_caching": False, "watermark_blocks": 0}
WHY = {"stop": "stop", "limit": "length"}


class TurnschedSUT:
    """turnsched behind loopcheck's protocol: a factory, Config -> system."""

    def __init__(self, cfg: Config) -> None:
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:   # a config the engine cannot run: one error line
            raise WorkloadError("config.max_num_batched_tokens: turnsched needs at least max_num_seqs")
        self.vocab = cfg.vocab_size
        self.engine = turnsched.TurnScheduler(cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.num_blocks,
                                              cfg.block_size)
        self.capabilities = Capabilities(
            kv=True,          # observe() says how many KV blocks are held: the KV checks run
            state_key=True,   # observe().state_key is the whole scheduling state: repeats are livelocks
            pinned=PINNED,
            code=("turnsched",),   # coverage guides the fuzzer there; a crash is named by its function there
        )
        self.arriving: list[RequestSpec] = []
        self.cancelling: list[str] = []
        self.outputs: dict[str, RequestOutput] = {}
        self.started: set[str] = set()   # requests that ran before: a later start is a resumption

    def add(self, spec: RequestSpec) -> None:
        self.arriving.append(spec)

    def abort(self, rid: str) -> None:
        self.cancelling.append(rid)

    def step(self) -> list[Event]:
        events: list[Event] = []
        for spec in self.arriving:
            events.append(Arrive(spec.rid))
            self.outputs[spec.rid] = RequestOutput(spec.rid, [])
            try:
                self.engine.enqueue(spec.rid, list(spec.prompt), spec.max_tokens, spec.stop_token)
            except turnsched.TooLarge as never_fits:
                events += [Reject(spec.rid, str(never_fits)), self._finish(spec.rid, "rejected")]
        for rid in self.cancelling:
            if self.outputs[rid].finish_reason is None:
                self.engine.drop(rid)
                events += [Abort(rid), self._finish(rid, "abort")]
        self.arriving, self.cancelling = [], []
        if self.engine.idle():
            return events
        report = self.engine.tick(self._sample)
        events += [Preempt(rid) for rid in report.paused]   # it keeps its tokens, to read them again
        for rid in report.started:
            events.append(Resume(rid) if rid in self.started else Admit(rid))
            self.started.add(rid)
        events += [Prefill(rid, start, end) for rid, start, end in report.chunks]
        for rid, token in report.emitted:
            events.append(Token(rid, len(self.outputs[rid].token_ids), token))
            self.outputs[rid].token_ids.append(token)
        events += [self._finish(rid, WHY[why]) for rid, why in report.done]
        return events

    def _sample(self, job) -> int:
        """The fake LM: a token from the job's prompt and tokens (the same on every run)."""
        return int(hashlib.sha256(repr((job.prompt, job.tokens)).encode()).hexdigest(), 16) % self.vocab

    def _finish(self, rid: str, reason: str) -> Finish:
        self.outputs[rid].finish_reason = reason
        return Finish(rid, reason)

    def observe(self) -> Observation:
        engine = self.engine
        outputs = {rid: RequestOutput(rid, list(out.token_ids), finish_reason=out.finish_reason)
                   for rid, out in self.outputs.items()}
        jobs = tuple((j.job_id, tuple(j.tokens), j.read, tuple(j.pages)) for j in (*engine.queue, *engine.active))
        return Observation(blocks_held=engine.pages - len(engine.free_pages), outputs=outputs,
                           unfinished=bool(self.arriving) or any(o.finish_reason is None for o in outputs.values()),
                           state_key=(jobs, len(engine.queue), tuple(engine.free_pages)))
