"""Workload files and worked adapters. The top-level JSON files ship with loopcheck
as the package data of `loopcheck.examples` (see loopcheck/shipped.py)."""
