"""A loopcheck adapter for skeleton, as `loopcheck new-adapter skeleton` wrote it.

It runs as written: `SkeletonEngine` is a placeholder scheduler standing in for
yours. Replace it with your engine and keep the adapter's shape, then:

    loopcheck check-adapter --adapter skeleton_adapter.py:SkeletonSUT
    loopcheck fuzz --adapter skeleton_adapter.py:SkeletonSUT
    loopcheck explore --adapter skeleton_adapter.py:SkeletonSUT --scope tiny

The protocol is in loopcheck/sut/protocol.py; each event class in loopcheck/model/events.py.
"""

from __future__ import annotations

import hashlib
from collections import deque

from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Abort, Admit, Arrive, Event, Finish, Prefill, Reject, RequestOutput, Token
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import Capabilities, Observation

# Config fields your engine runs at one value only: loopcheck draws configs with them.
PINNED = {"allocation": "upfront", "priority_preemption": False, "prefix_caching": False, "watermark_blocks": 0}


class SkeletonEngine:
    """PLACEHOLDER for your engine. FCFS; a request reserves the KV blocks of its
    whole life when it starts; prompts are computed in chunks within the token
    budget; each running request then gets one token a step."""

    def __init__(self, max_seqs: int, token_budget: int, num_blocks: int, block_size: int) -> None:
        self.max_seqs, self.token_budget, self.block_size = max_seqs, token_budget, block_size
        self.num_blocks = self.free_blocks = num_blocks
        self.waiting: deque[dict] = deque()
        self.running: list[dict] = []

    def blocks_of(self, prompt_len: int, max_tokens: int) -> int:
        return -(-(prompt_len + max(max_tokens, 1) - 1) // self.block_size)

    def submit(self, rid: str, prompt: list[int], max_tokens: int, stop: int | None) -> None:
        blocks = self.blocks_of(len(prompt), max_tokens)
        if blocks > self.num_blocks:
            raise ValueError(f"needs {blocks} blocks, the pool has {self.num_blocks}")
        self.waiting.append({"rid": rid, "tokens": list(prompt), "prompt": len(prompt), "done": 0,
                             "max_tokens": max_tokens, "stop": stop, "blocks": blocks})

    def cancel(self, rid: str) -> None:
        for job in [j for j in self.running if j["rid"] == rid]:
            self.running.remove(job)
            self.free_blocks += job["blocks"]
        self.waiting = deque(j for j in self.waiting if j["rid"] != rid)

    def step(self) -> list[tuple]:
        """One step; what it did: ("prefill", rid, start, end), ("token", rid, id), ("finish", rid, reason)."""
        while self.waiting and len(self.running) < self.max_seqs and self.waiting[0]["blocks"] <= self.free_blocks:
            job = self.waiting.popleft()
            self.free_blocks -= job["blocks"]
            self.running.append(job)
        budget, out = self.token_budget, []
        for job in list(self.running):
            if budget == 0:
                break
            if job["done"] < job["prompt"]:
                end = min(job["prompt"], job["done"] + budget)
                out.append(("prefill", job["rid"], job["done"], end))
                budget -= end - job["done"]
                job["done"] = end
                if end < job["prompt"]:
                    continue
            elif budget:
                budget -= 1
            generated = len(job["tokens"]) - job["prompt"]
            if generated < job["max_tokens"]:
                token = int(hashlib.sha256(repr(job["tokens"]).encode()).hexdigest(), 16) % 64
                job["tokens"].append(token)
                out.append(("token", job["rid"], token))
            reason = "stop" if job["tokens"][-1:] == [job["stop"]] and generated < job["max_tokens"] else (
                "length" if generated + 1 >= job["max_tokens"] else None)
            if reason:
                out.append(("finish", job["rid"], reason))
                self.running.remove(job)
                self.free_blocks += job["blocks"]
        return out


class SkeletonSUT:
    """skeleton behind loopcheck's protocol: a factory, Config -> system."""

    def __init__(self, cfg: Config) -> None:
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:   # a config the engine cannot run: one error line
            raise WorkloadError("config.max_num_batched_tokens: skeleton needs at least max_num_seqs")
        self.engine = SkeletonEngine(cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.num_blocks, cfg.block_size)
        self.capabilities = Capabilities(
            kv=True,          # observe() says how many KV blocks are held: the KV checks run
            state_key=True,   # observe().state_key is the whole scheduling state: repeats are livelocks
            pinned=PINNED,
            # Your engine's modules, e.g. ("myengine.scheduler",): coverage guides the fuzzer there and
            # a crash is named by its function there. A module loaded from a source tree under a stub
            # package without a __spec__ is found by its __file__ (or __path__).
            code=(),
            refuses=(),       # workload features your API refuses, e.g. ("prompt_only",) for max_tokens 0
            features=(),      # deployment features it runs: "lora", "grammar" (docs/checking.md, "The protocol")
        )
        self.arriving: list[RequestSpec] = []
        self.cancelling: list[str] = []
        self.outputs: dict[str, RequestOutput] = {}

    def add(self, spec: RequestSpec) -> None:   # raise loopcheck.sut.protocol.Refused for one your API refuses
        self.arriving.append(spec)

    def abort(self, rid: str) -> None:
        self.cancelling.append(rid)

    def step(self) -> list[Event]:
        events: list[Event] = []
        for spec in self.arriving:
            events.append(Arrive(spec.rid))
            self.outputs[spec.rid] = RequestOutput(spec.rid, [])
            try:
                self.engine.submit(spec.rid, list(spec.prompt), spec.max_tokens, spec.stop_token)
            except ValueError as never_fits:
                events += [Reject(spec.rid, str(never_fits)), self._finish(spec.rid, "rejected")]
        for rid in self.cancelling:
            if self.outputs[rid].finish_reason is None:
                self.engine.cancel(rid)
                events += [Abort(rid), self._finish(rid, "abort")]
        self.arriving, self.cancelling = [], []
        before = {job["rid"] for job in self.engine.running}
        did = self.engine.step()
        events += [Admit(rid) for rid in sorted({job["rid"] for job in self.engine.running} | {d[1] for d in did})
                   if rid not in before]   # a request that ran and finished in one step was admitted too
        for kind, rid, *fields in did:
            if kind == "prefill":
                events.append(Prefill(rid, *fields))
            elif kind == "token":
                events.append(Token(rid, len(self.outputs[rid].token_ids), fields[0]))
                self.outputs[rid].token_ids.append(fields[0])
            else:
                events.append(self._finish(rid, fields[0]))
        return events

    def _finish(self, rid: str, reason: str) -> Finish:
        self.outputs[rid].finish_reason = reason
        return Finish(rid, reason)

    def observe(self) -> Observation:
        engine = self.engine
        outputs = {rid: RequestOutput(rid, list(out.token_ids), finish_reason=out.finish_reason)
                   for rid, out in self.outputs.items()}
        jobs = tuple((j["rid"], tuple(j["tokens"]), j["done"]) for j in (*engine.waiting, *engine.running))
        return Observation(blocks_held=engine.num_blocks - engine.free_blocks, outputs=outputs,
                           unfinished=bool(self.arriving) or any(o.finish_reason is None for o in outputs.values()),
                           state_key=(jobs, len(engine.waiting), engine.free_blocks))
