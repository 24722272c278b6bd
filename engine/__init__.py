"""The real torch engine: looped LM, depth-aware paged KV cache, its own scheduler."""
