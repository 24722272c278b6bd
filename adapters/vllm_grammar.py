"""The fakes behind structured output in the vLLM adapter: vLLM's own
StructuredOutputManager runs, with a grammar backend that compiles nothing
(`FakeGrammarBackend`: every grammar allows every token and never terminates)
and, in place of the manager's thread pool, `adapters.step_executor.StepExecutor`,
which finishes each compilation at the step the workload names
(`RequestSpec.grammar_ready`) or never, so that runs are deterministic. What the scheduler does while a grammar
compiles (WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR, the deferred queue) and once it
is ready is vLLM's code.
"""

from __future__ import annotations

from typing import Any

BACKEND = "loopcheck-fake"   # the backend name the adapter gives its requests' StructuredOutputsParams


class FakeGrammar:
    """A grammar that allows every token and never terminates (vLLM's
    StructuredOutputGrammar interface)."""

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return tokens

    def rollback(self, num_tokens: int) -> None:
        pass

    def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
        bitmask[batch_index].fill_(-1)

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        pass


class FakeGrammarBackend:
    """vLLM's StructuredOutputBackend interface: compiles `FakeGrammar`s and
    allocates an all-allowing bitmask over `vocab_size` tokens."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def compile_grammar(self, request_type: Any, grammar_spec: str, stop_token_ids: Any = None) -> FakeGrammar:
        return FakeGrammar()

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        import torch

        return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def destroy(self) -> None:
        pass
