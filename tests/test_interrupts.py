"""Ctrl-C and SIGTERM stop a long run cleanly: the summary so far, the reproduce
line, exit 130 / 143, no traceback, within seconds."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_fuzz_stops_cleanly(sig, code, tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "loopcheck.cli", "fuzz", "--adapter", "model", "--budget-seconds",
                             "120", "--seed", "3", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    while not any(line.startswith("[") for line in lines):   # the first progress line
        lines.append(proc.stderr.readline())
        assert lines[-1], "the run ended before its first progress line"
    proc.send_signal(sig)
    start = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 30
    assert proc.returncode == code
    assert "Traceback" not in err and "INTERRUPTED" in err and "reproduce: loopcheck fuzz" in err
    assert "examples" in out and "before the interrupt" in out
