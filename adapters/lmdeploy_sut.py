"""LMDeploy's PyTorch engine scheduling (lmdeploy/pytorch: paging/scheduler.py with its
prefill scheduler, block manager, block-trie prefix cache and recompute eviction;
engine/inputs_maker.py, which chooses prefill, decode or a long-context chunk each
forward; engine/engine_loop.py, which dispatches the next forward before it applies
the last one's output; and the engine's own intake and session calls) as a system
under test, on the CPU with a fake executor in place of the model.

Install with `scripts/install-engine.sh lmdeploy` (pinned in requirements-lmdeploy.txt).
Replaced, because they need a GPU or a model: the executor and its model agent (a
token is a hash of the sequence so far; `stopped` by the agent's two rules, a stop
word or the token budget spent) and the model's config (only its BOS id is read);
and the clock LMDeploy's scheduling modules order by, for determinism. One loopcheck
step is one turn of `EngineLoop.main_loop`; a forward is reported when answered.
The config mapping (block_size pinned to 16, upfront allocation pinned for its
looser bound, max_num_batched_tokens as the prefill budget) and the reasons are in
docs/engines/lmdeploy.md.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from types import SimpleNamespace
from typing import Any

from loopcheck.adapters.fake_lm import fake_token
from loopcheck.adapters.step_clock import install_step_clock
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Abort, Admit, Arrive, Event, Finish, Preempt, Prefill, RequestOutput, Resume, Token
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import Capabilities, Observation, Refused

PINNED: dict[str, Any] = dict(block_size=16, allocation="upfront", watermark_blocks=0, priority_preemption=False,
                              execution="refill")
MAX_SESSION_LEN = 1 << 20   # the engine caps it further by the pool (Engine._get_max_session_len)


class _FakeExecutor:
    """Stands in for LMDeploy's executor and model agent. `forward_async` queues a
    forward; `get_output_async` answers the oldest one, for the sequences the
    engine loop is waiting on (`answering`, in the forward's order), from their
    state when it is asked, as the GPU's answer reflects the inputs sent: each
    sequence's token is a hash of its tokens so far, and it stops at a stop word
    or when its token budget is spent (the rules of the agent's
    ARStoppingCriteria)."""

    device_type = "cpu"

    def __init__(self) -> None:
        self.queue: list[dict[str, Any]] = []
        self.answering: list[Any] = []

    async def forward_async(self, inputs: dict[str, Any]) -> None:
        self.queue.append(inputs)

    async def get_output_async(self) -> Any:
        import torch
        from lmdeploy.pytorch.engine.model_agent import BatchedOutputs

        self.queue.pop(0)
        tokens = [fake_token([int(t) for t in seq.all_ids]) for seq in self.answering]
        stopped = [seq.num_new_tokens + 1 >= seq.sampling_param.max_new_tokens
                   or token in seq.sampling_param.stop_words for seq, token in zip(self.answering, tokens, strict=True)]
        return BatchedOutputs(next_token_ids=torch.tensor(tokens, dtype=torch.long),
                              stopped=torch.tensor(stopped, dtype=torch.bool))


# the scheduling modules that order by time (loopcheck.adapters.step_clock)
CLOCK_USERS = ("lmdeploy.pytorch.paging.block_manager.base_block_manager", "lmdeploy.pytorch.paging.prefill_scheduler",
               "lmdeploy.pytorch.paging.block_trie.checkpoint_lifecycle", "lmdeploy.pytorch.strategies.ar.sequence")


def _event_loop() -> asyncio.AbstractEventLoop:
    """The one event loop every LMDeploy system of this process runs its engine
    loop's coroutines on (each turn runs to completion in it)."""
    global _EVENT_LOOP
    if _EVENT_LOOP is None:
        _EVENT_LOOP = asyncio.new_event_loop()
    return _EVENT_LOOP


_EVENT_LOOP: asyncio.AbstractEventLoop | None = None


class _EngineFront:
    """The engine's own request handling (`Engine._add_message` with its
    max_new_tokens clamp, `_on_stop_session`, `end_session`), bound to this
    scheduler instead of a whole `Engine` (which needs a model and a GPU)."""

    def __init__(self, engine_class: Any, scheduler: Any, scheduler_config: Any, cache_config: Any) -> None:
        from lmdeploy.pytorch.disagg.config import EngineRole

        self.engine = engine_class
        self.scheduler, self.scheduler_config, self.cache_config = scheduler, scheduler_config, cache_config
        self.engine_config = SimpleNamespace(role=EngineRole.Hybrid)
        self.req_manager = SimpleNamespace(reject_request=lambda resp, **_: None)
        self.migration_event = None
        self.max_session_len = engine_class._get_max_session_len(self)

    def __getattr__(self, name: str) -> Any:
        """The engine's methods, bound to this front."""
        attr = inspect.getattr_static(self.engine, name)
        if isinstance(attr, staticmethod):
            return attr.__func__
        return attr.__get__(self)

    def _response(self, resp: Any, resp_type: Any, data: Any = None, err_msg: str = "") -> None:
        raise RuntimeError(f"LMDeploy answered {resp_type}: {err_msg}")

    def _maybe_trim_multimodal_session(self, has_multimodal: bool) -> None:
        """(memory trimming after multimodal sessions: none here)"""

    def add(self, sid: int, spec: RequestSpec) -> None:
        from lmdeploy.pytorch.engine.request import Response, ResponseType
        from lmdeploy.pytorch.messages import SamplingParam

        self.scheduler.add_session(sid)
        params = SamplingParam(max_new_tokens=spec.max_tokens, top_k=1, ignore_eos=False,
                               stop_words=[] if spec.stop_token is None else [spec.stop_token])
        resp = Response(type=ResponseType.SUCCESS, sender_id=0, event=None)
        data = dict(session_id=sid, token_ids=list(spec.prompt), sampling_param=params, adapter_name=None)
        self._add_message([SimpleNamespace(data=data, resp=resp)])

    def cancel(self, sid: int) -> None:
        """An abort, as the server sends it: stop the session, then end it."""
        self._on_stop_session([SimpleNamespace(data=dict(session_id=sid, response=False), resp=None)])
        self.end(sid)

    def end(self, sid: int) -> None:
        self.engine.end_session(self, sid)


class LmdeploySUT:
    """One LMDeploy scheduler, inputs maker and engine loop with a fake executor."""

    def __init__(self, cfg: Config) -> None:
        os.environ.setdefault("LMDEPLOY_LOG_LEVEL", "ERROR")
        from lmdeploy.pytorch.adapter.adapter import AdapterManager
        from lmdeploy.pytorch.config import CacheConfig, SchedulerConfig
        from lmdeploy.pytorch.disagg.config import EngineRole
        from lmdeploy.pytorch.engine.engine import Engine
        from lmdeploy.pytorch.engine.engine_loop import EngineLoop, EngineLoopConfig
        from lmdeploy.pytorch.engine.inputs_maker import InputsMakerAsync, InputsMakerConfig
        from lmdeploy.pytorch.messages import SequenceMeta
        from lmdeploy.pytorch.paging.scheduler import Scheduler
        from lmdeploy.pytorch.strategies.ar import ARStrategyFactory

        install_step_clock(CLOCK_USERS)
        self.cfg = cfg
        self.capabilities = Capabilities(kv=True, state_key=True, priorities=False, pinned=PINNED,
                                         block_tables=True, code=("lmdeploy.pytorch.paging",
                                                                  "lmdeploy.pytorch.engine.inputs_maker",
                                                                  "lmdeploy.pytorch.engine.engine_loop"))
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:
            raise WorkloadError(f"config.max_num_batched_tokens: LMDeploy's budget is for prefill only (a decode "
                                f"batch is up to max_num_seqs tokens), so it must be at least max_num_seqs "
                                f"({cfg.max_num_seqs}), got {cfg.max_num_batched_tokens}")
        bs = cfg.block_size
        sched_cfg = SchedulerConfig(max_batches=cfg.max_num_seqs, max_session_len=MAX_SESSION_LEN)
        cache_cfg = CacheConfig(max_batches=cfg.max_num_seqs, block_size=bs, num_cpu_blocks=0,
                                num_gpu_blocks=cfg.num_blocks, kernel_block_size=bs,
                                max_prefill_token_num=cfg.max_num_batched_tokens,
                                enable_prefix_caching=cfg.prefix_caching, device_type="cpu")
        factory = ARStrategyFactory(model_config=SimpleNamespace(bos_token_id=0))
        self.seq_strategy = factory.build_sequence_strategy()
        self.scheduler = Scheduler(sched_cfg, cache_cfg, seq_meta=SequenceMeta(bs, strategy=self.seq_strategy))
        self.executor = _FakeExecutor()
        maker_cfg = InputsMakerConfig(max_batches=cfg.max_num_seqs, max_prefill_token_num=cfg.max_num_batched_tokens,
                                      role=EngineRole.Hybrid, block_size=bs, kernel_block_size=bs, window_size=-1,
                                      enable_prefix_caching=cfg.prefix_caching,
                                      prefix_cache_decode_state_interval=0,
                                      prefill_interval=sched_cfg.prefill_interval)
        self.maker = InputsMakerAsync(executor=self.executor, scheduler=self.scheduler,
                                      state_checkpoints=self.scheduler.state_checkpoints,
                                      adapter_manager=AdapterManager({}),
                                      engine_strategy=factory.build_engine_strategy(cache_cfg, sched_cfg),
                                      sampling_strategy=factory.build_sampling_strategy(),
                                      model_agent_strategy=factory.build_model_agent_strategy(), config=maker_cfg)
        self.loop = EngineLoop(req_manager=None, scheduler=self.scheduler,
                               state_checkpoints=self.scheduler.state_checkpoints, executor=self.executor,
                               seq_strategy=self.seq_strategy, inputs_maker=self.maker,
                               config=EngineLoopConfig(role=EngineRole.Hybrid))
        self.front = _EngineFront(Engine, self.scheduler, sched_cfg, cache_cfg)
        self.next: tuple[dict[str, Any], list[Any]] | None = None   # the forward dispatched, not yet answered
        self.pending: list[RequestSpec] = []
        self.aborts: list[str] = []
        self.outputs: dict[str, RequestOutput] = {}
        self.specs: dict[int, RequestSpec] = {}   # session id -> its request
        self.sessions: dict[str, int] = {}        # request -> its session id
        self.admitted: set[str] = set()           # requests admitted once
        self.running: set[str] = set()            # requests admitted or resumed and not since preempted or finished
        # the forward being answered: request -> (prefix-cache positions, start, end) not yet reported
        self.answering: dict[str, tuple[int, int, int]] = {}

    # -- the verbs -------------------------------------------------------------------

    def add(self, spec: RequestSpec) -> None:
        """Submit at the next step. A request longer than the engine's maximum
        session length (the pool less one block) is refused: LMDeploy would cut
        its max_tokens to fit (Engine._add_message), answering fewer tokens than
        asked."""
        if len(spec.prompt) + spec.max_tokens > self.front.max_session_len:
            raise Refused("prompt + max_tokens exceeds LMDeploy's max session length (the pool less one block), "
                          "to which it would cut max_tokens")
        self.pending.append(spec)

    def abort(self, rid: str) -> None:
        self.aborts.append(rid)

    def step(self) -> list[Event]:
        events: list[Event] = []
        for spec in self.pending:
            sid = len(self.specs) + 1
            self.specs[sid], self.sessions[spec.rid] = spec, sid
            self.outputs[spec.rid] = RequestOutput(spec.rid, [], [], None)
            self.front.add(sid, spec)
            events.append(Arrive(spec.rid))
        self.pending = []
        self.answering = {} if self.next is None else self._work(*self.next)
        for rid in self.aborts:
            if self.outputs[rid].finish_reason is None:
                events += self._computed(rid)   # the forward in flight computes it regardless
                self.front.cancel(self.sessions[rid])
                events += [Abort(rid), Finish(rid, "abort")]
                self.outputs[rid].finish_reason = "abort"
                self.running.discard(rid)
        self.aborts = []
        _event_loop().run_until_complete(self._turn())
        for rid in list(self.answering):
            events += self._computed(rid)
        events += self._preempted()
        while not self.loop.resp_queue.empty():
            for sid, out in sorted(self.loop.resp_queue.get_nowait().items()):
                events += self._answered(sid, out)
        return events

    async def _turn(self) -> None:
        """One turn of `EngineLoop.main_loop` (engine_loop.py), by its own methods:
        with no forward in flight, dispatch one (unless the loop would wait);
        else activate the one in flight, dispatch the next (the prefetch) and
        apply the first one's output."""
        if self.next is None:
            if self.loop.has_runable_event.has_unfinished():
                forward_inputs, running = await self.maker.send_next_inputs()
                self.next = None if running is None else (forward_inputs, running)
            return
        forward_inputs, running = self.next
        self.scheduler.activate_seqs(running)
        self.executor.answering = running
        forward_inputs, following = await self.loop._main_loop_get_outputs(running=running,
                                                                           forward_inputs=forward_inputs)
        self.maker.preempt_invalid_decode_seqs()
        self.next = None if following is None else (forward_inputs, following)

    def _work(self, forward_inputs: dict[str, Any], seqs: list[Any]) -> dict[str, tuple[int, int, int]]:
        """Per request in a prefill or a long prompt's chunk: the positions the
        prefix cache gave it, and the positions [start, end) it computes; a
        decode's work shows as its tokens."""
        inputs = forward_inputs["inputs"]
        if inputs is None or inputs.is_decoding:
            return {}
        starts, lengths = inputs.history_lengths.tolist(), inputs.seq_length.tolist()
        return {self.specs[seq.session_id].rid: (seq.cached_tokens, start, start + length)
                for seq, start, length in zip(seqs, starts, lengths, strict=True)}

    def _computed(self, rid: str) -> list[Event]:
        """What the forward being answered did for `rid` (reported once): its
        admission or resumption if it was not running, with its prefix-cache
        hit pages and, on resumption, the positions past them its own blocks
        kept (LMDeploy frees a preempted sequence's blocks only when another
        needs them); then the positions it computed. A forward computes once it
        is dispatched, whatever the engine decides about the request meanwhile,
        so this comes before an abort or preemption of `rid` in the step."""
        if rid not in self.answering:
            return []
        cached, start, end = self.answering.pop(rid)
        events, hits = [], cached // self.cfg.block_size
        if rid not in self.running:
            self.running.add(rid)
            if rid in self.admitted:
                events.append(Resume(rid, hits, start - hits * self.cfg.block_size))
            else:
                self.admitted.add(rid)
                events.append(Admit(rid, hits))
        return events + [Prefill(rid, start, end)]

    def _preempted(self) -> list[Event]:
        """Running requests the engine put back to waiting (a decode that could
        not grow preempts itself: LMDeploy evicts only waiting and stopped
        sequences' blocks to make room, never another running one's)."""
        from lmdeploy.pytorch.messages import MessageStatus

        events = []
        for rid in sorted(self.running, key=lambda r: self.sessions[r]):
            seq = self._seq(self.sessions[rid])
            if seq is not None and seq.status == MessageStatus.WAITING:
                self.running.discard(rid)
                events.append(Preempt(rid, by=rid))
        return events

    def _answered(self, sid: int, out: Any) -> list[Event]:
        """The engine's response for one session: its new tokens and, when it
        finished, the finish; the server then ends the session."""
        spec = self.specs[sid]
        rid, mine = spec.rid, self.outputs[spec.rid]
        events = []
        for token in [int(t) for t in out.token_ids][len(mine.token_ids):]:
            events.append(Token(rid, len(mine.token_ids), token))
            mine.token_ids.append(token)
            mine.exit_depths.append(1)
        if out.finish and mine.finish_reason is None:
            stopped = spec.stop_token is not None and mine.token_ids[-1:] == [spec.stop_token]
            mine.finish_reason = "stop" if stopped else "length"
            events.append(Finish(rid, mine.finish_reason))
            self.running.discard(rid)
            self.front.end(sid)
        return events

    def _seq(self, sid: int) -> Any:
        session = self.scheduler.get_session(sid)
        return None if session is None else next(iter(session.sequences.values()), None)

    def observe(self) -> Observation:
        tables, trie = self._block_tables(), self._trie_blocks()
        unfinished = bool(self.pending) or any(o.finish_reason is None for o in self.outputs.values())
        return Observation(blocks_held=len({b for table in tables.values() for page in table for b in page}),
                           kv_errors=self._kv_errors(trie), outputs=self.outputs, unfinished=unfinished,
                           state_key=self._state_key(trie), block_tables=tables)

    def _block_tables(self) -> dict[str, list[list[int]]]:
        """Per running request, in arrival order, its blocks in page order, up to
        the pages of its last position (prompt + max_tokens - 1): LMDeploy
        reserves `prefill_interval` positions ahead of a sequence, and reserved
        blocks past the last position it can ever write are left out (counted
        free)."""
        tables = {}
        for rid in sorted(self.running, key=self.sessions.__getitem__):
            seq, spec = self._seq(self.sessions[rid]), self.specs[self.sessions[rid]]
            pages = -(-(len(spec.prompt) + spec.max_tokens - 1) // self.cfg.block_size)
            tables[rid] = [[int(b)] for b in seq.logical_blocks.get_real_blocks()[:pages]]
        return {rid: table for rid, table in tables.items() if table}

    def _trie_blocks(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """The prefix-cache trie's nodes: (block, parent's block, tokens)."""
        nodes, stack = [], list(self.scheduler.block_trie._roots.values())
        while stack:
            node = stack.pop()
            for child in node.children.values():
                nodes.append((int(child.block_id), int(node.block_id), tuple(int(t) for t in child.token_ids)))
                stack.append(child)
        return sorted(nodes)

    def _kv_errors(self, trie: list[tuple[int, int, tuple[int, ...]]]) -> list[str]:
        """Every block's ref count equals its holders (the sequences whose tables
        list it and the prefix-cache nodes on it, `trie`); the allocator's free
        count is the number of unreferenced blocks."""
        from collections import Counter

        import numpy as np

        allocator = self.scheduler.block_manager.allocator
        holders: Counter[int] = Counter(b for b, _, _ in trie)
        for seq in self.scheduler.seq_manager.get_all_sequences():
            holders.update(int(b) for b in seq.logical_blocks.get_real_blocks())
        refs = allocator.get_ref_count(np.arange(self.cfg.num_blocks)).tolist()
        errors = [f"block {b}: ref count {refs[b]} != {holders[b]} holders (sequences and prefix-cache nodes)"
                  for b in range(self.cfg.num_blocks) if refs[b] != holders[b]]
        unreferenced = sum(r == 0 for r in refs)
        if allocator.get_num_free_blocks() != unreferenced:
            errors.append(f"the allocator counts {allocator.get_num_free_blocks()} blocks free, "
                          f"{unreferenced} are unreferenced")
        return errors

    def _state_key(self, trie: list[tuple[int, int, tuple[int, ...]]]) -> tuple[Any, ...]:
        """Everything the next steps depend on: each sequence's status, positions
        and blocks, in arrival order; the engine loop's decode list, long-prompt
        chunk, counters and the forward in flight; the allocator's free list and
        the blocks in least-recently-used order (not their times); the trie's
        nodes (`trie`)."""
        import numpy as np

        seqs = sorted(self.scheduler.seq_manager.get_all_sequences(), key=lambda s: s.arrive_time)
        sequences = tuple((s.session_id, s.status.value, s.num_history_ids, s.num_token_ids, s.num_new_tokens,
                           tuple(int(b) for b in s.logical_blocks.get_real_blocks())) for s in seqs)
        maker, chunked = self.maker, self.maker.long_context_chunker.seq
        loop_state = (tuple(s.session_id for s in maker.running_seqs), None if chunked is None else chunked.session_id,
                      maker._decode_count, maker._last_forward_kind, maker._short_prefill_turns_since_long_chunk,
                      None if self.next is None else tuple(s.session_id for s in self.next[1]))
        allocator = self.scheduler.block_manager.allocator
        blocks = np.arange(self.cfg.num_blocks)
        pool = (tuple(allocator._free_blocks.tolist()), allocator.get_num_free_blocks(),
                tuple(np.argsort(allocator.get_access_time(blocks), kind="stable").tolist()))
        return sequences, loop_state, pool, tuple(trie)
