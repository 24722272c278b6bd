"""The loopcheck command line."""
