"""The executable spec: vocabulary types and the pure-Python reference scheduler.

Nothing here imports torch, z3 or hypothesis.
"""
