"""Bad user input: the error every layer raises for it."""


class WorkloadError(ValueError):
    """Bad input; the message names the offending field and is shown as one line."""
