"""SGLang's scheduler (sglang/srt/managers: `Scheduler` with its SchedulePolicy,
PrefillAdder, chunked prefill, decode retraction and priority preemption,
ScheduleBatch and its batch-result processor; sglang/srt/mem_cache: the radix
prefix cache, the request-to-token pool and the paged KV allocator) as a system
under test, on the CPU with a fake LM worker.

Install with `scripts/install-engine.sh sglang` (pinned in requirements-sglang.txt).
`Scheduler.__init__` itself runs; replaced, because they need a GPU, a model, a
process group or sockets: the model worker (it builds the two pools and the KV
buffer; here they are built on the CPU from the config, and its forward answers
a token per request, a hash of the sequence so far), the tree cache's build from
that worker (the same `create_tree_cache`, with no process groups), the IPC
channels and idle sleeper (sockets: outputs are read from the scheduler's own
request objects), the start-up timing summary (it reads load times), and the
process-group set-up (one rank). One loopcheck step is one turn of
`Scheduler.event_loop_normal`. The config mapping and what is pinned are in
docs/engines/sglang.md.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
import warnings
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

from loopcheck.adapters.fake_lm import TINY_LM_DIR, VOCAB, fake_token
from loopcheck.adapters.sglang_grammar import fake_backend
from loopcheck.adapters.step_clock import install_step_clock
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Abort, Admit, Arrive, Event, Finish, Preempt, Prefill, RequestOutput, Resume, Token
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import Capabilities, Observation, Refused, VictimOrder

PINNED: dict[str, Any] = dict(allocation="incremental", watermark_blocks=0)


def retraction_key(prompt_len: int, tokens: int, priority: int) -> tuple[int, int]:
    """SGLang's default retraction policy ("length"): the fewest output tokens
    first, then the longest prompt (ScheduleBatch._get_decode_retraction_order
    sorts by (len(output_ids), -len(origin_input_ids)) and retract_decode pops
    from the end); larger is retracted first."""
    return -tokens, prompt_len


RETRACTION_ORDER = VictimOrder(retraction_key, "SGLang's retract_decode (retraction_policy 'length')")
# the scheduling modules that order by time (loopcheck.adapters.step_clock)
CLOCK_USERS = ("sglang.srt.observability.req_time_stats", "sglang.srt.managers.scheduler")
# what SGLang's import graph takes from torchvision (sglang/srt/multimodal/internvl_utils.py)
TORCHVISION_IMPORTS = ("torchvision", "torchvision.transforms", "torchvision.transforms.functional")
_REASONS = {"FINISH_LENGTH": "length", "FINISH_MATCHED_TOKEN": "stop", "FINISH_ABORT": "abort"}


ABORT_REPLY = "Aborted by AbortReq."   # SGLang's finish message for a request its client aborted


@functools.cache
def _import_scheduler() -> Any:
    """SGLang's scheduler module, importable on a Linux CPU machine: SGLang
    imports triton at its top, and ships a stand-in for it
    (sglang/_platform_stubs.py) that it installs only on Apple Silicon; it is
    installed here as if on one. SGLang's model configs import torchvision
    (for image models only); where it is not installed (it is not in
    requirements-sglang.txt: PyPI's wheel is a CUDA build that fails beside a
    CPU torch), stand-ins from the same stubs serve that import and are then
    removed, so that nothing else in the process sees a torchvision. SGLang's
    error line for each aborted request is filtered out. Once per process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'sglang' (install with scripts/install-engine.sh sglang)")
    path = Path(spec.submodule_search_locations[0]) / "_platform_stubs.py"
    stubs_spec = importlib.util.spec_from_file_location("sglang._platform_stubs", path)
    assert stubs_spec is not None and stubs_spec.loader is not None
    stubs = importlib.util.module_from_spec(stubs_spec)
    sys.modules[stubs_spec.name] = stubs
    stubs_spec.loader.exec_module(stubs)
    with mock.patch.object(stubs.sys, "platform", "darwin"), \
            mock.patch.object(stubs.platform, "machine", lambda: "arm64"), \
            mock.patch.object(torch.backends.mps, "is_available", lambda: True):
        stubs.install_platform_stubs()
    import transformers.image_utils  # noqa: F401 - imported before the stand-ins, so it sees no torchvision

    stand_ins = [] if importlib.util.find_spec("torchvision") else [
        stubs._make_mock(name) for name in TORCHVISION_IMPORTS]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from sglang.srt.managers import scheduler
    finally:
        for module in stand_ins:
            del sys.modules[module.__name__]
    logging.getLogger("sglang").setLevel(logging.ERROR)
    # (SGLang logs a client's abort as an error of the request, once per abort: the protocol's aborts are inputs)
    logging.getLogger("sglang.srt.managers.schedule_batch").addFilter(
        lambda record: not record.getMessage().startswith(ABORT_REPLY))
    _one_rank()
    return scheduler


def _one_rank() -> None:
    """This process as the only rank of every parallel group (what SGLang's
    process-group set-up would record for one GPU)."""
    from sglang.srt.runtime_context import _derived_widths, get_parallel

    group = SimpleNamespace(cpu_group=None, device_group=None, world_size=1, rank_in_group=0, rank=0, ranks=[0],
                            first_rank=0, last_rank=0, is_first_rank=True, is_last_rank=True, local_rank=0)
    get_parallel().override_permanently(**{name: group if name.endswith("_group") else 0
                                           for name, declared in _derived_widths().items() if not declared.fn})


PUBLISHED_KEPT = 8   # server-argument sets kept published per process (an exploration alternates a few configs)
# the published state of each server-argument set (its fields as a key): what SGLang's override_server_args
# publishes, and its `restore` sets back (runtime_context.py, `_ServerArgsOverride`), most recently used last
_PUBLISHED: OrderedDict[tuple, tuple[Any, ...]] = OrderedDict()


def _server_args(cfg: Config) -> Any:
    """SGLang's server arguments for `cfg`, published as SGLang's tests publish
    them (`override_server_args`). Publishing costs more than building the
    scheduler, so the published state of the last PUBLISHED_KEPT sets is kept
    and set back, as the override's own `restore` sets it, when a system of
    the same set is built again (a scheduler only reads them)."""
    from sglang.srt.runtime_context import get_context

    fields = dict(
        model_path=str(TINY_LM_DIR), device="cpu", skip_tokenizer_init=True, disable_overlap_schedule=True,
        page_size=cfg.block_size, max_running_requests=cfg.max_num_seqs,
        max_prefill_tokens=cfg.max_num_batched_tokens, chunked_prefill_size=cfg.max_num_batched_tokens,
        enable_mixed_chunk=cfg.execution == "mixed", disable_radix_cache=not cfg.prefix_caching,
        enable_priority_scheduling=cfg.priority_preemption, schedule_low_priority_values_first=True,
        priority_scheduling_preemption_threshold=0, schedule_policy="fcfs", random_seed=0)
    key = tuple(sorted(fields.items()))
    ctx = get_context()
    if key not in _PUBLISHED:
        ctx.override_server_args(**fields).install()
        if len(_PUBLISHED) >= PUBLISHED_KEPT:
            _PUBLISHED.popitem(last=False)
        _PUBLISHED[key] = (ctx._server_args, ctx._config_bags, ctx._overrides_log, ctx._publish_role,
                           ctx.parallel._config, ctx.flags.capture.enable_torch_compile)
    _PUBLISHED.move_to_end(key)
    (ctx._server_args, ctx._config_bags, ctx._overrides_log, ctx._publish_role, ctx.parallel._config,
     ctx.flags.capture.enable_torch_compile) = _PUBLISHED[key]
    return ctx._server_args


@functools.cache
def _cpu_scheduler_class() -> type:
    """`Scheduler` with the steps of its `__init__` that need a GPU, a model or
    sockets replaced; everything else in `__init__` runs as written (made once
    per process)."""
    Scheduler = _import_scheduler().Scheduler

    class CpuScheduler(Scheduler):
        cfg: Config

        def init_ipc_channels(self, port_args: Any) -> None:
            """(no sockets: outputs are read from the requests)"""
            from sglang.srt.managers.scheduler_components.output_sender import SenderWrapper

            self.ipc_channels = SimpleNamespace(recv_from_tokenizer=None, recv_from_rpc=None,
                                                send_to_tokenizer=SenderWrapper(None),
                                                send_to_detokenizer=SenderWrapper(None),
                                                send_metrics_from_scheduler=None)
            self.load_snapshot_writer = self.recv_from_tokenizer = None

        def init_idle_sleeper(self) -> None:
            self.idle_sleeper = None

        def init_startup_timing_summary(self) -> None:
            """(no startup timing: nothing was loaded)"""

        def init_model_worker(self) -> None:
            """The pools a model worker would build, on the CPU, sized by the
            config; the worker's limits as it reports them; a fake worker."""
            import torch
            from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
            from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
            from sglang.srt.runtime_context import get_context, get_parallel

            cfg, page = self.cfg, self.cfg.block_size
            tokens = cfg.num_blocks * page
            self.max_total_num_tokens, self.max_prefill_tokens = tokens, cfg.max_num_batched_tokens
            self.max_running_requests, self.max_queued_requests = cfg.max_num_seqs, None
            # the request limits as TpModelWorker.get_worker_info derives them
            self.max_req_len = min(self.model_config.context_len - 1, tokens - 1)
            self.max_req_input_len = self.max_req_len - 5
            self.random_seed, self.device, self.forward_stream, self.schedule_stream = 0, "cpu", None, None
            self.req_to_token_pool = ReqToTokenPool(size=cfg.max_num_seqs, max_context_len=self.max_req_len + page,
                                                    device="cpu", enable_memory_saver=False)
            kv = MHATokenToKVPool(size=tokens, page_size=page, dtype=torch.float16, head_num=1, head_dim=1,
                                  layer_num=1, device="cpu", enable_memory_saver=False)
            if page == 1:
                self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(size=tokens, dtype=torch.float16,
                                                                         device="cpu", kvcache=kv, need_sort=False)
            else:
                self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(
                    size=tokens, page_size=page, dtype=torch.float16, device="cpu", kvcache=kv, need_sort=False)
            self.tp_worker = self.model_worker = _FakeWorker(self.model_config)
            self.draft_worker = self.min_free_slots_delayer = self.pad_input_ids_func = None
            self.kv_cache_allocation_time = 0.0
            group = get_parallel().tp_group
            for name in ("tp_group", "tp_cpu_group", "attn_tp_group", "attn_tp_cpu_group", "attn_cp_group",
                         "attn_cp_cpu_group", "pp_group", "world_group", "dp_tp_group", "dp_tp_cpu_group"):
                setattr(self, name, group)
            if not get_parallel().pp_max_micro_batch_size:
                get_context().override("loopcheck", pp_max_micro_batch_size=max(cfg.max_num_seqs, 1))

    return CpuScheduler


class _FakeWorker:
    """Stands in for SGLang's TP model worker: `forward_batch_generation`
    answers, per request of the batch, a token that is a hash of its prompt and
    tokens so far (SGLang keeps it only where the forward reaches the end of
    the sequence), or, as the worker does for a batch of prefill-only requests,
    placeholder zeros."""

    def __init__(self, model_config: Any) -> None:
        from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import (
            NgramEmbeddingManager,
        )

        self.model_config = model_config
        self.model_runner = SimpleNamespace(canary_manager=None, attn_backend=None, prefill_aware_swa=False,
                                            ngram_embedding_manager=NgramEmbeddingManager(enabled=False, table=None,
                                                                                          n=0))

    def forward_batch_generation(self, batch: Any, **_: Any) -> Any:
        import torch
        from sglang.srt.managers.utils import GenerationBatchResult

        tokens = [0 if batch.is_prefill_only else
                  fake_token([*map(int, req.origin_input_ids), *map(int, req.output_ids)]) for req in batch.reqs]
        return GenerationBatchResult(next_token_ids=torch.tensor(tokens, dtype=torch.long), can_run_cuda_graph=False)


def _build_tree_cache(scheduler: Any) -> Any:
    """`kv_cache_builder.build_kv_cache` for the pools `init_model_worker` built:
    SGLang's own `create_tree_cache` (the radix cache its defaults choose), with
    no process groups, on SGLang's Python tree core (its unit tests' choice; its
    Rust one, the serving default, implements the same interface but shows
    neither its nodes for the state key nor its lines to coverage)."""
    from sglang.srt.mem_cache import kv_cache_builder
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
    from sglang.srt.runtime_context import get_memory, get_schedule

    def build_kv_cache(**kwargs: Any) -> Any:
        disabled = get_memory().disable_radix_cache
        params = CacheInitParams(disable=disabled, req_to_token_pool=scheduler.req_to_token_pool,
                                 token_to_kv_pool_allocator=scheduler.token_to_kv_pool_allocator,
                                 page_size=kwargs["page_size"], tree_core_backend="python",
                                 chunked_prefill_size=get_schedule().chunked_prefill_size)
        context = TreeCacheBuildContext(server_args=kwargs["server_args"], params=params, is_hybrid_swa=False,
                                        full_tokens_per_layer=None, is_hybrid_ssm=False, is_dsa=False,
                                        enable_hierarchical_cache=False, disable_radix_cache=disabled,
                                        tp_worker=kwargs["tp_worker"], model_config=kwargs["model_config"],
                                        tp_size=1, tp_rank=0, tp_group=None)
        return kv_cache_builder.KVCacheBuildResult(
            is_hybrid_swa=False, is_hybrid_ssm=False, sliding_window_size=None, full_tokens_per_layer=None,
            swa_tokens_per_layer=None, req_to_token_pool=scheduler.req_to_token_pool,
            token_to_kv_pool_allocator=scheduler.token_to_kv_pool_allocator, disable_radix_cache=disabled,
            tree_cache=create_tree_cache(context))

    return build_kv_cache


class SglangSUT:
    """One SGLang scheduler with a fake LM worker."""

    def __init__(self, cfg: Config) -> None:
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:
            raise WorkloadError(f"config.max_num_batched_tokens: SGLang's budget is for prefill only (a decode "
                                f"batch is up to max_num_seqs tokens), so it must be at least max_num_seqs "
                                f"({cfg.max_num_seqs}), got {cfg.max_num_batched_tokens}")
        if cfg.max_num_batched_tokens % cfg.block_size:
            raise WorkloadError(f"config.max_num_batched_tokens: SGLang's chunked_prefill_size must be divisible by "
                                f"its page_size ({cfg.block_size}; arg_groups/validation_hook.py), got "
                                f"{cfg.max_num_batched_tokens}")
        module = _import_scheduler()
        install_step_clock(CLOCK_USERS)
        self.cfg = cfg
        self.capabilities = Capabilities(kv=True, state_key=True, priorities=False, pinned=PINNED,
                                         block_tables=True, features=("grammar",),
                                         # (a priority preemption is reported as a retraction is: the order is
                                         # claimed only where every such preemption is a retraction)
                                         victim_order=None if cfg.priority_preemption else RETRACTION_ORDER,
                                         code=("sglang.srt.managers.scheduler",
                                                                  "sglang.srt.managers.schedule_policy",
                                                                  "sglang.srt.managers.schedule_batch",
                                                                  "sglang.srt.managers.scheduler_components",
                                                                  "sglang.srt.mem_cache"))
        server_args = _server_args(cfg)
        scheduler_class = _cpu_scheduler_class()
        self.scheduler = scheduler = scheduler_class.__new__(scheduler_class)
        scheduler.cfg = cfg
        with mock.patch.object(module.bootstrap, "init_parallel_runtime", lambda **_: None), \
                mock.patch.object(module.bootstrap, "init_layer_runtime", lambda **_: None), \
                mock.patch.object(module, "create_scheduler_watchdog", lambda *_, **__: None), \
                mock.patch.object(module.kv_cache_builder, "build_kv_cache", _build_tree_cache(scheduler)):
            scheduler.__init__(server_args, SimpleNamespace(nccl_port=0))
        self.pending: list[RequestSpec] = []
        self.aborts: list[str] = []
        self.outputs: dict[str, RequestOutput] = {}
        self.reqs: dict[str, Any] = {}         # request -> SGLang's Req, in arrival order
        self.names: dict[str, str] = {}        # request -> the id SGLang knows it by
        self.rids: dict[str, str] = {}         # the id SGLang knows a request by -> the request
        self.admitted: set[str] = set()        # requests admitted once
        self.running: set[str] = set()         # admitted or resumed and not since preempted or finished
        grammars = scheduler.grammar_manager   # (its backend: the fake of adapters/sglang_grammar.py)
        grammars.grammar_backend = fake_backend(VOCAB)
        grammars.SGLANG_GRAMMAR_POLL_INTERVAL = 1e-4   # (a poll finds what is ready at once: jobs end between steps)
        self.compiler = grammars.grammar_backend.executor
        self.dropped: set[str] = set()   # requests aborted while their grammar compiled (`_abort`)
        self.steps = 0

    # -- the verbs -------------------------------------------------------------------

    def add(self, spec: RequestSpec) -> None:
        """Submit at the next step. A request SGLang's intake would cut (its
        `init_req_max_new_tokens` lowers max_new_tokens to what the pool and the
        context can take) or abort (a prompt past the input limit) is refused."""
        probe = SimpleNamespace(rid=spec.rid, origin_input_ids=list(spec.prompt), aborted=False,
                                sampling_params=SimpleNamespace(max_new_tokens=spec.max_tokens, min_new_tokens=0))
        probe.set_finish_with_abort = lambda *_, **__: setattr(probe, "aborted", True)
        self.scheduler.init_req_max_new_tokens(probe)
        if (probe.aborted or probe.sampling_params.max_new_tokens < spec.max_tokens
                or len(spec.prompt) >= self.scheduler.max_req_input_len):
            raise Refused("prompt + max_tokens exceeds what SGLang's intake takes for this pool "
                          "(init_req_max_new_tokens would cut max_tokens)")
        self.pending.append(spec)

    def abort(self, rid: str) -> None:
        self.aborts.append(rid)

    def step(self) -> list[Event]:
        events: list[Event] = []
        for spec in self.pending:
            events += self._arrive(spec)
        self.pending = []
        for rid in self.aborts:
            events += self._abort(rid)
        self.aborts = []
        self.compiler.run_due(self.steps)
        self.steps += 1
        scheduler = self.scheduler
        plan = scheduler.get_next_batch_to_run(running_batch=scheduler.running_batch, last_batch=scheduler.last_batch)
        scheduler.running_batch, batch = plan.running_batch, plan.batch_to_run
        events += self._preempted()
        if batch:
            events += self._work(batch)
            scheduler.process_batch_result(batch, scheduler.run_batch(batch))
        else:
            scheduler._sched_idled = True
            scheduler.on_idle()
        scheduler.last_batch = batch
        return events + self._answered()

    def _arrive(self, spec: RequestSpec) -> list[Event]:
        """Hand the request to SGLang's intake (`handle_generate_request`) as
        the tokenizer manager would, under an id no other is a prefix of
        (SGLang aborts by id prefix). A request without a stop token ignores
        EOS (it runs to max_tokens either way: the model has no EOS); one with a
        stop token cannot, as SGLang's ignore_eos also ignores stop tokens."""
        from array import array

        from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
        from sglang.srt.sampling.sampling_params import SamplingParams

        name = f"loopcheck-{len(self.names):09d}"
        self.names[spec.rid], self.rids[name] = name, spec.rid
        self.outputs[spec.rid] = RequestOutput(spec.rid, [], [], None)
        grammar = None if spec.grammar_ready is None else f'root ::= "{name}"'   # (one grammar a request)
        if grammar is not None:
            self.compiler.label, self.compiler.due = spec.rid, spec.ready_at()
        params = SamplingParams(max_new_tokens=spec.max_tokens, temperature=0.0, ignore_eos=spec.stop_token is None,
                                stop_token_ids=None if spec.stop_token is None else {spec.stop_token}, ebnf=grammar)
        params.normalize(None)
        params.verify(VOCAB)
        self.scheduler.handle_generate_request(TokenizedGenerateReqInput(
            rid=name, input_text=None, input_ids=array("q", spec.prompt), input_embeds=None, mm_inputs=None,
            token_type_ids=None, sampling_params=params, return_logprob=False, logprob_start_len=-1,
            top_logprobs_num=0, token_ids_logprob=None, stream=False,
            priority=spec.priority if self.cfg.priority_preemption else None))
        queued = self.scheduler.waiting_queue + self.scheduler.grammar_manager.grammar_queue
        self.reqs[spec.rid] = next(r for r in queued if r.rid == name)
        return [Arrive(spec.rid)]

    def _abort(self, rid: str) -> list[Event]:
        """SGLang's `abort_request`: a queued request ends at once; a running
        one is marked and ends at its next batch result (reported then). One
        waiting for its grammar is marked too: SGLang moves it to the waiting
        queue with its prompt cut to one placeholder token, which it prefills
        to end it; that work is not the request's and is not reported
        (`dropped`), its end is."""
        from sglang.srt.managers.io_struct import AbortReq

        if self.outputs[rid].finish_reason is not None:
            return []
        req = self.reqs[rid]
        if any(r is req for r in self.scheduler.grammar_manager.grammar_queue):
            self.dropped.add(rid)
        queued = any(r is req for r in self.scheduler.waiting_queue)
        self.scheduler.abort_request(AbortReq(rid=self.names[rid]))
        if queued and not any(r is req for r in self.scheduler.waiting_queue):
            return self._finish(rid, "abort")
        return []

    def _finish(self, rid: str, reason: str) -> list[Event]:
        self.outputs[rid].finish_reason = reason
        self.running.discard(rid)
        aborted = [Abort(rid)] if reason == "abort" else []
        return [*aborted, Finish(rid, reason)]

    def _preempted(self) -> list[Event]:
        """Running requests SGLang put back in its waiting queue (a decode
        retraction when the pool cannot grow, or a priority preemption); a
        retracted request keeps its tokens and recomputes them."""
        waiting = {id(r) for r in self.scheduler.waiting_queue}
        events = []
        for rid, req in self.reqs.items():
            if rid in self.running and id(req) in waiting:
                self.running.discard(rid)
                events.append(Preempt(rid))
        return events

    def _work(self, batch: Any) -> list[Event]:
        """Per request in the batch to run: its admission or resumption if it
        was not running, with the pages the radix cache gave it; then the
        positions [start, end) it computes (a decode's work shows as its
        token)."""
        events, page = [], self.cfg.block_size
        if not batch.forward_mode.is_extend():
            return []
        for req, start, length in zip(batch.reqs, batch.prefix_lens, batch.extend_lens, strict=True):
            rid = self.rids[req.rid]
            if rid in self.dropped:
                continue
            if rid not in self.running:
                self.running.add(rid)
                if rid in self.admitted:
                    events.append(Resume(rid, start // page, 0))
                else:
                    self.admitted.add(rid)
                    events.append(Admit(rid, start // page))
            known = len(req.origin_input_ids) + len(req.output_ids)
            if start < len(req.origin_input_ids) or start < known - 1 or length > 1:
                events.append(Prefill(rid, int(start), int(start + length)))
        return events

    def _answered(self) -> list[Event]:
        """New tokens and finishes, read from SGLang's requests: their output as
        SGLang streams it (`output_ids_through_stop`, cut at `finished_len`; so a
        prefill-only request, max_new_tokens 0, has none, although SGLang keeps a
        placeholder id in its output_ids)."""
        events = []
        for rid, req in self.reqs.items():
            mine = self.outputs[rid]
            if mine.finish_reason is not None:
                continue
            if rid in self.dropped:   # (its placeholder prefill's token is not an output)
                events += self._finish(rid, "abort") if req.finished_reason is not None else []
                continue
            for token in [int(t) for t in req.output_ids_through_stop][len(mine.token_ids):]:
                events.append(Token(rid, len(mine.token_ids), token))
                mine.token_ids.append(token)
                mine.exit_depths.append(1)
            if req.finished_reason is not None:
                events += self._finish(rid, _REASONS.get(type(req.finished_reason).__name__, "rejected"))
        return events

    # -- observation -------------------------------------------------------------------

    def observe(self) -> Observation:
        tables = self._block_tables()
        allocator, tree = self.scheduler.token_to_kv_pool_allocator, self.scheduler.tree_cache
        free_pages = (allocator.available_size() + tree.evictable_size()) // self.cfg.block_size
        unfinished = bool(self.pending) or any(o.finish_reason is None for o in self.outputs.values())
        return Observation(blocks_held=self.cfg.num_blocks - free_pages, kv_errors=self._kv_errors(),
                           outputs=self.outputs, unfinished=unfinished, state_key=self._state_key(),
                           block_tables=tables)

    def _block_tables(self) -> dict[str, list[list[int]]]:
        """Per running request, in arrival order, the pages of the KV positions
        it holds (its row of the request-to-token pool, to its allocated length)."""
        rows, page, tables = self.scheduler.req_to_token_pool.req_to_token, self.cfg.block_size, {}
        for rid, req in self.reqs.items():
            kv = req.kv
            if rid not in self.running or kv.req_pool_idx is None or kv.kv_allocated_len == 0:
                continue
            locations = rows[kv.req_pool_idx, :kv.kv_allocated_len].tolist()
            tables[rid] = [[int(locations[i]) // page] for i in range(0, len(locations), page)]
        return tables

    def _kv_errors(self) -> list[str]:
        """SGLang's own pool invariants, as its scheduler checks them between
        steps under SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY: free + evictable
        + protected + requests' private tokens == the pool; no page both owned
        and free; no page free twice."""
        from sglang.srt.environ import envs

        checker = self.scheduler.invariant_checker
        with envs.SGLANG_CHECK_KV_PAGE_INVARIANTS.override(True), \
                envs.SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE.override(True):
            try:
                checker.self_check_during_busy()
            except (AssertionError, ValueError) as error:
                return [str(error)]
        return []

    def _state_key(self) -> tuple[Any, ...]:
        """Everything the next steps depend on: each request's queue, tokens and
        KV lengths, in arrival order; the chunked request; the last batch (merged
        into the running one next step); the allocator's free pages in order;
        the radix tree; the admission estimate (new-token ratio)."""
        scheduler = self.scheduler
        where = {id(r): "waiting" for r in scheduler.waiting_queue}
        where.update({id(r): "grammar" for r in scheduler.grammar_manager.grammar_queue})
        where.update({id(r): "running" for r in scheduler.running_batch.reqs})
        requests = tuple((rid, where.get(id(req), "-"), len(req.output_ids), req.kv.kv_allocated_len,
                          req.kv.kv_committed_len, req.finished_reason is not None)
                         for rid, req in self.reqs.items())
        chunked = None if scheduler.chunked_req is None else scheduler.chunked_req.rid
        last = scheduler.last_batch
        last_batch = None if last is None else (int(last.forward_mode), tuple(r.rid for r in last.reqs))
        free = tuple(scheduler.token_to_kv_pool_allocator.get_all_free_pages().tolist())
        return (requests, chunked, last_batch, free, self._tree(), scheduler.new_token_ratio_tracker.current,
                self.compiler.pending(self.steps))

    def _tree(self) -> tuple[Any, ...]:
        """The radix tree: per node, depth first in key order, its tokens, its
        KV locations and its lock count."""
        nodes, stack = [], [(self.scheduler.tree_cache.tree_core.root_node, 0)]
        while stack:
            node, depth = stack.pop()
            data = node.component_data[0]
            value = () if data.value is None else tuple(int(v) for v in data.value)
            key = () if node.key is None else tuple(node.key.token_ids)
            nodes.append((depth, key, value, data.lock_ref))
            stack += [(child, depth + 1) for _, child in sorted(node.children.items(), key=lambda kv: str(kv[0]),
                                                                  reverse=True)]
        return tuple(nodes)
