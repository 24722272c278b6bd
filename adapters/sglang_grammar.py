"""The fakes behind structured output in the SGLang adapter: SGLang's own
GrammarManager runs (its grammar queue, its polling, its move of a request
whose grammar is ready to the waiting queue), with a grammar backend that
compiles nothing (`FakeGrammarBackend`: every grammar allows every token and
never terminates) and, in place of the backend's thread pool,
`adapters.step_executor.StepExecutor`, which finishes each compilation at the
step the workload names (`RequestSpec.grammar_ready`) or never.
"""

from __future__ import annotations

from typing import Any


def fake_backend(vocab_size: int) -> Any:
    """A FakeGrammarBackend (SGLang's BaseGrammarBackend, its cache and key
    functions as shipped) whose EBNF grammars compile to `FakeGrammar`s on a
    `StepExecutor` (the backend's `executor`)."""
    from sglang.srt.constrained.base_grammar_backend import BaseGrammarBackend, BaseGrammarObject

    from loopcheck.adapters.step_executor import StepExecutor

    class FakeGrammar(BaseGrammarObject):
        """Allows every token, never terminates."""

        def accept_token(self, token: int) -> None:
            pass

        def rollback(self, k: int) -> None:
            pass

        def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Any:
            import torch

            return torch.zeros((batch_size, (vocab_size + 31) // 32), dtype=torch.int32)

        def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
            pass

        @staticmethod
        def reset_vocab_mask(vocab_mask: Any) -> None:
            pass

        @staticmethod
        def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
            return vocab_mask

        @staticmethod
        def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
            pass

    class FakeGrammarBackend(BaseGrammarBackend):
        def __init__(self) -> None:
            super().__init__()
            self.executor.shutdown()
            self.executor = StepExecutor()
            self.vocab_size = vocab_size

        def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
            return FakeGrammar()

    return FakeGrammarBackend()
