"""Torch kernels: batch-invariant linear, paged attention, KV write / gather / scatter."""
