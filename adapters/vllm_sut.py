"""vLLM's v1 scheduler (vllm/v1/core/sched/scheduler.py, with its KVCacheManager,
prefix caching, chunked prefill, preemption and the "priority" policy) as a system
under test, driven on the CPU with a fake LM the way vLLM's own unit tests do:
schedule() -> a ModelRunnerOutput we make up -> update_from_output().

Install with `scripts/install-engine.sh vllm` (vLLM without its CUDA stack; pinned in
constraints-vllm.txt). Config mapping: block_size; num_blocks usable blocks (vLLM
reserves one more as its null block); max_num_seqs; max_num_batched_tokens;
prefill_chunk_size as long_prefill_token_threshold; prefix_caching; policy
"priority" with priority_preemption, else "fcfs"; max_loras as its LoRAConfig's
(LoRA is always on; a request's `lora` becomes its LoRARequest, whose weights
are never loaded). A request's `grammar_ready` gives it structured output,
compiled by vLLM's StructuredOutputManager through the fakes of
adapters/vllm_grammar.py. With `spec_tokens`, speculative decoding is on
(ngram's `SpeculativeConfig`): drafts are proposed and verified by the fakes of
adapters/vllm_drafts.py. A KV connector is always on (kv_consumer, failures
recomputed): a request's `kv_load_steps` has its prompt's full pages loaded
through it, by the fake of adapters/vllm_kv_connector.py. The config's pause
sets the scheduler's own pause state (`set_pause_state`) at its first and
after its last step. Under `async_scheduling` vLLM's AsyncScheduler runs behind
the engine core's batch queue of two: a step schedules its batch, then takes
the output of the batch before. The fields vLLM has no notion
of are pinned (incremental allocation, no watermark; the plain-engine profile of
sut/protocol.py pins the looped-model fields: a preempted request recomputes, keeping its tokens).

The fake LM's token is a hash of the request's whole token sequence so far,
so a recompute yields the same tokens and a wrong context would not.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

from loopcheck.adapters.fake_lm import TINY_LM_DIR
from loopcheck.adapters.step_executor import StepExecutor
from loopcheck.adapters.vllm_drafts import Drafter, verify
from loopcheck.adapters.vllm_grammar import BACKEND, FakeGrammarBackend
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import (
    Abort,
    Admit,
    Arrive,
    Draft,
    Event,
    Finish,
    Load,
    Preempt,
    Prefill,
    RequestOutput,
    Resume,
    Token,
)
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import Capabilities, Observation, Refused

PINNED: dict[str, Any] = dict(allocation="incremental", watermark_blocks=0, execution="mixed")
_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "error": "rejected"}


@functools.lru_cache(maxsize=256)
def engine_config(block_size: int, prefix_caching: bool, max_num_seqs: int, max_num_batched_tokens: int,
                  long_prefill: int, policy: str, max_loras: int, spec_tokens: int, async_scheduling: bool) -> Any:
    """vLLM's VllmConfig for these scheduler settings, built once per process
    and shared by the runs that use them (building one validates the model's
    config and the platform: about 13 ms, more than a whole run of vLLM's
    scheduler). vLLM's scheduler, KV cache manager and block pool only read it;
    each run builds its own of those. The pool's size is not part of it: it is
    set before each Scheduler is built, which reads it once."""
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        KVEventsConfig,
        KVTransferConfig,
        LoRAConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    from loopcheck.adapters import vllm_kv_connector  # (imports vLLM: after the logging level is set)

    sched = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                            max_model_len=65536, enable_chunked_prefill=True, is_encoder_decoder=False,
                            long_prefill_token_threshold=long_prefill, policy=policy,
                            async_scheduling=async_scheduling)
    model = ModelConfig(model=str(TINY_LM_DIR), skip_tokenizer_init=True, dtype="float32", seed=0,
                        max_model_len=65536)
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=prefix_caching)
    events = KVEventsConfig(enable_kv_cache_events=True, publisher="null")   # (read after each schedule())
    transfer = KVTransferConfig(kv_connector=vllm_kv_connector.CONNECTOR, kv_role="kv_consumer",
                                kv_connector_module_path=vllm_kv_connector.__name__,
                                kv_load_failure_policy="recompute")
    parallel = ParallelConfig()
    drafts = SpeculativeConfig(method="ngram", num_speculative_tokens=spec_tokens, prompt_lookup_min=1,
                               prompt_lookup_max=spec_tokens, target_model_config=model,
                               target_parallel_config=parallel) if spec_tokens else None
    return VllmConfig(scheduler_config=sched, model_config=model, cache_config=cache, parallel_config=parallel,
                      device_config=DeviceConfig(device="cpu"), kv_events_config=events,
                      lora_config=LoRAConfig(max_loras=max_loras, max_lora_rank=8), kv_transfer_config=transfer,
                      speculative_config=drafts)


@dataclass(frozen=True)
class Batch:
    """A batch scheduled: vLLM's SchedulerOutput, the step that scheduled it,
    the requests that sample a token in it (not in the middle of a prompt),
    and, under async scheduling, the work it does past the tokens known when
    it was scheduled (request, start, end: a decode whose input is the token
    of the batch in flight)."""

    output: Any
    step: int
    sampling: frozenset[str]
    unknown: tuple[tuple[str, int, int], ...]


class VllmSUT:
    """One vLLM Scheduler with a fake LM runner."""

    def __init__(self, cfg: Config) -> None:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")   # before vLLM's first import
        logging.getLogger("vllm").setLevel(logging.ERROR)   # (also where vLLM leaves its loggers unconfigured)
        import torch
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        self.cfg = cfg
        self.capabilities = Capabilities(kv=True, state_key=True, priorities=cfg.priority_preemption,
                                         pinned=PINNED, block_tables=True, code=("vllm.v1.core",),
                                         refuses=("prompt_only",), cached_pages=True,
                                         features=("lora", "grammar", "kv_transfer", "spec", "pause",
                                                   "async_scheduling"))
        bs = cfg.block_size
        long_prefill = cfg.prefill_chunk_size if cfg.prefill_chunk_size < cfg.max_num_batched_tokens else 0
        if cfg.async_scheduling and cfg.spec_tokens:
            raise WorkloadError("config.async_scheduling: the vLLM adapter runs it without speculative decoding "
                                f"(spec_tokens 0), got spec_tokens {cfg.spec_tokens}")
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:
            raise WorkloadError(f"config.max_num_batched_tokens: vLLM needs at least max_num_seqs "
                                f"({cfg.max_num_seqs}), got {cfg.max_num_batched_tokens}")
        vllm_config = engine_config(bs, cfg.prefix_caching, cfg.max_num_seqs, cfg.max_num_batched_tokens,
                                    long_prefill, "priority" if cfg.priority_preemption else "fcfs", cfg.max_loras,
                                    cfg.spec_tokens, cfg.async_scheduling)
        blocks = cfg.num_blocks + 1   # vLLM's block 0 is its reserved null block
        kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(
            ["layer"], FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32))])
        vllm_config.cache_config.num_gpu_blocks = blocks   # (read once, by the Scheduler's constructor)
        grammars = StructuredOutputManager(vllm_config)
        grammars.backend, grammars.backend_name = FakeGrammarBackend(cfg.vocab_size), BACKEND
        self.compiler = grammars.executor = StepExecutor()   # (its thread pool, absent without a tokenizer)
        scheduler_class = AsyncScheduler if cfg.async_scheduling else Scheduler   # (the engine core's choice)
        self.scheduler = scheduler_class(vllm_config=vllm_config, kv_cache_config=kv,
                                         structured_output_manager=grammars, block_size=bs, log_stats=False)
        from vllm.utils.hashing import sha256_cbor

        init_none_hash(sha256_cbor)
        self.hasher = self._naming(get_request_block_hasher(bs, sha256_cbor))
        self.connector = self.scheduler.connector
        self.loaded: dict[str, int] = {}   # request -> where its load started, until it is admitted (none if failed)
        self.pending: list[tuple[RequestSpec, Any]] = []   # (request, its vLLM SamplingParams)
        self.specs: dict[str, RequestSpec] = {}
        self.drafter = Drafter(cfg.spec_tokens, cfg.vocab_size)
        self.aborts: list[str] = []
        self.outputs: dict[str, RequestOutput] = {}
        self.preempted: set[str] = set()
        self.page_tokens: dict[bytes, tuple[int, ...]] = {}   # a block hash -> the tokens 0..page end it stands for
        self.event_pages: dict[Any, tuple[int, ...]] = {}    # the same, by the hash vLLM's KV cache events name
        self.stored: list[tuple[int, ...]] = []              # the pages vLLM's prefix cache registered this step
        self.steps = 0
        self.requesters: dict[str, str] = {}   # victim -> the request vLLM preempted it for, this step
        self.in_flight: Batch | None = None    # under async scheduling, the batch whose output comes next step
        self._watch_preemptions()
        self._watch_registrations()

    def _watch_preemptions(self) -> None:
        """Name each preemption's requester: vLLM preempts inside the loop that
        allocates a running request's slots, for that request. The scheduler's
        own `allocate_slots` and `_preempt_request` are wrapped on this instance
        to record which request was allocating when a victim was preempted; what
        they do is unchanged."""
        manager, scheduler = self.scheduler.kv_cache_manager, self.scheduler
        allocate, preempt = manager.allocate_slots, scheduler._preempt_request
        allocating: list[str] = []

        def allocate_slots(request: Any, *args: Any, **kwargs: Any) -> Any:
            allocating[:] = [request.request_id]
            return allocate(request, *args, **kwargs)

        def preempt_request(request: Any, *args: Any, **kwargs: Any) -> Any:
            if allocating:
                self.requesters[request.request_id] = allocating[0]
            return preempt(request, *args, **kwargs)

        manager.allocate_slots = allocate_slots
        scheduler._preempt_request = preempt_request

    def add(self, spec: RequestSpec) -> None:
        """Queue the request for the next step; `Refused` when vLLM's own
        SamplingParams validation refuses it as a client error (max_tokens 0)."""
        from vllm.exceptions import VLLMClientError
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams

        grammar = None
        if spec.grammar_ready is not None:
            grammar = StructuredOutputsParams(grammar="root ::= [a-z]*")
            grammar._backend = BACKEND   # (what vLLM's input processor sets, the backend resolved)
        try:
            params = SamplingParams(max_tokens=spec.max_tokens, ignore_eos=True, structured_outputs=grammar,
                                    stop_token_ids=[spec.stop_token] if spec.stop_token is not None else None)
        except VLLMClientError as exc:
            raise Refused(f"vLLM's SamplingParams refuses it: {exc}") from None
        self.pending.append((spec, params))

    def abort(self, rid: str) -> None:
        self.aborts.append(rid)

    def _request(self, spec: RequestSpec, params: Any) -> Any:
        from vllm.lora.request import LoRARequest
        from vllm.v1.request import Request

        lora = LoRARequest(f"adapter{spec.lora}", spec.lora, "/nonexistent/adapter") if spec.lora else None
        request = Request(request_id=spec.rid, prompt_token_ids=list(spec.prompt), sampling_params=params,
                          pooling_params=None, priority=spec.priority, lora_request=lora,
                          arrival_time=float(self.steps) + len(self.outputs) * 1e-6, block_hasher=self.hasher)
        if spec.kv_load_steps is not None:
            self.connector.offer(spec.rid, spec.kv_load_steps, spec.kv_load_fails)
        if request.use_structured_output:   # (as vLLM's engine core does before the scheduler sees it)
            self.compiler.label, self.compiler.due = spec.rid, spec.ready_at()
            self.scheduler.structured_output_manager.grammar_init(request)
        return request

    def step(self) -> list[Event]:
        """One engine-core step: arrivals and aborts, then `schedule()`, then
        the model output of a batch through `update_from_output`: this step's,
        or under async scheduling the previous step's (the batch scheduled now
        stays in flight), as vLLM's engine core runs its batch queue of two."""
        from vllm.v1.request import RequestStatus

        events: list[Event] = []
        for spec, params in self.pending:
            self.specs[spec.rid] = spec
            self.outputs[spec.rid] = RequestOutput(spec.rid, [], [], None)
            self.scheduler.add_request(self._request(spec, params))
            events.append(Arrive(spec.rid))
        self.pending = []
        live = [rid for rid in self.aborts if self.outputs[rid].finish_reason is None]
        self.aborts = []
        if live:
            self.scheduler.finish_requests(live, RequestStatus.FINISHED_ABORTED)
            for rid in live:
                events += [Abort(rid), Finish(rid, "abort")]
                self.outputs[rid].finish_reason = "abort"
        self.compiler.run_due(self.steps)
        self._pause()
        if self.cfg.async_scheduling:
            self._overlap(events)
        else:
            self._update(self._schedule(events), events)
        self.steps += 1
        return events

    def _overlap(self, events: list[Event]) -> None:
        """Under async scheduling, as the engine core's batch queue of two:
        schedule this step's batch (when the scheduler has requests), take the
        output of the batch in flight, keep the new one in flight; then report
        the new batch's decodes whose input token just came, and ask for its
        grammar bitmask if it waited for those tokens."""
        from vllm.v1.request import RequestStatus

        batch = self._schedule(events) if self.scheduler.has_requests() else None
        in_flight, self.in_flight = self.in_flight, batch
        if in_flight is not None:
            self._update(in_flight, events)
        if batch is None:
            return
        for rid, start, end in batch.unknown:
            r = self.scheduler.requests.get(rid)   # (a decode of a request that stopped or was preempted: moot)
            if r is not None and r.status == RequestStatus.RUNNING and end <= r.num_tokens:
                events.append(Prefill(rid, start, end))
        if batch.output.pending_structured_output_tokens:
            self.scheduler.get_grammar_bitmask(batch.output)   # (deferred until the outputs it waits for came)

    def _schedule(self, events: list[Event]) -> Batch:
        """`schedule()`, its events appended to `events`; the batch."""
        self.requesters = {}
        self.connector.step = self.steps
        so = self.scheduler.schedule()
        if not so.pending_structured_output_tokens:
            self.scheduler.get_grammar_bitmask(so)   # (as the engine core asks before the model runs; all allowed)
        self.stored = []
        for rid in sorted(so.preempted_req_ids or ()):
            self.preempted.add(rid)
            by = self.requesters.get(rid)
            events.append(Preempt(rid, by if by in self.outputs else None))
        for rid, load in self.connector.take_started():
            self.loaded[rid] = load.start
            events.append(Load(rid, load.start, load.end))
        reqs = self.scheduler.requests
        new = {r.req_id for r in so.scheduled_new_reqs} | set(getattr(so.scheduled_cached_reqs, "resumed_req_ids",
                                                                        ()) or ())
        bs = self.cfg.block_size
        unknown: list[tuple[str, int, int]] = []
        for rid, n in so.num_scheduled_tokens.items():
            r = reqs[rid]
            start = r.num_computed_tokens - n
            drafts = list(so.scheduled_spec_decode_tokens.get(rid, ()))
            n -= len(drafts)   # (the positions of the request's own tokens)
            if rid in new:
                hits = self.loaded.pop(rid, start) // bs   # (a load's positions are no prefix hits)
                if rid in self.preempted:
                    self.preempted.discard(rid)
                    events.append(Resume(rid, hits, 0))
                else:
                    events.append(Admit(rid, hits))
            if self.cfg.async_scheduling and start + n > r.num_tokens:
                unknown.append((rid, start, start + n))   # (its input token is in flight: reported once it came)
            elif self.cfg.async_scheduling or start < r.num_tokens - 1 or n > 1:
                events.append(Prefill(rid, start, start + n))   # (sync: a last position shows by its token)
            if drafts:
                events.append(Draft(rid, len(drafts)))
        sampling = frozenset(rid for rid in so.num_scheduled_tokens if not reqs[rid].is_prefill_chunk)
        return Batch(so, self.steps, sampling, tuple(unknown))

    def _update(self, batch: Batch, events: list[Event]) -> None:
        """The fake model's output of `batch` through
        `update_from_output`, its tokens and finishes appended to `events`: each
        request of `batch.sampling` samples a token (the fake LM's, from its
        tokens now), and one more per draft it verified and kept."""
        from vllm.v1.outputs import ModelRunnerOutput

        so, reqs = batch.output, self.scheduler.requests
        ids = list(so.num_scheduled_tokens)
        sampled = [verify(list(reqs[rid].all_token_ids), list(so.scheduled_spec_decode_tokens.get(rid, ())))
                   if rid in batch.sampling and rid in reqs else [] for rid in ids]
        self.connector.step = batch.step   # (the loads that end with this batch's model output)
        transfers, failed = self.connector.finished()
        for rid in failed:
            self.loaded.pop(rid, None)
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                                sampled_token_ids=sampled, kv_connector_output=transfers)
        engine_out = self.scheduler.update_from_output(so, mro)
        for client_out in engine_out.values():
            for o in client_out.outputs:
                out = self.outputs[o.request_id]
                for tok in o.new_token_ids:
                    events.append(Token(o.request_id, len(out.token_ids), tok))
                    out.token_ids.append(tok)
                    out.exit_depths.append(1)
                if o.finish_reason is not None and out.finish_reason is None:
                    reason = _REASONS.get(str(o.finish_reason).lower().split(".")[-1], "rejected")
                    out.finish_reason = reason
                    events.append(Finish(o.request_id, reason))
        self._propose_drafts(ids)

    def _pause(self) -> None:
        """Set the scheduler's pause state for this step as the config's pause
        says, as vLLM's engine core does when its operator pauses or resumes
        generation (`set_pause_state`), where it changes."""
        from vllm.v1.core.sched.interface import PauseState

        state = {None: PauseState.UNPAUSED, "new": PauseState.PAUSED_NEW,
                 "all": PauseState.PAUSED_ALL}[self.cfg.paused(self.steps)]
        if self.scheduler.pause_state != state:
            self.scheduler.set_pause_state(state)

    def _propose_drafts(self, ids: list[str]) -> None:
        """Under speculative decoding, give each request of the step still
        decoding its drafts for the next, as vLLM's engine core passes the
        proposer's on (`update_draft_token_ids`)."""
        from vllm.v1.outputs import DraftTokenIds

        if not self.cfg.spec_tokens:
            return
        reqs = self.scheduler.requests
        decoding = [rid for rid in ids if rid in reqs and not (reqs[rid].is_finished() or reqs[rid].is_prefill_chunk)]
        drafts = [self.drafter.propose(rid, list(reqs[rid].all_token_ids), self.specs[rid].spec_accepts)
                  for rid in decoding]
        self.scheduler.update_draft_token_ids(DraftTokenIds(decoding, drafts))

    def observe(self) -> Observation:
        s = self.scheduler
        free_ids = tuple(b.block_id for b in s.kv_cache_manager.block_pool.free_block_queue.get_all_free_blocks())
        key = (tuple((rid, int(r.status), r.num_computed_tokens, len(r.output_token_ids), tuple(r.spec_token_ids),
                      self.drafter.rounds.get(rid, 0)) for rid, r in sorted(s.requests.items())),
               tuple(r.request_id for r in s.running), tuple(r.request_id for r in s.waiting), free_ids,
               self.compiler.pending(self.steps), self.connector.pending(), tuple(sorted(self.loaded.items())),
               max(0, self.cfg.pause_end - self.steps), self._overlap_key())
        # (not `has_unfinished_requests`: paused, the scheduler reports none, so that its engine core idles; and a
        # batch in flight is work left, its output to come)
        unfinished = bool(self.pending) or sum(s.get_request_counts()) > 0 or self.in_flight is not None
        return Observation(blocks_held=self.cfg.num_blocks - len(free_ids), kv_errors=self._kv_errors(free_ids),
                           outputs=self.outputs, unfinished=unfinished,
                           state_key=key, block_tables=self._block_tables(), cached_pages=self._cached_pages(),
                           registered_pages=sorted(set(self.stored)))

    def _overlap_key(self) -> tuple:
        """Under async scheduling, the state of the overlap: the batch in flight
        (what it scheduled, who samples), each request's output placeholders and
        in-flight and stale tokens, the deferred frees by how far their fence
        is ahead, and the finished requests the next batch will name (the engine
        core schedules while there are any); () otherwise."""
        if not self.cfg.async_scheduling:
            return ()
        s, batch = self.scheduler, self.in_flight
        flight = None if batch is None else (tuple(sorted(batch.output.num_scheduled_tokens.items())),
                                             tuple(sorted(batch.sampling)))
        requests = tuple((rid, r.num_output_placeholders, r.num_in_flight_tokens, r.num_stale_output_tokens,
                          r.drop_stale_output) for rid, r in sorted(s.requests.items()))
        frees = tuple((fence - s.processed_step_seq, tuple(b.block_id for b in blocks))
                      for fence, blocks in s.deferred_frees)
        return flight, requests, frees, s.sched_step_seq - s.processed_step_seq, tuple(sorted(s.finished_req_ids))

    def _naming(self, hasher: Any) -> Any:
        """vLLM's request block hasher, naming each page it hashes: the tokens
        from position 0 to the page's end that the hash stands for (by the hash
        itself and by the form vLLM's KV cache events give it). Every hash vLLM
        caches is one its requests computed, when their tokens came."""
        from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

        bs = self.cfg.block_size

        def named(request: Any) -> list[Any]:
            hashes = hasher(request)
            tokens = request.all_token_ids
            for k, h in enumerate(hashes, len(request.block_hashes)):
                self.page_tokens[h] = self.event_pages[maybe_convert_block_hash(h)] = tuple(tokens[:(k + 1) * bs])
            return hashes
        return named

    def _watch_registrations(self) -> None:
        """Keep the pages vLLM's prefix cache registers in a step (`stored`):
        its own KV cache events (`BlockStored`), as `update_from_output` takes
        them at the step's end (those of `schedule()` and those of caching the
        tokens a step accepted, under speculative decoding); a page registered
        and then dropped again in the same pass (its block taken by another
        request) is among them. The KV cache manager's `take_events` is
        wrapped on this instance; what it returns is unchanged."""
        from vllm.distributed.kv_events import BlockStored

        manager = self.scheduler.kv_cache_manager
        take = manager.take_events

        def take_events() -> Any:
            events = take()
            self.stored += [self.event_pages[h] for e in events if isinstance(e, BlockStored) for h in e.block_hashes]
            return events
        manager.take_events = take_events

    def _cached_pages(self) -> list[tuple[int, ...]]:
        """The pages in vLLM's prefix cache (its hash-to-block map, one KV cache
        group), each as the tokens it stands for, in a fixed order."""
        from vllm.v1.core.kv_cache_utils import get_block_hash

        cached = self.scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block._cache
        return sorted(self.page_tokens[get_block_hash(key)] for key in cached)

    def _block_tables(self) -> dict[str, list[list[int]]]:
        """Per request holding blocks, its blocks in page order (the one KV cache
        group's; vLLM's null block left out)."""
        (manager,) = self.scheduler.kv_cache_manager.coordinator.single_type_managers
        return {rid: [[b.block_id] for b in blocks if not b.is_null]
                for rid, blocks in manager.req_to_blocks.items() if blocks}

    def _kv_errors(self, free_ids: tuple[int, ...]) -> list[str]:
        """Every block's ref count equals the requests that hold it (and the
        frees vLLM defers while a batch in flight may write them); the free queue
        (`free_ids`, in order) holds exactly the unreferenced blocks; finished
        requests hold none."""
        from collections import Counter

        pool = self.scheduler.kv_cache_manager.block_pool
        holders: Counter[int] = Counter()
        for manager in self.scheduler.kv_cache_manager.coordinator.single_type_managers:
            for rid, blocks in manager.req_to_blocks.items():
                if (self.outputs.get(rid) is not None and self.outputs[rid].finish_reason is not None and blocks
                        and rid not in self.connector.transfers):   # (held until its load ends, as vLLM does)
                    return [f"finished request {rid} still holds {len(blocks)} blocks"]
                holders.update(b.block_id for b in blocks if not b.is_null)
        for _, blocks in self.scheduler.deferred_frees:   # (freed once the batch that may write them came back)
            holders.update(b.block_id for b in blocks if not b.is_null)
        errors = [f"block {b.block_id}: ref count {b.ref_cnt} != {holders[b.block_id]} holders"
                  for b in pool.blocks[1:] if b.ref_cnt != holders[b.block_id]]
        unreferenced = sum(b.ref_cnt == 0 for b in pool.blocks[1:])
        if len(free_ids) != unreferenced or len(set(free_ids)) != len(free_ids):
            errors.append(f"free queue holds {len(free_ids)} blocks, {unreferenced} are unreferenced")
        return errors
