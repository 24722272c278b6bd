"""The fake behind KV transfer in the vLLM adapter: vLLM's scheduler runs with a
KV connector (its KVConnectorBase_V1 interface, scheduler role) whose store and
transfer are made up. The store holds the full pages of the prompt of each
request that asks for a load (`RequestSpec.kv_load_steps`), once: what vLLM has
not computed locally is offered to it as an asynchronous load. The transfer moves
nothing: it ends `kv_load_steps` steps after vLLM started it, the step it started
in counted, reported through the model runner's KVConnectorOutput
(`finished_recving`, and, for a load that fails, every block it was loading in
`invalid_block_ids`, as a connector reports blocks that failed to load). What
the scheduler does meanwhile (WAITING_FOR_REMOTE_KVS, the KV-holding queue, the
reservation of in-flight loads, promoting, caching and recomputing after a
failure, holding an aborted request's blocks until its load ends) is vLLM's
code. The worker-role methods are never called on the CPU: they do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata

CONNECTOR = "FakeKVConnector"   # the class vLLM's KVConnectorFactory builds (kv_connector_module_path: this module)


class NoMetadata(KVConnectorMetadata):
    """What the scheduler would send the workers: nothing (they move nothing)."""


@dataclass(frozen=True)
class Transfer:
    """A load vLLM started: positions [start, end) of the request, into
    `blocks`, ending with the model output of step `last_step`."""

    start: int
    end: int
    blocks: tuple[int, ...]
    last_step: int
    fails: bool


class FakeKVConnector(KVConnectorBase_V1):
    """The scheduler-role connector. The adapter names each request's load
    (`offer`) before vLLM sees it, sets `step` before each step, takes the loads
    vLLM started in it (`take_started`) and the connector output of its model
    run (`finished`)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.block_size = vllm_config.cache_config.block_size
        self.step = 0
        self.offers: dict[str, tuple[int, bool]] = {}   # request -> (load steps, fails), until its load starts
        self.asked: dict[str, int] = {}                  # request -> the local positions vLLM asked past
        self.transfers: dict[str, Transfer] = {}         # loads in flight
        self.started: list[tuple[str, Transfer]] = []    # loads started in this step

    def offer(self, rid: str, steps: int, fails: bool) -> None:
        self.offers[rid] = (steps, fails)

    # ----- the scheduler role ----------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        stored = request.num_prompt_tokens // self.block_size * self.block_size
        if request.request_id not in self.offers or stored <= num_computed_tokens:
            return 0, False
        self.asked[request.request_id] = num_computed_tokens
        return stored - num_computed_tokens, True

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        rid = request.request_id
        if num_external_tokens == 0 or rid not in self.offers:
            return
        steps, fails = self.offers.pop(rid)
        start = self.asked.pop(rid)
        end = start + num_external_tokens
        (block_ids,) = blocks.get_block_ids()
        pages = block_ids[start // self.block_size:-(-end // self.block_size)]
        transfer = Transfer(start, end, tuple(pages), self.step + steps - 1, fails)
        self.transfers[rid] = transfer
        self.started.append((rid, transfer))

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return NoMetadata()

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        """Frees nothing itself, as a consumer's connector (NIXL's decode
        side): vLLM's scheduler holds the blocks of a request finished while
        its load is in flight until the load ends."""
        self.offers.pop(request.request_id, None)
        return False, None

    # ----- what the adapter reads --------------------------------------------------------
    def take_started(self) -> list[tuple[str, Transfer]]:
        started, self.started = self.started, []
        return started

    def finished(self) -> tuple[Any, list[str]]:
        """The KVConnectorOutput of this step's model run (None when no load
        ends with it): the loads that end, and the blocks of those that fail;
        and the requests whose load failed."""
        from vllm.v1.outputs import KVConnectorOutput

        ending = sorted(rid for rid, t in self.transfers.items() if t.last_step <= self.step)
        if not ending:
            return None, []
        failed = [rid for rid in ending if self.transfers[rid].fails]
        invalid = {b for rid in failed for b in self.transfers[rid].blocks}
        for rid in ending:
            del self.transfers[rid]
        return KVConnectorOutput(finished_recving=set(ending), invalid_block_ids=invalid), failed

    def pending(self) -> tuple[tuple[str, int, bool], ...]:
        """The loads in flight: (request, steps until the one they end with, fails), sorted."""
        return tuple(sorted((rid, t.last_step - self.step, t.fails) for rid, t in self.transfers.items()))

    # ----- the worker role: never called on the CPU ----------------------------------------
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        pass

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        pass

    def wait_for_save(self) -> None:
        pass
