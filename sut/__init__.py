"""Systems under test: the protocol every scheduler is driven through, the one
driver loop, and the shipped adapters (reference model, torch engine, vLLM)."""
