"""The one error type for bad user input (workload files, configs, requests)."""


class WorkloadError(ValueError):
    """Bad input; the message names the offending field and is shown as one line."""
