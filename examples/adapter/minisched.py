"""A small continuous-batching scheduler with its own API, written the way small
serving engines write theirs (nothing of loopcheck is imported here): FCFS
queues, a paged KV block manager with a hash-keyed prefix cache and reference
counts, whole-prompt prefill (no chunking), decode steps separate from prefill
steps, recompute preemption of the last running sequence when a decode finds no
free block, and one global end-of-sequence token. The worked example of
docs/checking.md, "Writing an adapter", puts it behind loopcheck's protocol
(examples/adapter/minisched_adapter.py)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class Sequence:
    seq_id: str
    token_ids: list[int]          # the prompt, then the completion so far
    num_prompt_tokens: int
    max_tokens: int
    status: str = "waiting"       # waiting | running | finished
    block_table: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0    # leading tokens whose KV came from the prefix cache

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens


class BlockManager:
    """Fixed-size blocks; a full block of a prompt is kept in a table by the hash
    of every token up to its end, so later sequences with the same prefix share
    it. A freed block keeps its hash until it is reused."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.ref_count = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.hash_to_block: dict[int, int] = {}
        self.free_ids: deque[int] = deque(range(num_blocks))

    def _take(self, block: int) -> int:
        self.free_ids.remove(block)
        if self.hash_of[block] is not None and self.hash_to_block.get(self.hash_of[block]) == block:
            del self.hash_to_block[self.hash_of[block]]   # its old content is gone
        self.hash_of[block] = None
        self.ref_count[block] = 1
        return block

    def _cached(self, seq: Sequence, end: int) -> int | None:
        return self.hash_to_block.get(hash(tuple(seq.token_ids[:end])))

    def blocks_needed(self, seq: Sequence) -> int:
        """Fresh blocks allocating `seq`'s prompt takes (hits on free cached blocks count)."""
        need, hits = -(-len(seq.token_ids) // self.block_size), 0
        for k in range(len(seq.token_ids) // self.block_size):
            block = self._cached(seq, (k + 1) * self.block_size)
            if block is None or (k + 1) * self.block_size >= len(seq.token_ids):
                break
            hits += self.ref_count[block] > 0
        return need - hits

    def can_allocate(self, seq: Sequence) -> bool:
        return len(self.free_ids) >= self.blocks_needed(seq)

    def allocate(self, seq: Sequence) -> None:
        """Blocks for the whole prompt: leading full blocks from the cache (the last
        token is always computed), the rest fresh."""
        seq.num_cached_tokens = 0
        for k in range(-(-len(seq.token_ids) // self.block_size)):
            end = (k + 1) * self.block_size
            block = self._cached(seq, end) if end < len(seq.token_ids) and \
                seq.num_cached_tokens == k * self.block_size else None
            if block is not None:
                if self.ref_count[block] == 0:
                    self.free_ids.remove(block)
                self.ref_count[block] += 1
                seq.num_cached_tokens = end
            else:
                block = self._take(self.free_ids[0])
            seq.block_table.append(block)

    def publish(self, seq: Sequence) -> None:
        """After a prefill: register its full prompt blocks."""
        for k in range(len(seq.token_ids) // self.block_size):
            key = hash(tuple(seq.token_ids[:(k + 1) * self.block_size]))
            block = seq.block_table[k]
            if key not in self.hash_to_block and self.hash_of[block] is None:
                self.hash_to_block[key], self.hash_of[block] = block, key

    def deallocate(self, seq: Sequence) -> None:
        for block in reversed(seq.block_table):
            self.ref_count[block] -= 1
            if self.ref_count[block] == 0:
                self.free_ids.append(block)
        seq.block_table = []
        seq.num_cached_tokens = 0

    def can_append(self, seq: Sequence) -> bool:
        """Room for the token the next decode writes (a new block at a page boundary)."""
        return len(seq.token_ids) <= len(seq.block_table) * self.block_size or bool(self.free_ids)

    def may_append(self, seq: Sequence) -> None:
        if len(seq.token_ids) > len(seq.block_table) * self.block_size:
            seq.block_table.append(self._take(self.free_ids[0]))


class Scheduler:
    def __init__(self, max_num_seqs: int, max_num_batched_tokens: int, num_blocks: int, block_size: int,
                 eos: int) -> None:
        self.max_num_seqs, self.max_num_batched_tokens, self.eos = max_num_seqs, max_num_batched_tokens, eos
        self.block_manager = BlockManager(num_blocks, block_size)
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()

    def add(self, seq: Sequence) -> None:
        """Queue `seq`; ValueError if its prompt and tokens can never fit the cache."""
        manager = self.block_manager
        if -(-(len(seq.token_ids) + seq.max_tokens - 1) // manager.block_size) > len(manager.ref_count):
            raise ValueError(f"sequence {seq.seq_id} can never fit the KV cache")
        self.waiting.append(seq)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> tuple[list[Sequence], bool]:
        """The next batch and whether it is a prefill. Prefill first: waiting
        sequences in order while slots, token budget and blocks last; else one
        decode token for each running sequence, preempting from the back of the
        queue (the sequence itself, last) when a block is short."""
        assert not self.is_finished(), "schedule() with nothing to do"
        scheduled, tokens = [], 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if tokens + len(seq.token_ids) > self.max_num_batched_tokens or not self.block_manager.can_allocate(seq):
                break
            self.block_manager.allocate(seq)
            tokens += len(seq.token_ids) - seq.num_cached_tokens
            seq.status = "running"
            self.running.append(self.waiting.popleft())
            scheduled.append(seq)
        if scheduled:
            return scheduled, True
        while self.running and len(scheduled) < self.max_num_batched_tokens:
            seq = self.running.popleft()
            while not self.block_manager.can_append(seq):
                if self.running:
                    self.preempt(self.running.pop())
                else:
                    self.preempt(seq)
                    break
            else:
                self.block_manager.may_append(seq)
                scheduled.append(seq)
        self.running.extendleft(reversed(scheduled))
        return scheduled, False

    def preempt(self, seq: Sequence) -> None:
        seq.status = "waiting"
        self.block_manager.deallocate(seq)
        self.waiting.appendleft(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[int], is_prefill: bool) -> None:
        """Append each sequence's sampled token; finish at EOS or max_tokens."""
        for seq, token in zip(seqs, token_ids, strict=True):
            if is_prefill:
                self.block_manager.publish(seq)
            seq.token_ids.append(token)
            if token == self.eos or seq.num_completion_tokens == seq.max_tokens:
                seq.status = "finished"
                self.block_manager.deallocate(seq)
                self.running.remove(seq)

    def abort(self, seq_id: str) -> None:
        for queue in (self.waiting, self.running):
            for seq in list(queue):
                if seq.seq_id == seq_id:
                    queue.remove(seq)
                    seq.status = "finished"
                    self.block_manager.deallocate(seq)
