"""The checks loopcheck runs on a driven system: each property lives in one
module here, and `checks.suite` picks the ones a run uses."""
