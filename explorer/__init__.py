"""The explorer: exhaustive state-space exploration of a workload family on the
reference model (numbered states, 64-bit fingerprints, edges in arrays), the survey
that splits a family into head and tail, liveness (lassos, worst cases), figures
and lasso export.

It reads `loopcheck.model`; nothing in the model imports it.
"""
