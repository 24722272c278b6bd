"""The worked example of docs/checking.md, "Writing an adapter": minisched (a
small scheduler with its own API, examples/adapter/minisched.py) behind
loopcheck's protocol, its code unchanged. What the adapter does that minisched
does not:

- minisched reports no events: the adapter reads them off its queues and
  sequences, diffing the statuses before and after `schedule()` (a running
  sequence back in the waiting queue was preempted; it names no requester).
- minisched has one global end-of-sequence token; loopcheck's requests each have
  their own stop token: the adapter plays the model, and hands minisched its EOS
  id exactly when the token it samples is the request's stop token.
- minisched must not be scheduled while idle: the adapter's step does nothing then.
- minisched refuses, at `add`, a sequence that can never fit its pool
  (ValueError): the adapter reports that as a rejection. Its `Sequence` refuses
  max_tokens 0 (a request, not a scheduling decision): the adapter raises
  `Refused` and declares the feature in `capabilities.refuses`, so it is not drawn.

Run it: loopcheck fuzz --adapter examples/adapter/minisched_adapter.py:MiniSchedSUT
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from loopcheck.model.config import Config
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
from loopcheck.sut.protocol import Capabilities, Observation, Refused


def _import_minisched():
    """minisched as an installed package would be imported (here from its file)."""
    if "minisched" not in sys.modules:
        spec = importlib.util.spec_from_file_location("minisched", Path(__file__).with_name("minisched.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["minisched"] = module
        spec.loader.exec_module(module)
    return sys.modules["minisched"]


minisched = _import_minisched()

# The config fields minisched has one setting of (configs are drawn with these):
# FCFS only, no watermark; steps that are
# all prefill or all decode ("refill"); it allocates the whole prompt at admission, then a
# block per page as it decodes, neither upfront nor incremental: "upfront" makes the KV
# checks take the looser bound. It does not chunk prefills (prefill_chunk_size is read by
# no check), and takes whole prompts and their tokens in one prefill, so its token budget
# is pinned above any drawn request's length. Its prefix cache cannot be switched off.
PINNED = dict(priority_preemption=False, watermark_blocks=0, execution="refill", allocation="upfront",
              max_num_batched_tokens=64, prefix_caching=True)


class MiniSchedSUT:
    """minisched behind the protocol (a factory: Config -> SUT)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.eos = cfg.vocab_size   # an id no drawn token has
        self.scheduler = minisched.Scheduler(cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.num_blocks,
                                             cfg.block_size, self.eos)
        self.capabilities = Capabilities(kv=True, state_key=True, block_tables=True, pinned=PINNED,
                                         code=("minisched",), refuses=("prompt_only",))
        self.specs: dict[str, RequestSpec] = {}
        self.seqs: dict[str, minisched.Sequence] = {}
        self.pending: list[tuple[RequestSpec, minisched.Sequence]] = []
        self.aborting: list[str] = []
        self.tokens: dict[str, list[int]] = {}      # the tokens reported, per request
        self.finish: dict[str, str] = {}            # finished requests -> reason
        self.preempted: set[str] = set()            # preempted and not yet running again

    def add(self, spec: RequestSpec) -> None:
        try:
            seq = minisched.Sequence(spec.rid, list(spec.prompt), len(spec.prompt), spec.max_tokens)
        except ValueError as refused:
            raise Refused(str(refused)) from None
        self.pending.append((spec, seq))

    def abort(self, rid: str) -> None:
        self.aborting.append(rid)

    def step(self) -> list[Event]:
        events: list[Event] = []
        for spec, seq in self.pending:
            self.specs[spec.rid], self.tokens[spec.rid] = spec, []
            events.append(Arrive(spec.rid))
            try:
                self.scheduler.add(seq)
            except ValueError as refused:
                events += [Reject(spec.rid, str(refused)), self._finished(spec.rid, "rejected")]
            else:
                self.seqs[spec.rid] = seq
        self.pending = []
        for rid in self.aborting:
            if rid in self.seqs and rid not in self.finish:
                self.scheduler.abort(rid)
                events += [Abort(rid), self._finished(rid, "abort")]
        self.aborting = []
        if self.scheduler.is_finished():
            return events   # minisched must not be scheduled while idle
        was_running = {rid for rid, s in self.seqs.items() if s.status == "running"}
        batch, is_prefill = self.scheduler.schedule()
        for rid in sorted(was_running):
            if self.seqs[rid].status == "waiting":   # only a queue diff shows a preemption
                self.preempted.add(rid)
                events.append(Preempt(rid))   # it keeps its tokens, to recompute
        sampled = []
        for seq in batch:
            rid = seq.seq_id
            if is_prefill:
                hits = seq.num_cached_tokens // self.cfg.block_size
                events.append(Resume(rid, hits, 0) if rid in self.preempted else
                              Admit(rid, hits))
                self.preempted.discard(rid)
                events.append(Prefill(rid, seq.num_cached_tokens, len(seq.token_ids)))
            token = self._sample(seq)
            events.append(Token(rid, len(self.tokens[rid]), token))
            self.tokens[rid].append(token)
            sampled.append(self.eos if token == self.specs[rid].stop_token else token)
        self.scheduler.postprocess(batch, sampled, is_prefill)
        for seq, token in zip(batch, sampled, strict=True):
            if seq.status == "finished":
                events.append(self._finished(seq.seq_id, "stop" if token == self.eos else "length"))
        return events

    def _sample(self, seq) -> int:
        """The fake LM: a token from the sequence so far (the same on every run)."""
        return (sum(self.specs[seq.seq_id].prompt) * 7 + 13 * len(self.tokens[seq.seq_id])) % self.cfg.vocab_size

    def _finished(self, rid: str, reason: str) -> Event:
        self.finish[rid] = reason
        return Finish(rid, reason)

    def observe(self) -> Observation:
        manager = self.scheduler.block_manager
        held = sum(count > 0 for count in manager.ref_count)
        errors = [] if held + len(manager.free_ids) == self.cfg.num_blocks else [
            f"{held} blocks held + {len(manager.free_ids)} free != {self.cfg.num_blocks}"]
        outputs = {rid: RequestOutput(rid, list(tokens), finish_reason=self.finish.get(rid))
                   for rid, tokens in self.tokens.items()}
        state = (tuple((rid, s.status, tuple(s.token_ids), tuple(s.block_table)) for rid, s in self.seqs.items()),
                 tuple(s.seq_id for s in self.scheduler.waiting), tuple(s.seq_id for s in self.scheduler.running),
                 tuple(manager.free_ids), tuple(manager.ref_count), tuple(manager.hash_of))
        return Observation(blocks_held=held, kv_errors=errors, outputs=outputs, state_key=state,
                           unfinished=bool(self.pending) or len(self.finish) < len(self.specs),
                           block_tables={rid: [[b] for b in s.block_table] for rid, s in self.seqs.items()
                                         if s.block_table})
